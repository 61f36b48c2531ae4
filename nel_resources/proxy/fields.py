"""Typed config fields of an interceptor, checked once when the config is loaded.

An error names the interceptor and the field in one line, so the config loader can point
at the field's line in the YAML file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

REQUIRED: Any = object()


class InterceptorConfigError(ValueError):
    """A bad `config:` of one interceptor: `field` is None when the name itself is wrong."""

    def __init__(self, interceptor: str, field: str | None, message: str) -> None:
        where = f"interceptor {interceptor!r}" + (f" field {field!r}" if field else "")
        super().__init__(f"{where}: {message}")
        self.interceptor = interceptor
        self.field = field
        self.message = message


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One config field: its kind (`str`, `int`, `float`, `bool`, `list[str]`, `list[int]`,
    `dict`, `dict[str,str]`, `dict[str,dict]`), default, allowed values and lower bound."""

    kind: str
    default: Any = REQUIRED
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    nullable: bool = False


def _kind_ok(kind: str, v: Any) -> bool:
    if kind == "str":
        return isinstance(v, str)
    if kind == "bool":
        return isinstance(v, bool)
    if kind == "int":
        return isinstance(v, int) and not isinstance(v, bool)
    if kind == "float":
        return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    if kind == "list[str]":
        return isinstance(v, list) and all(isinstance(x, str) for x in v)
    if kind == "list[int]":
        return isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
    if kind == "dict":
        return isinstance(v, dict)
    if kind == "dict[str,str]":
        return isinstance(v, dict) and all(isinstance(x, str) for x in v.values())
    if kind == "dict[str,dict]":
        return isinstance(v, dict) and all(isinstance(x, dict) for x in v.values())
    raise AssertionError(f"unknown field kind {kind}")


_KIND_TEXT = {"str": "a string", "bool": "true or false", "int": "an integer", "float": "a number",
              "list[str]": "a list of strings", "list[int]": "a list of integers",
              "dict": "a mapping", "dict[str,str]": "a mapping of strings",
              "dict[str,dict]": "a mapping of mappings"}


def check_fields(name: str, fields: Mapping[str, FieldSpec], config: Mapping[str, Any]) -> dict[str, Any]:
    """The config with defaults filled in; raises InterceptorConfigError on the first bad field."""
    out: dict[str, Any] = {}
    for key in config:
        if key not in fields:
            known = ", ".join(sorted(fields)) or "none"
            raise InterceptorConfigError(name, key, f"unknown field (known fields: {known})")
    for key, spec in fields.items():
        if key not in config:
            if spec.default is REQUIRED:
                raise InterceptorConfigError(name, key, f"is required ({_KIND_TEXT[spec.kind]})")
            out[key] = spec.default
            continue
        v = config[key]
        if v is None and spec.nullable:
            out[key] = None
            continue
        if not _kind_ok(spec.kind, v):
            raise InterceptorConfigError(name, key, f"must be {_KIND_TEXT[spec.kind]}, not {v!r}")
        if spec.choices is not None and v not in spec.choices:
            raise InterceptorConfigError(name, key, f"must be one of {', '.join(map(str, spec.choices))}, "
                                                    f"not {v!r}")
        if spec.minimum is not None and v < spec.minimum:
            raise InterceptorConfigError(name, key, f"must be at least {spec.minimum:g}, not {v!r}")
        out[key] = v
    return out
