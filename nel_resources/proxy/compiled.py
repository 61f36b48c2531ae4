"""A plain in-process chain compiled into one request function and one response function.

`Chain.before` / `Chain.after` carry each request through a `ProxyRequest`, a
`RequestContext` and a `ProxyResponse`, and call every hook through the object's fields:
~20 small costs of 0.1-0.9 us each, together more than the client's own work per request.
When nel's client runs a chain around its own transport and every hook that runs can
work on the bare parts, `compile_chain` builds, once per chain:

- a request function `bytes, session_id -> bytes`: parses the body once, runs each
  interceptor's `edit(body, session_id)` in chain order and encodes the result once (or
  returns the caller's bytes as they are when no hook changed the body, as `Chain.before`
  and the endpoint's `wire` would);
- a response function `status, body, latency_ms -> None`: each interceptor's
  `seen(status, body, latency_ms)` in the chain's response order, on the body the client
  already parsed (in place: `reasoning` splits it);
- the headers to send: nothing per request can change them (`payload_modifier`'s header
  edits do not depend on the body), so they are worked out here.

A hook whose config leaves it nothing to do was left out when the chain was built
(`idle_hooks`), so it is not in the compiled functions either. Anything the compiled
functions cannot express keeps the generic path: an async hook (`caching`), a hook
without `edit` / `seen` (a user interceptor, `logging`), another endpoint; streaming and
the proxy process always use `Chain` itself. Both paths call the same interceptor code
(each `on_request` / `on_response` is a thin wrapper over its `edit` / `seen`), so what
the server receives, what the client gets and every counter are the same
(`tests/nel_resources/proxy/test_compiled.py` runs both over the same requests).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from nel_resources.proxy.chain import Chain

# (body, session_id) -> the body when changed (possibly a new dict), None when not.
RequestStep = Callable[[dict[str, Any], str | None], dict[str, Any] | None]
# (status, body, latency_ms) -> ignored; raises InterceptorError to refuse the answer.
ResponseStep = Callable[[int, Any, float], Any]


@dataclass(frozen=True, slots=True)
class CompiledChain:
    """A chain's stages as two functions over the request's and the answer's parts.

    Attributes:
        request: the caller's encoded body and session id -> the bytes to send;
            raises what a hook raises (InterceptorError for a refusal).
        response: runs the response hooks on (status, body, latency_ms); a dict body
            is changed in place.
        headers: the headers to send with every request (the endpoint's extra headers
            and the hooks' edits).
        path: the API path below the base URL.
    """

    request: Callable[[bytes, str | None], bytes]
    response: Callable[[int, Any, float], None]
    headers: dict[str, str]
    path: str


def compile_chain(chain: Chain, path: str) -> CompiledChain | None:
    """`chain` compiled for a caller that sends through its own transport, or None when
    some hook that runs needs the generic path (see the module's docstring)."""
    from nel_resources.proxy.chain import _active
    from nel_resources.proxy.endpoint import ClientEndpoint

    endpoint = chain.endpoint
    if not chain.plain or type(endpoint) is not ClientEndpoint:
        return None
    edits: list[_Edit] = []
    headers: dict[str, str] = {}
    for lk in chain.links:
        if not _active(lk.impl, "on_request"):
            continue
        edit = _part(lk.impl, "on_request", "edit")
        if edit is None:
            return None
        edits.append(_Edit(edit, getattr(lk.impl, "always_changes", False)))
        edit_headers = getattr(lk.impl, "edit_headers", None)
        if edit_headers is not None:
            headers = edit_headers(headers)
    seen: list[ResponseStep] = []
    for lk in reversed(chain.links):
        if not _active(lk.impl, "on_response"):
            continue
        fn = _part(lk.impl, "on_response", "seen")
        if fn is None:
            return None
        seen.append(fn)
    if endpoint.extra_headers:  # as `ClientEndpoint.wire`: the hooks' headers win
        headers = {**endpoint.extra_headers, **headers}
    return CompiledChain(_request_fn(edits, endpoint.extra_body, chain.raw_requests),
                         _response_fn(seen), headers, path)


@dataclass(frozen=True, slots=True)
class _Edit:
    """One request hook's `edit`, and whether it changes every body (then no later test
    of whether the body changed is needed)."""

    fn: RequestStep
    always_changes: bool


def _part(impl: Any, hook: str, part: str) -> Any:
    """`impl`'s bound `part` (`edit` / `seen`) when its `hook` is the wrapper over it that
    the same class defines; None when the hook was replaced (a subclass that overrides
    `on_request` only, a hook set on the instance) or there is no such part."""
    if hook in getattr(impl, "__dict__", ()):
        return None
    for cls in type(impl).__mro__:
        defined = vars(cls)
        if hook in defined or part in defined:
            return getattr(impl, part) if hook in defined and part in defined else None
    return None


# The compiled functions are straight-line code, made from this module's own templates
# below (never from config text: the names in them are `e0`, `e1`, ... bound to the
# hooks), so a request pays the hooks' calls and nothing per hook around them.
def _request_fn(edits: list[_Edit], extra_body: dict[str, Any], keep_raw: bool
                ) -> Callable[[bytes, str | None], bytes]:
    lines = ["def request(raw, session_id):",
             # A fresh parse per request: hooks edit bodies in place, and the caller may
             # share one encoded body between a problem's repeats.
             "    body = loads(raw)"]
    changed = False  # known, at this line, that some edit changed the body
    tracked = False  # the function tracks whether the body changed (`changed` local)
    for i, e in enumerate(edits):
        call = f"e{i}(body, session_id)"
        if e.always_changes:
            lines.append(f"    body = {call}")
            changed = True
        elif changed:
            lines += [f"    out = {call}", "    if out is not None:", "        body = out"]
        else:
            if not tracked:
                lines.append("    changed = False")
                tracked = True
            lines += [f"    out = {call}", "    if out is not None:",
                      "        body = out", "        changed = True"]
    if extra_body:  # as `ClientEndpoint.wire`: added after the hooks, then encoded
        lines += ["    body.update(extra_body)", "    return dumps(body)"]
    elif changed or not keep_raw:
        lines.append("    return dumps(body)")
    elif edits:
        # The caller's bytes still encode the body when no hook changed it: sent as they are.
        lines.append("    return dumps(body) if changed else raw")
    else:
        lines.append("    return raw")
    names: dict[str, Any] = {f"e{i}": e.fn for i, e in enumerate(edits)}
    names.update(loads=orjson.loads, dumps=orjson.dumps, extra_body=extra_body)
    return _define("request", lines, names)


def _response_fn(seen: list[ResponseStep]) -> Callable[[int, Any, float], None]:
    lines = ["def response(status, body, latency_ms):"]
    lines += [f"    r{i}(status, body, latency_ms)" for i in range(len(seen))] or ["    pass"]
    return _define("response", lines, {f"r{i}": fn for i, fn in enumerate(seen)})


def _define(name: str, lines: list[str], names: dict[str, Any]) -> Any:
    """The function `name` that `lines` define, with `names` as its globals."""
    scope: dict[str, Any] = dict(names)
    exec(compile("\n".join(lines) + "\n", f"<compiled chain {name}>", "exec"), scope)
    return scope[name]
