"""A plain in-process chain compiled into one request function and one response function.

`Chain.before` / `Chain.after` carry each request through a `ProxyRequest`, a
`RequestContext` and a `ProxyResponse`, and call every hook through the object's fields.
Around the wire, with 64 requests in flight, each of those calls into another object's
code costs the client more than its own few instructions: the bench's chain (nine cheap
interceptors) added ~12 us of client CPU per request there, against ~5 us in a tight loop.
When nel's client runs a chain around its own transport and every hook that runs can
work on the bare parts, `compile_chain` builds, once per chain:

- a request function `bytes, session_id -> bytes`: parses the body once, runs each
  interceptor's request stage in chain order, and returns the bytes to send: the
  caller's when no hook changed the body (as `Chain.before` and the endpoint's `wire`
  would), else an encoding of the result (made once);
- a response function `status, body, latency_ms -> None`: each interceptor's response
  stage in the chain's response order, on the body the client already parsed (in place:
  `reasoning` splits it), the answer's `usage` read once;
- the headers to send: nothing per request can change them (`payload_modifier`'s header
  edits do not depend on the body), so they are worked out here.

Each stage is one function of straight-line source: a built-in interceptor gives its
stage as source lines (`inline_edit` / `inline_seen`, next to the `edit` / `seen` they
mirror), its config and state bound to names with its own prefix; the rare branches (a
turn budget spent, a reminder, a periodic log line, an answer with reasoning to split)
call into the same code the generic path runs. A hook without source lines is called
(`edit` / `seen`). A hook whose config leaves it nothing to do was left out when the chain
was built (`idle_hooks`). Anything else keeps the generic path: an async hook (`caching`),
a hook without `edit` / `seen` (a user interceptor, `logging`), a hook a subclass or
the instance replaced, another endpoint; streaming and the proxy process always use
`Chain` itself. `tests/nel_resources/proxy/test_compiled.py` runs both paths over the
same requests and compares what the server receives, what the client gets, the counters,
the turn counts and the log lines.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from nel_resources.proxy.chain import Chain


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
    edits: list[Any] = []
    headers: dict[str, str] = {}
    for lk in chain.links:
        if not _active(lk.impl, "on_request"):
            continue
        if _part(lk.impl, "on_request", "edit") is None:
            return None
        edits.append(lk.impl)
        edit_headers = getattr(lk.impl, "edit_headers", None)
        if edit_headers is not None:
            headers = edit_headers(headers)
    seen: list[Any] = []
    for lk in reversed(chain.links):
        if not _active(lk.impl, "on_response"):
            continue
        if _part(lk.impl, "on_response", "seen") is None:
            return None
        seen.append(lk.impl)
    if endpoint.extra_headers:  # as `ClientEndpoint.wire`: the hooks' headers win
        headers = {**endpoint.extra_headers, **headers}
    return CompiledChain(_request_fn(edits, endpoint.extra_body, chain.raw_requests),
                         _response_fn(seen), headers, path)


def _part(impl: Any, hook: str, part: str) -> Any:
    """`impl`'s bound `part` (`edit` / `seen` / `inline_edit` / `inline_seen`) when its
    `hook` and `part` come from the same class; None when the hook was replaced (a
    subclass that overrides `on_request` only, a hook set on the instance) or there is
    no such part."""
    if not _own_method(impl, hook):
        return None
    for cls in type(impl).__mro__:
        defined = vars(cls)
        if hook in defined or part in defined:
            return getattr(impl, part) if hook in defined and part in defined else None
    return None


def _own_method(impl: Any, hook: str) -> bool:
    """Whether `impl.hook` is its class's method bound to it (not something set on the
    instance), found without reading `impl.__dict__`: in CPython 3.11 that read turns the
    instance's attributes into a plain dict for good, and every later read and write of
    them costs ~2.5x as much: the counters the compiled stages update on every answer
    (response_stats, log_tokens, progress_tracking) cost ~2x as much there."""
    bound = getattr(impl, hook, None)
    return (getattr(bound, "__self__", None) is impl
            and getattr(bound, "__func__", None) is getattr(type(impl), hook, None))


# The compiled functions are straight-line source put together here from each hook's
# `inline_edit` / `inline_seen` (its own code as source lines, with its config and state
# bound to names that start with the hook's prefix: `q3_`, `r1_`), or a call of its `edit`
# / `seen` when it has none. No text from a config goes into the source, only into the
# bound names. In the loop around the wire a request's work is spread over 64 others', so
# every call into another object's code costs more than its own few instructions: one
# function per stage was ~2x less client CPU than one call per hook there.
def _request_fn(hooks: list[Any], extra_body: dict[str, Any], keep_raw: bool
                ) -> Callable[[bytes, str | None], bytes]:
    # Locals the hooks' lines share: `body`; `changed`, which a hook's lines set (a line
    # `changed = True`, nothing else) whenever they change the body or replace it; and
    # `encoded`, bytes a hook's lines made that encode the body as it is then (the
    # search of `payload_modifier`), None once a later hook changes it.
    lines = ["def request(raw, session_id):",
             # A fresh parse per request: hooks edit bodies in place, and the caller may
             # share one encoded body between a problem's repeats.
             "    body = loads(raw)",
             "    changed = False",
             "    encoded = None"]
    names: dict[str, Any] = {"loads": orjson.loads, "dumps": orjson.dumps, "extra_body": extra_body}
    may_encode = False  # whether an earlier hook's lines may have set `encoded`
    for i, impl in enumerate(hooks):
        p = f"q{i}_"
        inline = _part(impl, "on_request", "inline_edit")
        if inline is not None:
            src, used = inline(p)
        else:
            src, used = ([f"out = {p}edit(body, session_id)", "if out is not None:",
                          "    body = out", "    changed = True"], {f"{p}edit": impl.edit})
        for ln in src:
            lines.append("    " + ln)
            if may_encode and ln.strip() == "changed = True":  # the bytes no longer encode it
                lines.append("    " + ln[:len(ln) - len(ln.lstrip())] + "encoded = None")
        may_encode = may_encode or any(ln.strip().startswith("encoded = ") for ln in src)
        names.update(_prefixed(p, used))
    if extra_body:  # as `ClientEndpoint.wire`: added after the hooks, then encoded
        lines += ["    body.update(extra_body)", "    return dumps(body)"]
    elif keep_raw:
        # The caller's bytes still encode the body when no hook changed it: sent as they
        # are; else bytes a hook made of the body as it went on, else a new encoding.
        lines += ["    if not changed:", "        return raw",
                  "    return encoded if encoded is not None else dumps(body)"]
    else:
        lines.append("    return encoded if encoded is not None else dumps(body)")
    return _define("request", lines, names)


# An answer's `usage` as `streams.usage_of` reads it for an answer not assembled from a
# stream (so nothing counted on one): the body's own, when it is a mapping. Worked out
# once for every hook that reads it (no compiled hook changes it).
_USAGE = ["    usage = body.get('usage') if body.__class__ is dict or isinstance(body, dict) else None",
          "    if usage.__class__ is not dict and not isinstance(usage, dict):",
          "        usage = None"]


def _response_fn(hooks: list[Any]) -> Callable[[int, Any, float], None]:
    lines = ["def response(status, body, latency_ms):"]
    names: dict[str, Any] = {}
    usage = False
    for i, impl in enumerate(hooks):
        p = f"r{i}_"
        inline = _part(impl, "on_response", "inline_seen")
        if inline is not None:
            src, used = inline(p)
            if getattr(impl, "reads_usage", False) and not usage:
                lines += _USAGE
                usage = True
        else:
            src, used = [f"{p}seen(status, body, latency_ms)"], {f"{p}seen": impl.seen}
        lines += ["    " + ln for ln in src]
        names.update(_prefixed(p, used))
    lines.append("    return None")
    return _define("response", lines, names)


def _prefixed(p: str, names: dict[str, Any]) -> dict[str, Any]:
    """`names`, checked to all start with the hook's prefix `p` (no hook's names can
    shadow another's, or this module's)."""
    bad = [n for n in names if not n.startswith(p)]
    if bad:
        raise AssertionError(f"compiled chain: names {bad} do not start with {p!r}")
    return names


def _define(name: str, lines: list[str], names: dict[str, Any]) -> Any:
    """The function `name` that `lines` define, with `names` as its globals."""
    scope: dict[str, Any] = dict(names)
    source = "\n".join(lines) + "\n"
    exec(compile(source, f"<compiled chain {name}>", "exec"), scope)
    fn = scope[name]
    fn.source = source  # for reading what a chain compiled to (tests, debugging)
    return fn
