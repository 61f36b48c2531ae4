"""The chain runner: request hooks in order, the endpoint, response hooks in reverse.

Order follows NeMo Evaluator's adapter pipeline: interceptors with a request stage first
(in config order), then the endpoint, then response-only interceptors; response hooks run
over that list in reverse. A request hook that returns a response (a cache hit) skips the
rest of the request stage and the endpoint; every response hook still sees the answer.

The chain is transport-free: `run(request) -> response` and `stream(request) -> chunks`,
so an HTTP server can wrap it as well as nel's own client.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Any, NamedTuple

from nel_resources.proxy import registry
from nel_resources.proxy.env import ChainEnv
from nel_resources.proxy.streams import StreamAssembler, replay_chunks, wants_usage
from nel_resources.proxy.types import (
    Endpoint,
    InterceptorError,
    ProxyRequest,
    ProxyResponse,
    RequestContext,
)


class ClientBinding(NamedTuple):
    """What a chain is to one nel client (`Chain.bind_client`; the client reads it as its
    `model_client.chain_binding.ChainBinding`)."""

    inline: bool
    compiled: Any
    refusal: type[Exception]
    request_type: type
    context_type: type
    response_type: type


@dataclass(frozen=True)
class Link:
    """One configured interceptor of a chain."""

    name: str
    impl: Any


class Chain:
    """An interceptor chain bound to one endpoint.

    Attributes:
        plain: none of the request and response hooks that run is async, so a
            request goes through the chain in plain calls only.
    """

    def __init__(self, links: Sequence[Link], endpoint: Endpoint) -> None:
        req_side = [lk for lk in links if hasattr(lk.impl, "on_request")]
        resp_only = [lk for lk in links if not hasattr(lk.impl, "on_request")]
        # A hook that must see the request as it is sent (`caching` keys by it) runs its
        # request stage after every other one, wherever the config put it; so its response
        # stage runs first, on the upstream's answer as it came.
        last = [lk for lk in req_side if getattr(lk.impl, "sees_final_request", False)]
        if last:
            req_side = [lk for lk in req_side if lk not in last] + last
        self.links = tuple(req_side + resp_only)
        self.endpoint = endpoint
        for lk in self.links:
            bind = getattr(lk.impl, "bind_endpoint", None)
            if bind is not None:
                bind(endpoint)
        # Bound methods collected once, each with whether it must be awaited: a plain hook
        # is called without making a coroutine, so a request pays only the hooks' own work.
        # An interceptor whose config makes a hook a no-op says so (`idle_hooks`), and the
        # hook is left out here rather than called on every request.
        self._on_request = _hooks(lk.impl.on_request for lk in self.links
                                  if _active(lk.impl, "on_request"))
        self._on_response = _hooks(lk.impl.on_response for lk in reversed(self.links)
                                   if _active(lk.impl, "on_response"))
        self._on_chunk = _hooks(lk.impl.on_chunk for lk in self.links if _active(lk.impl, "on_chunk"))
        self._send = endpoint.send
        # When no request or response hook is async (the built-in ones are all plain but
        # `caching`), `run` loops over the bound methods alone (no flag tested per hook),
        # and `before`/`after` run the stages as plain calls.
        self.plain = not any(a for _, a in self._on_request + self._on_response)
        self._before = tuple(fn for fn, _ in self._on_request)
        self._after = tuple(fn for fn, _ in self._on_response)
        # Whether a request's / response's `raw` bytes can outlive its stage: only when
        # every hook that runs in it reports its changes (`types.py`); otherwise the chain
        # drops them at the end of the stage and the body is encoded again.
        self.raw_requests = all(_reports(lk.impl, "on_request") for lk in self.links
                                if _active(lk.impl, "on_request"))
        self.raw_responses = all(_reports(lk.impl, "on_response") for lk in self.links
                                 if _active(lk.impl, "on_response"))
        # Hooks told of an exchange that got no answer (the upstream failed after its
        # retries): `on_failure(ctx, status, message)`; `http_pairs_dump` records it.
        self._on_failure = tuple(lk.impl.on_failure for lk in self.links
                                 if hasattr(lk.impl, "on_failure"))
        # `streaming` in the chain: a streamed request is answered whole (`run`).
        self.collects_streams = any(getattr(lk.impl, "collects_streams", False) for lk in self.links)

    @property
    def names(self) -> tuple[str, ...]:
        """The interceptors' names, in chain order."""
        return tuple(lk.name for lk in self.links)

    def before(self, req: ProxyRequest) -> ProxyRequest | ProxyResponse:
        """The request stage of a `plain` chain, as a plain call: the request to send, or
        the answer a hook gave instead (a cache hit). For a caller that sends by itself
        (nel's client around its own transport): no coroutine level between its wait on
        the wire and the event loop."""
        for hook in self._before:
            req = hook(req)
            if req.__class__ is not ProxyRequest and isinstance(req, ProxyResponse):
                return req
        if not self.raw_requests:
            req.raw = None
        return req

    def after(self, resp: ProxyResponse) -> ProxyResponse:
        """The response stage of a `plain` chain, as a plain call (see `before`)."""
        for hook in self._after:
            resp = hook(resp)
        if not self.raw_responses:
            resp.raw = None
        return resp

    async def _request_stage(self, req: ProxyRequest) -> ProxyRequest | ProxyResponse:
        for hook, is_async in self._on_request:
            out = hook(req)
            if is_async:
                out = await out
            if isinstance(out, ProxyResponse):
                return out
            req = out
        return req

    async def _response_stage(self, resp: ProxyResponse) -> ProxyResponse:
        for hook, is_async in self._on_response:
            resp = hook(resp)
            if is_async:
                resp = await resp
        return resp

    async def run(self, req: ProxyRequest) -> ProxyResponse:
        """One request through the whole chain (a streamed one, when the chain collects
        streams, answered with the whole answer collected from the upstream's stream)."""
        if req.stream and self.collects_streams:
            return await self._collected(req)
        if self.plain:
            out = self.before(req)
            if isinstance(out, ProxyResponse):
                return self.after(out)
            try:
                resp = await self._send(out)
            except Exception as exc:
                self.failed(out.ctx, exc)
                raise
            return self.after(resp)
        # Both stages inlined (not `_request_stage`): two coroutines less per request.
        for hook, is_async in self._on_request:
            out = hook(req)
            if is_async:
                out = await out
            if isinstance(out, ProxyResponse):
                resp = out
                break
            req = out
        else:
            if not self.raw_requests:
                req.raw = None
            try:
                resp = await self._send(req)
            except Exception as exc:
                self.failed(req.ctx, exc)
                raise
        for hook, is_async in self._on_response:
            resp = hook(resp)
            if is_async:
                resp = await resp
        if not self.raw_responses:
            resp.raw = None
        return resp

    def failed(self, ctx: RequestContext, exc: BaseException) -> None:
        """Tell the `on_failure` hooks that the request of `ctx` got no answer: `exc` (the
        model client's error after its retries) with the upstream's last status, else 504
        for a timeout and 502 for anything else."""
        if not self._on_failure:
            return
        status = getattr(exc, "status", None)
        if not isinstance(status, int):
            status = 504 if getattr(exc, "category", None) == "timeout" else 502
        for hook in self._on_failure:
            hook(ctx, status, str(exc))

    async def _collected(self, req: ProxyRequest) -> ProxyResponse:
        """A streamed request, its answer collected whole (`streaming.py`)."""
        from nel_resources.proxy.streaming import collect

        req.raw = None  # the endpoint encodes a streamed request itself
        out = await self._request_stage(req)
        if not isinstance(out, ProxyResponse):
            stream = getattr(self.endpoint, "stream", None)
            out = await (self._send(out) if stream is None else collect(stream, out))
        return await self._response_stage(out)

    async def stream(self, req: ProxyRequest) -> AsyncIterator[dict[str, Any]]:
        """One streamed request: the request stage, then each chunk through the chunk hooks
        as it arrives; once the stream has ended, the response hooks see the whole answer
        (assembled from the upstream's chunks: `streams.py`), so tokens are logged and
        counted and the cache stores it.

        A request answered at the request stage (a cache hit) is replayed as a stream.
        """
        req.stream = True
        req.raw = None  # the endpoint encodes a streamed request itself (`"stream": true`)
        out = await self._request_stage(req)
        if isinstance(out, ProxyResponse):
            resp = await self._response_stage(out)
            if isinstance(resp.body, dict):
                for chunk in replay_chunks(resp.body, req.path, wants_usage(req.body)):
                    piece = await self._chunk_stage(chunk, resp.ctx)
                    if piece is not None:
                        yield piece
            return
        stream = getattr(self.endpoint, "stream", None)
        if stream is None:
            raise TypeError(f"{type(self.endpoint).__name__} cannot stream")
        whole = StreamAssembler(out.path)
        t0 = perf_counter()
        async for chunk in stream(out):
            whole.add(chunk)  # before the hooks: they may edit the chunk in place
            for hook, is_async in self._on_chunk:
                chunk = hook(chunk, out.ctx)
                if is_async:
                    chunk = await chunk
                if chunk is None:
                    break
            if chunk is not None:
                yield chunk
        # Only a stream that ended well gets here (a cut one raised, a client that left
        # closed this generator): the response hooks never see half an answer.
        await self._response_stage(whole.response((perf_counter() - t0) * 1000.0, out.ctx))

    async def _chunk_stage(self, chunk: dict[str, Any], ctx: RequestContext
                           ) -> dict[str, Any] | None:
        for hook, is_async in self._on_chunk:
            chunk = hook(chunk, ctx)
            if is_async:
                chunk = await chunk
            if chunk is None:
                return None
        return chunk

    def stats(self) -> dict[str, Any]:
        """The interceptors' counters, merged (for runtime stats and the bundle)."""
        out: dict[str, Any] = {}
        for lk in self.links:
            fn = getattr(lk.impl, "stats", None)
            if fn is not None:
                out.update(fn())
        return out

    def bind_client(self, client: Any, path: str) -> ClientBinding:
        """What this chain is to nel's `client` (whose requests go to `path`): run inline by
        `ModelClient.generate` when it is plain and ends at that client's own transport
        (compiled then, when its hooks allow), and the types the client builds and catches."""
        from nel_resources.proxy.compiled import compile_chain
        from nel_resources.proxy.endpoint import ClientEndpoint

        endpoint = self.endpoint
        inline = self.plain and isinstance(endpoint, ClientEndpoint) and endpoint.client is client
        return ClientBinding(inline, compile_chain(self, path) if inline else None, InterceptorError,
                            ProxyRequest, RequestContext, ProxyResponse)

    async def close(self) -> None:
        """Close the interceptors that hold resources (webhook posts, cache writes)."""
        for lk in reversed(self.links):
            fn = getattr(lk.impl, "close", None)
            if fn is not None:
                res = fn()
                if inspect.isawaitable(res):
                    await res


def _active(impl: Any, hook: str) -> bool:
    """Whether `impl` has `hook` and its config leaves it something to do."""
    return hasattr(impl, hook) and hook not in getattr(impl, "idle_hooks", ())


def _reports(impl: Any, hook: str) -> bool:
    """Whether `impl`'s `hook` leaves the body alone or drops `raw` when it changes it."""
    return hook in getattr(impl, "reports_changes", ())


def _hooks(fns: Iterable[Callable[..., Any]]) -> tuple[tuple[Callable[..., Any], bool], ...]:
    """Each hook with whether it is async (a coroutine function, or returns awaitables)."""
    return tuple((fn, inspect.iscoroutinefunction(fn)) for fn in fns)


def chain_links(specs: Sequence[tuple[str, dict[str, Any]]], env: ChainEnv, *,
                verbose: bool = False) -> list[Link]:
    """Instances of the configured interceptors (`endpoint` entries configure the endpoint
    and are not links); `verbose` adds a `logging` link when none is configured."""
    links = [Link(name, registry.build(name, cfg, env)) for name, cfg in specs if name != "endpoint"]
    if verbose and not any(lk.name == "logging" for lk in links):
        links.insert(0, Link("logging", registry.build("logging", {}, env)))
    return links


def endpoint_settings(specs: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The set fields of the chain's `endpoint` entries (later entries win)."""
    out: dict[str, Any] = {}
    for name, cfg in specs:
        if name == "endpoint":
            out.update({k: v for k, v in registry.validate(name, cfg).items() if v is not None})
    return out


__all__ = ["Chain", "Link", "RequestContext", "chain_links", "endpoint_settings"]
