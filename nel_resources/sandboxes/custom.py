"""The `custom` sandbox: a class of the user's, named by `class_path` (`pkg.module:Class` or
`pkg.module.Class`), built with the block's `config` mapping as keyword arguments.

The class is either a whole factory (`create`, `aclose`, `concurrency`: built once as
`Class(**config)`) or one sandbox (`start`, `exec`, `upload`, `download`, `stop`, `spec`: built
per problem as `Class(spec, **config)`). Anything else is refused when the factory is built,
before any request, naming the methods it lacks.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from nel_resources.config.benchmarks import SandboxConfig
from nel_resources.sandboxes.base import (
    FixedConcurrencyFactory,
    Sandbox,
    SandboxError,
    SandboxFactory,
    SandboxSpec,
)
from nel_resources.sandboxes.limits import Limits
from nel_resources.sandboxes.refusal import Refusal

_FACTORY = ("create", "aclose", "concurrency")
_SANDBOX = ("spec", "start", "exec", "upload", "download", "stop")


def load_class(class_path: str) -> type:
    """Import `pkg.module:Class` (or `pkg.module.Class`)."""
    module, sep, name = class_path.partition(":")
    if not sep:
        module, _, name = class_path.rpartition(".")
    try:
        obj = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as e:
        raise SandboxError(f"custom sandbox class_path {class_path!r} cannot be imported: {e}") from None
    if not inspect.isclass(obj):
        raise SandboxError(f"custom sandbox class_path {class_path!r} is not a class")
    return obj


class _PerProblemFactory(FixedConcurrencyFactory):
    """Makes one user sandbox per problem: `cls(spec, **config)`."""

    def __init__(self, cls: type, config: dict[str, Any], concurrency: int) -> None:
        self._cls, self._config = cls, config
        super().__init__(concurrency)

    def create(self, spec: SandboxSpec) -> Sandbox:
        sandbox = self._cls(spec, **self._config)
        if not isinstance(sandbox, Sandbox):
            raise SandboxError(f"{self._cls.__name__}(spec, ...) is not a nel Sandbox")
        return sandbox


def check_class(class_path: str) -> tuple[type, bool]:
    """Import the class and say whether it is a factory (True) or a sandbox (False); nothing
    is instantiated.

    Raises:
        SandboxError: it cannot be imported, or implements neither interface.
    """
    cls = load_class(class_path)
    if all(hasattr(cls, m) for m in _FACTORY):
        return cls, True
    missing = [m for m in _SANDBOX if not hasattr(cls, m)]
    if missing:
        raise SandboxError(f"custom sandbox {class_path!r} implements neither nel's Sandbox "
                           f"(missing: {', '.join(missing)}) nor a SandboxFactory "
                           f"({', '.join(_FACTORY)})")
    return cls, False


def refusal(cfg: SandboxConfig) -> Refusal | None:
    """Why this block cannot run (its `class_path` does not import or implements neither
    interface), or None; checked before any request."""
    try:
        check_class(str(cfg.class_path))
    except SandboxError as exc:
        return Refusal("class_path", str(exc))
    return None


def build(cfg: SandboxConfig, limits: Limits | None = None) -> SandboxFactory:
    """A `custom` factory from its block (the `make_factory` entry point); `limits` are the
    user class's business."""
    cls, is_factory = check_class(str(cfg.class_path))
    if is_factory:
        return cls(**cfg.config)  # type: ignore[no-any-return]
    return _PerProblemFactory(cls, dict(cfg.config), cfg.concurrency)
