"""The HTTP/1.1 wire protocol shared by nel's lean servers (the reference server, the proxy).

Both servers exist because a web framework costs more CPU per request than what they
measure or add, so they speak HTTP/1.1 straight on an `asyncio.Protocol` (uvloop when
the process runs under it). What they share lives here: parsing request heads from one
buffer (keep-alive, Content-Length bodies, `Expect: 100-continue`, pipelined requests
answered strictly in order, backpressure while an answer is pending), rendering answers
(whole, or the head of a chunked event stream), and the 4xx answers to malformed input.

A server subclasses `Http1Connection` and implements `respond(request)` (answer now, or
start an answer and call `resume()` when it is written) and `error_reply(status, message)`
(its own JSON error shape).
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import socket
from typing import NamedTuple, cast

MAX_HEAD = 64 * 1024
MAX_BODY = 64 * 1024 * 1024
JSON_HEADERS = b"Content-Type: application/json\r\n"
SSE_HEADERS = b"Content-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
LAST_CHUNK = b"0\r\n\r\n"


def status_line(code: int) -> bytes:
    """`HTTP/1.1 <code> <phrase>` with its CRLF (any integer code)."""
    try:
        phrase = http.HTTPStatus(code).phrase
    except ValueError:
        phrase = "Status"
    return f"HTTP/1.1 {code} {phrase}\r\n".encode()


# Rendered once: a status line is on every answer.
STATUS_LINES: dict[int, bytes] = {s.value: status_line(s.value) for s in http.HTTPStatus}


class Reply(NamedTuple):
    """A whole answer: status, body, header lines (each ending in CRLF)."""

    status: int
    body: bytes
    headers: bytes = JSON_HEADERS


def render(reply: Reply, keep_alive: bool = True) -> bytes:
    """One HTTP/1.1 response message (`Connection: close` when the connection ends)."""
    return b"%sContent-Length: %d\r\n%s%s\r\n%s" % (
        STATUS_LINES.get(reply.status) or status_line(reply.status), len(reply.body),
        reply.headers, b"" if keep_alive else b"Connection: close\r\n", reply.body)


def chunked_head(status: int, headers: bytes, keep_alive: bool = True) -> bytes:
    """The head of an answer whose body follows in chunks (`chunk(...)`, then `LAST_CHUNK`)."""
    return b"%s%sTransfer-Encoding: chunked\r\n%s\r\n" % (
        STATUS_LINES.get(status) or status_line(status), headers,
        b"" if keep_alive else b"Connection: close\r\n")


def chunk(piece: bytes) -> bytes:
    """One chunk of a chunked body (never empty: an empty chunk ends the body)."""
    return b"%x\r\n%s\r\n" % (len(piece), piece)


def header(head: bytes, lower: bytes, name: bytes) -> bytes | None:
    """The value of header `name` (lower-case, no colon) in a raw request head, or None."""
    i = lower.find(b"\r\n" + name + b":")
    if i < 0:
        return None
    start = i + len(name) + 3
    end = lower.find(b"\r\n", start)
    return head[start:end if end >= 0 else len(head)].strip()


class Request(NamedTuple):
    """One parsed request. `lower` is the head lower-cased, for header lookups."""

    method: bytes
    target: bytes
    head: bytes
    lower: bytes
    body: bytes
    keep_alive: bool

    def header(self, name: bytes) -> bytes | None:
        """The value of header `name` (lower-case), or None."""
        return header(self.head, self.lower, name)


class Http1Connection(asyncio.Protocol):
    """One keep-alive connection. Requests are parsed from a byte buffer and handed to
    `respond` one at a time; while an answer is pending (`respond` returned False), later
    pipelined requests wait in the buffer, and reading pauses once it holds `MAX_BODY`."""

    __slots__ = ("_buf", "_busy", "_closed", "_continued", "_paused", "_task", "_transport")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._busy = False
        self._closed = False
        self._continued = False
        self._paused = False
        self._task: asyncio.Task[None] | None = None
        self._transport: asyncio.Transport | None = None

    # -- what a server provides ------------------------------------------------------------
    def respond(self, request: Request) -> bool:
        """Answer `request`. True: it is written (or the connection closed); False: the
        answer comes later, and whoever writes it calls `resume()` (or closes)."""
        raise NotImplementedError

    def error_reply(self, status: int, message: str) -> Reply:
        """The server's JSON error answer."""
        raise NotImplementedError

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing asyncio.Transport.
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
            # Backpressure: a client pipelining into a slow answer must not grow us forever.
            if len(self._buf) > MAX_BODY and not self._paused and self._transport is not None:
                self._paused = True
                self._transport.pause_reading()
            return
        self._process()

    # -- helpers for servers ---------------------------------------------------------------
    def fail(self, status: int, message: str) -> None:
        """Answer with an error and close the connection."""
        assert self._transport is not None
        self._transport.write(render(self.error_reply(status, message), keep_alive=False))
        self._transport.close()
        self._closed = True

    def finish(self, keep_alive: bool) -> None:
        """A pending answer is written: close, or go on with buffered requests."""
        if not keep_alive:
            assert self._transport is not None
            self._transport.close()
            self._closed = True
            return
        self.resume()

    def resume(self) -> None:
        """Go on with the requests waiting in the buffer."""
        self._busy = False
        self._task = None
        if self._paused and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()
        self._process()

    def _process(self) -> None:
        buf = self._buf
        while buf and not self._busy and not self._closed:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD:
                    self.fail(431, "request head too large")
                return
            head = bytes(buf[:end])
            line_end = head.find(b"\r\n")
            parts = (head if line_end < 0 else head[:line_end]).split(b" ")
            if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
                self.fail(400, "malformed request line")
                return
            method, target, version = parts
            lower = head.lower()
            if b"\r\ntransfer-encoding:" in lower:
                # 411 (a 4xx): the client can fix it by sending a Content-Length.
                self.fail(411, "chunked request bodies are not supported; send Content-Length")
                return
            length = 0
            raw_len = header(head, lower, b"content-length")
            if raw_len is not None:
                if not raw_len.isdigit():
                    self.fail(400, "invalid Content-Length")
                    return
                length = int(raw_len)
                if length > MAX_BODY:
                    self.fail(413, f"request body larger than {MAX_BODY} bytes")
                    return
            total = end + 4 + length
            if len(buf) < total:
                if not self._continued and b"\r\nexpect: 100-continue" in lower:
                    self._continued = True
                    assert self._transport is not None
                    self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                return
            body = bytes(buf[end + 4:total])
            del buf[:total]
            self._continued = False
            keep_alive = (b"\r\nconnection: close" not in lower if version == b"HTTP/1.1"
                          else b"\r\nconnection: keep-alive" in lower)
            if not self.respond(Request(method, target, head, lower, body, keep_alive)):
                self._busy = True
                return


__all__ = ["JSON_HEADERS", "LAST_CHUNK", "MAX_BODY", "MAX_HEAD", "SSE_HEADERS", "STATUS_LINES",
           "Http1Connection", "Reply", "Request", "chunk", "chunked_head", "header", "render",
           "status_line"]
