"""Shared pieces of the config schema: the strict base model, the error type, key checks."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic_core import PydanticCustomError

from benchmarks.errors import NelError


class ConfigError(NelError):
    """An invalid config: the message names file, line and key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The valid spelling nearest to a typo, if one is close enough."""
    found = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.6)
    return found[0] if found else None


def key_error(key: str, message: str) -> PydanticCustomError:
    """An error about one key *inside* the model being validated.

    The formatter appends `key` to the error's location, so the reported line is the
    key's own line rather than the line of the block holding it.
    """
    return PydanticCustomError("nel_key", message, {"key": key})


def field_defaults(model: type[BaseModel]) -> dict[str, Any]:
    """Each field's default value (factories called), to tell a set key from a dumped one."""
    out: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        if info.default_factory is not None:
            out[name] = info.default_factory()  # type: ignore[call-arg]
        elif not info.is_required():
            out[name] = info.default
    return out


def _as_plain(value: Any) -> Any:
    """A value in the form `model_dump(mode="json")` writes it (tuples become lists)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, (list, tuple)):
        return [_as_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_plain(v) for k, v in value.items()}
    return value


def check_type_keys(data: Any, kind: str, allowed: Mapping[str, frozenset[str]],
                    default_type: str | None, defaults: Mapping[str, Any] | None = None, *,
                    all_keys: frozenset[str] | None = None) -> None:
    """Refuse keys that exist in the schema but not for this `type:` of block.

    One flat model per concept keeps downstream code simple; this check keeps the
    per-type strictness of NeMo Evaluator's tagged unions (a `gym_service` on a
    `simple` solver is an error, not silently dropped). A key left at its default (as in
    `model_dump()` output read back) passes.
    """
    if not isinstance(data, dict):
        return
    typ = data.get("type", default_type)
    if not isinstance(typ, str) or typ not in allowed:
        return
    ok = allowed[typ]
    # `all_keys`: every key of the block's schema, so a lazy `allowed` (one entry looked up)
    # is not read whole.
    all_keys = set(all_keys) if all_keys is not None else set().union(*allowed.values()) | set(defaults or {})
    defaults = defaults or {}
    for key, value in data.items():
        # A dumped config holds every field at its default: only a set value is an error.
        if key in defaults and _as_plain(value) == _as_plain(defaults[key]):
            continue
        # A key of no type at all is left to pydantic's unknown-key error (with a suggestion).
        if key != "type" and key not in ok and key in all_keys:
            valid = {k for k in ok if k != "type"}
            near = closest(str(key), valid)
            hint = f"did you mean {near!r}?" if near else f"valid keys: {', '.join(sorted(valid))}"
            raise key_error(str(key), f"{kind} of type {typ!r} has no key {key!r}; {hint}")
