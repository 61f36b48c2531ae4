"""A lean HTTP/1.1 server for the proxy: keep-alive, Content-Length bodies, in-order answers.

The proxy's whole point is to add little to each request, and aiohttp's server cost about
as much CPU per request as the chain and the upstream call together (bench/
bench_interceptors.py). This is an `asyncio.Protocol` (uvloop when the proxy runs under it)
that parses the request head from one buffer, hands (method, path, header lookup, body)
to an async handler, and writes its answer: a `Reply`, or an async iterator of byte
pieces sent with chunked transfer encoding (server-sent events). Malformed requests get a
4xx and the connection is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from http import HTTPStatus
from typing import NamedTuple, cast

LOG = logging.getLogger("nel.proxy")
MAX_HEAD = 64 * 1024
MAX_BODY = 64 * 1024 * 1024


class Reply(NamedTuple):
    """A whole answer."""

    status: int
    body: bytes
    content_type: bytes = b"application/json"


Headers = Callable[[bytes], "bytes | None"]
Handler = Callable[[bytes, str, Headers, bytes], Awaitable["Reply | AsyncIterator[bytes]"]]


def _status_line(status: int) -> bytes:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Status"
    return f"HTTP/1.1 {status} {phrase}\r\n".encode()


def render(reply: Reply, keep_alive: bool) -> bytes:
    """The bytes of a whole answer."""
    return b"".join((_status_line(reply.status), b"Content-Type: ", reply.content_type,
                     b"\r\nContent-Length: ", str(len(reply.body)).encode(),
                     b"\r\nConnection: keep-alive\r\n\r\n" if keep_alive
                     else b"\r\nConnection: close\r\n\r\n", reply.body))


def _error(status: int, message: str) -> Reply:
    import orjson

    return Reply(status, orjson.dumps({"error": {"message": message, "type": "invalid_request_error"}}))


class HttpConnection(asyncio.Protocol):
    """One client connection: requests answered strictly in order."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._buf = bytearray()
        self._busy = False
        self._closed = False
        self._paused = False
        self._task: asyncio.Task[None] | None = None
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()

    def data_received(self, data: bytes) -> None:
        self._buf += data
        if self._busy:
            # A client pipelining behind a slow answer must not grow the buffer forever.
            if len(self._buf) > MAX_BODY and not self._paused and self._transport is not None:
                self._paused = True
                self._transport.pause_reading()
            return
        self._process()

    def _fail(self, status: int, message: str) -> None:
        assert self._transport is not None
        self._transport.write(render(_error(status, message), keep_alive=False))
        self._transport.close()
        self._closed = True

    def _process(self) -> None:
        buf = self._buf
        while buf and not self._busy and not self._closed:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD:
                    self._fail(431, "request head too large")
                return
            head = bytes(buf[:end])
            line_end = head.find(b"\r\n")
            parts = (head if line_end < 0 else head[:line_end]).split(b" ")
            if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
                self._fail(400, "malformed request line")
                return
            method, target, version = parts
            lower = head.lower()
            if b"\r\ntransfer-encoding:" in lower:
                # 411, not 501: the client can fix it (malformed input is always a 4xx).
                self._fail(411, "chunked request bodies are not supported; send Content-Length")
                return
            length = 0
            raw_len = _header(head, lower, b"content-length")
            if raw_len is not None:
                if not raw_len.isdigit():
                    self._fail(400, "invalid Content-Length")
                    return
                length = int(raw_len)
                if length > MAX_BODY:
                    self._fail(413, f"request body larger than {MAX_BODY} bytes")
                    return
            total = end + 4 + length
            if len(buf) < total:
                if b"\r\nexpect: 100-continue" in lower and len(buf) == end + 4:
                    assert self._transport is not None
                    self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                return
            body = bytes(buf[end + 4:total])
            del buf[:total]
            keep_alive = (b"\r\nconnection: close" not in lower if version == b"HTTP/1.1"
                          else b"\r\nconnection: keep-alive" in lower)
            try:
                path = target.decode("ascii").split("?", 1)[0]
            except UnicodeDecodeError:
                self._fail(400, "the request target must be ASCII")
                return
            self._busy = True
            self._task = asyncio.get_running_loop().create_task(
                self._answer(method, path, functools.partial(_header, head, lower), body, keep_alive))

    async def _answer(self, method: bytes, path: str, headers: Headers, body: bytes,
                      keep_alive: bool) -> None:
        transport = self._transport
        assert transport is not None
        try:
            result = await self._handler(method, path, headers, body)
        except Exception:  # a bug in the proxy: the client gets a 500, the log the traceback
            LOG.exception("proxy handler failed")
            result = Reply(500, b'{"error":{"message":"internal proxy error","type":"server_error"}}')
        if self._closed:
            return
        if isinstance(result, Reply):
            transport.write(render(result, keep_alive))
        else:
            transport.write(_status_line(200) + b"Content-Type: text/event-stream\r\n"
                            b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n"
                            + (b"Connection: keep-alive\r\n\r\n" if keep_alive
                               else b"Connection: close\r\n\r\n"))
            try:
                async for piece in result:
                    if self._closed:
                        return
                    transport.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            except Exception:  # a failing chunk hook: the stream is cut, the client sees it
                LOG.exception("proxy stream failed")
                transport.close()
                self._closed = True
                return
            transport.write(b"0\r\n\r\n")
        if not keep_alive:
            transport.close()
            self._closed = True
            return
        self._busy = False
        self._task = None
        if self._paused:
            self._paused = False
            transport.resume_reading()
        self._process()


def _header(head: bytes, lower: bytes, name: bytes) -> bytes | None:
    """The value of header `name` (lower-case) in a request head, or None."""
    key = b"\r\n" + name + b":"
    i = lower.find(key)
    if i < 0:
        return None
    start = i + len(key)
    stop = head.find(b"\r\n", start)
    return head[start:stop if stop >= 0 else len(head)].strip()


async def start_server(handler: Handler, port: int) -> asyncio.AbstractServer:
    """Listen on 127.0.0.1:`port` (0: a free one)."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: HttpConnection(handler), "127.0.0.1", port,
                                    backlog=1024)
