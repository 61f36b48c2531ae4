"""The interceptor interface: requests, responses, stream chunks and what an interceptor is.

An interceptor is any object with one or more of these hooks, each a plain or an async
method (checked once, when the chain is built, so a request pays no `isinstance` per
stage, and a hook that never awaits costs no coroutine: the built-in ones are plain):

- `on_request(req)` returns the (possibly changed) request, or a `ProxyResponse` to answer
  without calling the model (the cache does that);
- `on_response(resp)` returns the (possibly changed) response; response hooks run in
  reverse order, like NeMo Evaluator's adapter pipeline;
- `on_chunk(chunk, ctx)` sees each streamed chunk (a parsed SSE `data:` object) and returns
  it (changed or not), or None to drop it;
- `on_failure(ctx, status, message)` (plain) hears of a request that got no answer (the
  upstream failed after the client's retries: its last status, 504 for a timeout, else
  502); `http_pairs_dump` records it, as 0.3.0 records such an answer;
- `collects_streams` (optional, True): a streamed request through the chain is answered
  with the whole answer collected from the upstream's stream (`streaming`);
- `close()` releases what it holds; `stats()` returns counters for runtime stats;
- `idle_hooks` (optional, a collection of hook names): hooks its config leaves nothing to
  do in (`drop_params` with no params); the chain leaves them out when it is built, so a
  request does not pay for calling them;
- `reports_changes` (optional, a collection of hook names): hooks that either leave the
  body as it is or set the request's / response's `raw` to None when they change it. The
  proxy forwards the bytes it received (`raw`) instead of re-encoding the body only when
  every hook that ran says so; a hook without the declaration costs a re-encode, never a
  stale body. A reporting request hook that encoded the body anyway (`payload_modifier`
  searches its encoding) may leave those bytes in a `raw` that is None: they encode the
  body as it is, and a later hook that changes it drops them. `raw` is read once the
  request stage is over (the chain drops it then unless every hook reported), never
  by a hook in the middle of it.
- `sees_final_request` (optional, True): its request stage runs after every other one
  (the request as it will be sent: `caching` keys by it), so its response stage runs
  first; `bind_endpoint(endpoint)` (optional) is called with the chain's endpoint when the
  chain is built.
- `edit(body, session_id)` and `seen(status, body, latency_ms, extra, cached)`
  (optional): the request / response stage on the bare parts, for the compiled
  in-process chain (`compiled.py`). `edit` returns the body when it changed it (possibly a
  new dict) and None when it left it byte-for-byte alone; `seen` edits a dict body in
  place. A built-in's `on_request` / `on_response` is a thin wrapper over them, so both
  paths run the same code; an interceptor without them keeps the generic path.
  `edit_headers(headers)` (optional) gives the headers a request stage sends when they
  do not depend on the body (worked out once, when compiled). `inline_edit(prefix)` /
  `inline_seen(prefix)` (optional) give the same stage as source lines for the compiled
  function, with the names they use (`compiled.py`); `reads_usage` says such lines read
  the answer's usage as `usage`.

The request and response are plain dataclasses with slots: the chain is on the hot path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(slots=True)
class RequestContext:
    """What the caller knows about a request that is not in its body.

    Attributes:
        session_id: the conversation this request belongs to (nel's sample id
            `"<problem>:<repeat>"`, or an agent's session); None when unknown.
        repeat: the sample's repeat index (the cache keeps repeats apart by it).
        extra: free space for interceptors to hand data to later stages.
    """

    session_id: str | None = None
    repeat: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class ProxyRequest:
    """One request on its way to the model.

    Attributes:
        body: the JSON body (interceptors edit it in place or replace it).
        headers: headers to add to (or override on) the endpoint's own.
        path: the API path below the base URL (`/chat/completions`, ...).
        ctx: the request's context.
        stream: whether the caller wants the answer streamed.
        raw: the bytes `body` was parsed from, while they still encode it (None once a
            hook changed the body, or when there are none): sent as they are.
    """

    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    path: str = "/chat/completions"
    ctx: RequestContext = field(default_factory=RequestContext)
    stream: bool = False
    raw: bytes | None = None


@dataclass(slots=True)
class ProxyResponse:
    """One answer on its way back.

    Attributes:
        status: the HTTP status.
        body: the parsed JSON body (a dict), or the raw bytes of a non-JSON answer.
        latency_ms: time the endpoint took (0 for a cache hit).
        attempts: requests the endpoint sent for it (0 for a cache hit).
        ctx: the request's context.
        cached: True when the cache answered.
        raw: the (redacted) bytes the upstream sent for a dict `body`, while they still
            encode it (None once a hook changed the body): the proxy answers with them.
    """

    status: int
    body: dict[str, Any] | bytes
    latency_ms: float = 0.0
    attempts: int = 1
    ctx: RequestContext = field(default_factory=RequestContext)
    cached: bool = False
    raw: bytes | None = None

    @property
    def ok(self) -> bool:
        """A 2xx answer."""
        return 200 <= self.status < 300


class InterceptorError(Exception):
    """An interceptor refused a request for good (a turn budget spent, a client error
    raised on purpose); the caller records it, it is never retried."""

    def __init__(self, interceptor: str, message: str, *, fatal: bool = False) -> None:
        super().__init__(f"{interceptor}: {message}")
        self.interceptor = interceptor
        self.fatal = fatal


@runtime_checkable
class RequestHook(Protocol):
    """Has a request stage."""

    async def on_request(self, req: ProxyRequest) -> ProxyRequest | ProxyResponse: ...


@runtime_checkable
class ResponseHook(Protocol):
    """Has a response stage."""

    async def on_response(self, resp: ProxyResponse) -> ProxyResponse: ...


@runtime_checkable
class ChunkHook(Protocol):
    """Has a streaming stage."""

    async def on_chunk(self, chunk: dict[str, Any], ctx: RequestContext) -> dict[str, Any] | None: ...


class Endpoint(Protocol):
    """The last link: sends a request to the model and returns its answer."""

    async def send(self, req: ProxyRequest) -> ProxyResponse: ...
