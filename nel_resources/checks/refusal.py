"""The refusal exceptions the checks raise internally, and their one-line message."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from nel_resources.config import ConfigError, NelConfig


class Refusal(Exception):
    """A key whose feature nel lacks: `key <path>: <feature> is not supported yet in nel;
    <instead>`."""

    def __init__(self, path: tuple[Any, ...], feature: str, instead: str) -> None:
        super().__init__(feature)
        self.path, self.feature, self.instead = path, feature, instead


class Unavailable(Refusal):
    """A feature that exists but cannot run on this machine: `<what>; <fix>`, without
    "not supported yet"."""


def changed(model: BaseModel, name: str, defaults: dict[str, Any]) -> bool:
    """Whether `name` is set to something other than its default (a dumped default passes)."""
    value = getattr(model, name)
    return name in defaults and value != defaults[name] and value not in (None, [], {})


def key_path(path: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in path)


def at_key(cfg: NelConfig, path: tuple[Any, ...], message: str) -> ConfigError:
    """`file:line: key <path>: <message>`."""
    return ConfigError(f"{cfg._where}:{cfg.line_of(*path) or '?'}: key {key_path(path)}: {message}")


def as_config_error(cfg: NelConfig, r: Refusal) -> ConfigError:
    """The one line a refusal becomes."""
    if isinstance(r, Unavailable):
        return at_key(cfg, r.path, f"{r.feature}; {r.instead}")
    return at_key(cfg, r.path, f"{r.feature} is not supported yet in nel; {r.instead}")
