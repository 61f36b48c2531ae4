"""Interceptor names -> their modules (NeMo Evaluator 0.3.0's names), and user interceptors.

A built-in module exposes `FIELDS` (its config fields), `AFFECTS_ANSWERS` (whether it can
change what the model answers: such interceptors go into the shard fingerprint) and
`build(config, env)`. A user interceptor is a factory decorated with `@interceptor`, named
in the config as `package.module:factory` (or by the name it was registered under); its
config is passed as keyword arguments.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from benchmarks.registries import Registry
from nel_resources.proxy.env import ChainEnv
from nel_resources.proxy.fields import FieldSpec, InterceptorConfigError, check_fields

# interceptor name -> "module:build" (the module also holds FIELDS and AFFECTS_ANSWERS);
# `endpoint`, the chain's last stage, is built by the chain itself: its entry is its class.
BUILTIN: Registry[Callable[..., Any]] = Registry("interceptor", {
    "endpoint": "nel_resources.proxy.endpoint:ClientEndpoint",
    **{name: f"nel_resources.proxy.{module}:build" for name, module in {
        "caching": "caching", "turn_counter": "turn_counter",
        "drop_params": "drop_params", "modify_tools": "modify_tools",
        "system_message": "system_message", "payload_modifier": "payload_modifier",
        "raise_client_errors": "raise_client_errors", "log_tokens": "log_tokens",
        "response_stats": "response_stats", "reasoning": "reasoning",
        "progress_tracking": "progress_tracking", "logging": "request_logging",
        "consolidate_system": "consolidate_system", "reasoning_replay": "reasoning_replay",
        "streaming": "streaming", "http_pairs_dump": "http_pairs_dump",
    }.items()}})
# NeMo Evaluator 0.3.0 interceptors nel does not have: refused by name, never ignored
# (none today: all of 0.3.0's seventeen are built).
UNBUILT: dict[str, str] = {}
_USER: dict[str, Callable[..., Any]] = {}


@dataclass(frozen=True)
class InterceptorInfo:
    """What `@interceptor` records on a user factory."""

    name: str
    affects_answers: bool


def interceptor(name: str | None = None, *, affects_answers: bool = True
                ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a user interceptor factory.

    The factory takes the interceptor's `config:` as keyword arguments and returns an
    object with any of the hooks `on_request`, `on_response`, `on_chunk`, plain or async (see
    `nel_resources.proxy.types`). Example::

        @interceptor("shout")
        def shout(suffix: str = "!"):
            class Shout:
                async def on_request(self, req):
                    req.body["messages"][-1]["content"] += suffix
                    return req
            return Shout()

    Args:
        name: the name configs use (default: the factory's `module:function` path).
        affects_answers: False for interceptors that only observe (they then stay out of
            the shard fingerprint, so adding one does not rerun finished shards).
    """
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        info = InterceptorInfo(name or f"{fn.__module__}:{fn.__qualname__}", affects_answers)
        fn.__nel_interceptor__ = info  # type: ignore[attr-defined]
        _USER[info.name] = fn
        return fn
    return wrap


def _module(name: str) -> ModuleType:
    return importlib.import_module(BUILTIN.target(name).split(":", 1)[0])


def _user_factory(name: str) -> Callable[..., Any]:
    if name in _USER:
        return _USER[name]
    if ":" not in name:
        known = ", ".join(sorted(BUILTIN))
        raise InterceptorConfigError(name, None, f"unknown interceptor (built in: {known}; "
                                     "a user interceptor is written `package.module:factory`)")
    mod_name, _, attr = name.partition(":")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as exc:
        raise InterceptorConfigError(name, None, f"cannot import {mod_name}: {exc}") from None
    fn = getattr(mod, attr, None)
    if not callable(fn):
        raise InterceptorConfigError(name, None, f"{mod_name} has no callable {attr!r}")
    return fn


def _user_fields_check(name: str, fn: Callable[..., Any], config: Mapping[str, Any]) -> None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    params = sig.parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    for key in config:
        if key not in params:
            raise InterceptorConfigError(name, key, f"unknown field (the factory takes: "
                                         f"{', '.join(params) or 'nothing'})")
    for p in params.values():
        if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) \
                and p.name not in config:
            raise InterceptorConfigError(name, p.name, "is required")


def validate(name: str, config: Mapping[str, Any], *, refuse_unbuilt: bool = True) -> dict[str, Any]:
    """Check one interceptor's name and config; the config with defaults filled in.

    With `refuse_unbuilt=False` (loading a config) an interceptor nel does not have passes
    as written: the config still loads, and `check_supported` refuses it before a run.

    Raises:
        InterceptorConfigError: naming the interceptor and the field.
    """
    if name in UNBUILT:
        if not refuse_unbuilt:
            return dict(config)
        raise InterceptorConfigError(name, None, f"{UNBUILT[name]} is not supported yet in nel; "
                                     "remove this interceptor")
    if name in BUILTIN:
        fields: Mapping[str, FieldSpec] = _module(name).FIELDS
        return check_fields(name, fields, config)
    _user_fields_check(name, _user_factory(name), config)
    return dict(config)


def affects_answers(name: str) -> bool:
    """Whether the interceptor can change the model's answers (fingerprinted) or only observes."""
    if name in BUILTIN:
        return bool(_module(name).AFFECTS_ANSWERS)
    try:
        info = getattr(_user_factory(name), "__nel_interceptor__", None)
    except InterceptorConfigError:
        return True
    return True if info is None else info.affects_answers


def build(name: str, config: Mapping[str, Any], env: ChainEnv) -> Any:
    """An interceptor instance from its name and config."""
    cfg = validate(name, config)
    if name in BUILTIN:
        try:
            return _module(name).build(cfg, env)
        except ValueError as exc:
            raise InterceptorConfigError(name, None, str(exc)) from None
    return _user_factory(name)(**cfg)
