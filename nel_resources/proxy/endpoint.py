"""`endpoint`: the last link of the chain, which sends the request to the model.

In-process it is nel's `ModelClient` itself (its pooled keep-alive transport, bounded
concurrency, retries with backoff and jitter): the chain adds no hop. Its config fields are
NeMo Evaluator's; a service's `proxy:` block gives the same settings, and an explicit
`endpoint` entry in the chain wins over them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from time import perf_counter
from typing import Any, Protocol

import orjson

from nel_resources.proxy.fields import FieldSpec
from nel_resources.proxy.types import ProxyRequest, ProxyResponse, RequestContext


class ClientTransport(Protocol):
    """What the endpoint uses of nel's `ModelClient` (the proxy is built on the client;
    typed by what it needs, so this package's modules import no client module for it)."""

    base_url: str
    max_concurrent: int
    connect_timeout: float
    timeout: float
    requests_sent: int

    @property
    def base_headers(self) -> dict[str, str]:
        """The headers every request carries."""
        ...

    def redact_text(self, text: str) -> str:
        """`text` with the client's secrets masked."""
        ...

    def redact_bytes(self, raw: bytes) -> bytes:
        """`raw` with the client's secrets masked."""
        ...

    def _post(self, data: bytes, subpath: str, headers: dict[str, str] | None
              ) -> Awaitable[tuple[int, Any, int, bytes]]:
        """The client's POST with retries (`ModelClient._post`)."""
        ...

FIELDS = {
    "upstream_url": FieldSpec("str", None, nullable=True),
    "api_key": FieldSpec("str", None, nullable=True),
    "extra_body": FieldSpec("dict", None, nullable=True),
    "extra_headers": FieldSpec("dict[str,str]", None, nullable=True),
    "request_timeout": FieldSpec("float", None, minimum=0.001, nullable=True),
    "max_retries": FieldSpec("int", None, minimum=0, nullable=True),
    "retry_on_status": FieldSpec("list[int]", None, nullable=True),
    "max_concurrent": FieldSpec("int", None, minimum=1, nullable=True),
    "model_traffic_store_id": FieldSpec("str", None, nullable=True),
}
AFFECTS_ANSWERS = False


class UpstreamStreamError(Exception):
    """The upstream refused a streamed request (its status and redacted text)."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"HTTP {status}: {text}")
        self.status = status
        self.text = text


def _as_events(raw: bytes, req: ProxyRequest) -> list[dict[str, Any]]:
    """A whole answer to a streamed request (an upstream that does not stream) as the
    chunks of a stream: a chat or text completion replayed (`streams.replay_chunks`), a
    Responses-API answer as its `response.completed` event; events sent without their
    content type are read as events."""
    from nel_resources.proxy.streams import replay_chunks, wants_usage

    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = None
    if isinstance(body, dict):
        if req.path.endswith("/responses"):
            return [{"type": "response.completed", "response": body}]
        return replay_chunks(body, req.path, wants_usage(req.body))
    events = []
    for line in raw.splitlines():
        line = line.strip()
        if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
            try:
                obj = orjson.loads(line[5:].strip())
            except orjson.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                events.append(obj)
    if not events:
        raise UpstreamStreamError(502, "the upstream answered a streamed request with neither "
                                       f"events nor a JSON object: {raw[:200]!r}")
    return events


class ClientEndpoint:
    """Sends through a `ModelClient` (one exchange with its retries)."""

    def __init__(self, client: ClientTransport, extra_body: dict[str, Any] | None = None,
                 extra_headers: dict[str, str] | None = None) -> None:
        self.client = client
        self._post = client._post
        self.extra_body = dict(extra_body or {})
        self.extra_headers = dict(extra_headers or {})
        self._session: Any = None  # aiohttp.ClientSession for streams, made on first use

    def cache_identity(self) -> dict[str, Any]:
        """Which upstream answers this endpoint's requests (what `caching` keys by besides
        the request): the base URL (scheme, host, port, path) and the headers sent with
        every request, secrets left out (a new API key does not empty the cache)."""
        from nel_resources.wire.redact import is_secret_header

        headers = {**self.client.base_headers, **self.extra_headers}
        return {"url": self.client.base_url,
                "headers": {k.lower(): v for k, v in headers.items() if not is_secret_header(k)}}

    def wire(self, req: ProxyRequest) -> tuple[bytes, dict[str, str]]:
        """The encoded body and the headers this endpoint sends for `req`: the bytes the
        request came in as when no hook changed it (`req.raw`), else the body encoded."""
        headers = {**self.extra_headers, **req.headers} if self.extra_headers else req.headers
        if self.extra_body:
            req.body.update(self.extra_body)
        elif req.raw is not None:
            return req.raw, headers
        return orjson.dumps(req.body), headers

    @staticmethod
    def answer(ctx: RequestContext, status: int, body: Any, attempts: int, t0: float,
               raw: bytes | None = None) -> ProxyResponse:
        """The response of one exchange started at `t0` (`perf_counter`) for the request
        whose context is `ctx`: `_post`'s status, parsed body or error text, attempts, and
        the bytes a parsed body came from. (The context, not the request: a caller need
        not keep the request, and its body, alive across the exchange.)"""
        if status != 200 and isinstance(body, str):
            body = body.encode()
        # Every field by position: keyword arguments cost a dataclass init a third more.
        return ProxyResponse(status, body, (perf_counter() - t0) * 1000.0, attempts, ctx,
                             False, raw or None)

    async def send(self, req: ProxyRequest) -> ProxyResponse:
        data, headers = self.wire(req)
        # The client's retry loop called directly (what `ModelClient.exchange` does): one
        # coroutine less per request on the hot path.
        t0 = perf_counter()
        status, body, attempts, raw = await self._post(data, req.path, headers)
        return self.answer(req.ctx, status, body, attempts, t0, raw)

    async def stream(self, req: ProxyRequest) -> AsyncIterator[dict[str, Any]]:
        """Send a streamed request; yield each server-sent `data:` object as it arrives.

        One attempt, no retry: chunks already passed on cannot be taken back. Streams go
        over aiohttp (the raw pool reads whole bodies); its session opens on first use.
        """
        import aiohttp

        client = self.client
        if self._session is None:
            self._session = aiohttp.ClientSession(
                headers=client.base_headers, cookie_jar=aiohttp.DummyCookieJar(),
                connector=aiohttp.TCPConnector(limit=client.max_concurrent))
        if self.extra_body:
            req.body.update(self.extra_body)
        req.body["stream"] = True
        headers = {**self.extra_headers, **req.headers}
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=client.connect_timeout,
                                        sock_read=client.timeout)
        client.requests_sent += 1
        async with self._session.post(client.base_url + req.path, data=orjson.dumps(req.body),
                                      headers=headers or None, timeout=timeout) as resp:
            if resp.status != 200:
                text = client.redact_text((await resp.read()).decode("utf-8", "replace"))
                raise UpstreamStreamError(resp.status, text[:300].strip())
            if "text/event-stream" not in resp.headers.get("Content-Type", "text/event-stream"):
                # An upstream that ignores `stream` answers whole: the answer as a stream.
                for chunk in _as_events(client.redact_bytes(await resp.read()), req):
                    yield chunk
                return
            async for line in resp.content:
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue  # comments, event names, keep-alive blank lines
                data = line[5:].strip()
                if data == b"[DONE]":
                    return
                obj = orjson.loads(client.redact_bytes(data))
                if isinstance(obj, dict):
                    yield obj

    async def close(self) -> None:
        """Close the streaming session (the client closes its own)."""
        if self._session is not None:
            await self._session.close()
            self._session = None
