"""The proxy's HTTP transport: the shared HTTP/1.1 protocol (`nel_resources.wire.http1`) with an
async handler behind it.

The proxy's whole point is to add little to each request, and aiohttp's server cost about
as much CPU per request as the chain and the upstream call together (bench/
bench_interceptors.py). Each request is handed to the handler as (method, path, header
lookup, body); its answer is a `Reply`, or an async iterator of byte pieces sent with
chunked transfer encoding (server-sent events). Malformed requests get a 4xx and the
connection is closed.

Limits (`ProxyLimits`, the `nel proxy` flags): a request body over `max_body` bytes gets
413; the bodies of all requests being read or answered at once may hold `max_buffered`
bytes together (their Content-Lengths, reserved when a head arrives, before its body is
read), and a request past that budget gets 503 with Retry-After rather than growing the
process; a head not in within `head_timeout` seconds of the connection (or of its first
byte), or a body not in within `body_timeout` seconds of its head, gets 408 and the
connection is closed (a slow client cannot hold a connection and its buffer for ever).
While an answer is pending, reading pauses once `MAX_HEAD` bytes of the next request wait.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import orjson

from nel_resources.wire import http1
from nel_resources.wire.http1 import Http1Connection, Reply, Request

LOG = logging.getLogger("nel.proxy")

Headers = Callable[[bytes], "bytes | None"]
Handler = Callable[[bytes, str, Headers, bytes], Awaitable["Reply | AsyncIterator[bytes]"]]
_INTERNAL = Reply(500, b'{"error":{"message":"internal proxy error","type":"server_error"}}')


MIB = 1024 * 1024


@dataclass(frozen=True)
class ProxyLimits:
    """How much the proxy takes in (see the module's docstring).

    Attributes:
        max_body: bytes one request body may have.
        max_buffered: bytes the bodies of all requests in flight may have together.
        head_timeout: seconds a request head may take to arrive.
        body_timeout: seconds a request body may take to arrive after its head.
    """

    max_body: int = 64 * MIB
    max_buffered: int = 256 * MIB
    head_timeout: float = 30.0
    body_timeout: float = 120.0


class ByteBudget:
    """The bytes the request bodies in flight hold, against a cap (one per server)."""

    __slots__ = ("cap", "peak", "used")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.used = 0
        self.peak = 0


class HttpConnection(Http1Connection):
    """One client connection of the proxy: requests answered strictly in order."""

    __slots__ = ("_handler", "_reserved", "_spawn")

    # Set per server by `start_server` (a subclass with its limits).
    budget: ByteBudget = ByteBudget(ProxyLimits.max_buffered)
    busy_buffer = http1.MAX_HEAD

    def __init__(self, handler: Handler) -> None:
        super().__init__()
        self._handler = handler
        self._spawn: Callable[..., asyncio.Task[None]] | None = None
        self._reserved = 0  # the bytes of the budget this connection's request holds

    def admit(self, length: int) -> tuple[int, str] | None:
        if not length:
            return None
        budget = self.budget
        used = budget.used + length
        if used > budget.cap:
            return 503, (f"the proxy is busy: request bodies in flight hold {budget.used} bytes "
                         f"and this one has {length}, over its {budget.cap}-byte budget "
                         "(--max-buffered-mb); retry later")
        budget.used = used
        if used > budget.peak:
            budget.peak = used
        self._reserved = length
        return None

    def release(self) -> None:
        if self._reserved:
            self.budget.used -= self._reserved
            self._reserved = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        # The loop's create_task, looked up once per connection rather than per request.
        self._spawn = asyncio.get_running_loop().create_task

    def error_reply(self, status: int, message: str) -> Reply:
        body = orjson.dumps({"error": {"message": message, "type": "invalid_request_error"}})
        if status == 503:  # the budget is spent for now: a client's retry will be taken
            return Reply(status, body, http1.JSON_HEADERS + b"Retry-After: 1\r\n")
        return Reply(status, body)

    def respond(self, request: Request) -> bool:
        target = request.target
        try:
            path = target.decode("ascii")
        except UnicodeDecodeError:
            self.fail(400, "the request target must be ASCII")
            return True
        if "?" in path:
            path = path.split("?", 1)[0]
        assert self._spawn is not None
        self._task = self._spawn(
            self._answer(request.method, path, request.header, request.body, request.keep_alive))
        return False

    async def _answer(self, method: bytes, path: str, headers: Headers, body: bytes,
                      keep_alive: bool) -> None:
        transport = self._transport
        assert transport is not None
        try:
            result = await self._handler(method, path, headers, body)
        except Exception:  # a bug in the proxy: the client gets a 500, the log the traceback
            LOG.exception("proxy handler failed")
            result = _INTERNAL
        if self._closed:
            return
        if isinstance(result, Reply):
            transport.write(http1.render(result, keep_alive))
        else:
            transport.write(http1.chunked_head(200, http1.SSE_HEADERS, keep_alive))
            try:
                async for piece in result:
                    if self._closed:
                        return
                    transport.write(http1.chunk(piece))
            except Exception:  # a failing chunk hook: the stream is cut, the client sees it
                LOG.exception("proxy stream failed")
                transport.close()
                self._closed = True
                return
            transport.write(http1.LAST_CHUNK)
        self.finish(keep_alive)


async def start_server(handler: Handler, port: int, limits: ProxyLimits | None = None
                       ) -> asyncio.AbstractServer:
    """Listen on 127.0.0.1:`port` (0: a free one), taking in no more than `limits` allow."""
    lim = limits or ProxyLimits()
    conn = type("LimitedHttpConnection", (HttpConnection,), {
        "__slots__": (), "max_body": lim.max_body, "budget": ByteBudget(lim.max_buffered),
        "head_timeout": lim.head_timeout, "body_timeout": lim.body_timeout})
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: conn(handler), "127.0.0.1", port, backlog=1024)


__all__ = ["ByteBudget", "Handler", "Headers", "HttpConnection", "ProxyLimits", "Reply",
           "start_server"]
