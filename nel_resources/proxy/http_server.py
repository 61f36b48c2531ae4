"""The proxy's HTTP transport: the shared HTTP/1.1 protocol (`nel_resources.http1`) with an
async handler behind it.

The proxy's whole point is to add little to each request, and aiohttp's server cost about
as much CPU per request as the chain and the upstream call together (bench/
bench_interceptors.py). Each request is handed to the handler as (method, path, header
lookup, body); its answer is a `Reply`, or an async iterator of byte pieces sent with
chunked transfer encoding (server-sent events). Malformed requests get a 4xx and the
connection is closed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import orjson

from nel_resources import http1
from nel_resources.http1 import Http1Connection, Reply, Request

LOG = logging.getLogger("nel.proxy")

Headers = Callable[[bytes], "bytes | None"]
Handler = Callable[[bytes, str, Headers, bytes], Awaitable["Reply | AsyncIterator[bytes]"]]
_INTERNAL = Reply(500, b'{"error":{"message":"internal proxy error","type":"server_error"}}')


class HttpConnection(Http1Connection):
    """One client connection of the proxy: requests answered strictly in order."""

    __slots__ = ("_handler", "_spawn")

    def __init__(self, handler: Handler) -> None:
        super().__init__()
        self._handler = handler
        self._spawn: Callable[..., asyncio.Task[None]] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        # The loop's create_task, looked up once per connection rather than per request.
        self._spawn = asyncio.get_running_loop().create_task

    def error_reply(self, status: int, message: str) -> Reply:
        return Reply(status, orjson.dumps({"error": {"message": message,
                                                     "type": "invalid_request_error"}}))

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


async def start_server(handler: Handler, port: int) -> asyncio.AbstractServer:
    """Listen on 127.0.0.1:`port` (0: a free one)."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: HttpConnection(handler), "127.0.0.1", port,
                                    backlog=1024)


__all__ = ["Handler", "Headers", "HttpConnection", "Reply", "start_server"]
