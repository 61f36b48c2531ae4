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
#: After an error answer that ends a connection: how long, and how many bytes, of what the
#: client still sends are swallowed before the socket closes (see `Http1Connection.fail`).
LINGER_S = 2.0
LINGER_BYTES = 1024 * 1024


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
    pipelined requests wait in the buffer, and reading pauses once it holds `busy_buffer`.

    Limits a server may set (class attributes): `max_body` bytes per request body (413
    above it); `head_timeout` / `body_timeout` seconds for a request's head (from the
    connection, or its first byte) and then its body to arrive (408 and the connection
    closed past them: a slow client cannot hold the connection and its buffer for ever).
    `admit` may refuse a request from its head, before its body is read (a server-wide
    budget), and `release` frees what it reserved once the request is over.
    """

    __slots__ = ("_admitted", "_buf", "_busy", "_closed", "_continued", "_discard", "_paused",
                 "_task", "_timer", "_transport", "_waiting")

    max_body: int = MAX_BODY
    busy_buffer: int = MAX_BODY
    head_timeout: float | None = None
    body_timeout: float | None = None

    def __init__(self) -> None:
        self._buf = bytearray()
        self._busy = False
        self._closed = False
        self._continued = False
        self._paused = False
        self._task: asyncio.Task[None] | None = None
        self._transport: asyncio.Transport | None = None
        self._admitted = False  # `admit` passed the request being read
        self._timer: asyncio.TimerHandle | None = None  # the head / body deadline
        self._waiting: str | None = None  # which part the deadline is for
        self._discard = 0  # body bytes of a refused request still to swallow before closing

    # -- what a server provides ------------------------------------------------------------
    def respond(self, request: Request) -> bool:
        """Answer `request`. True: it is written (or the connection closed); False: the
        answer comes later, and whoever writes it calls `resume()` (or closes)."""
        raise NotImplementedError

    def error_reply(self, status: int, message: str) -> Reply:
        """The server's JSON error answer."""
        raise NotImplementedError

    def admit(self, length: int) -> tuple[int, str] | None:
        """A request's head is in and its body (`length` bytes) is not read yet: None to
        go on, or (status, message) to refuse it. Called once per request."""
        return None

    def release(self) -> None:
        """The last admitted request is over (answered, refused or cut); may be called
        more than once."""

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing asyncio.Transport.
        self._transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.head_timeout is not None:  # a client that connects and sends nothing
            self._deadline(self.head_timeout, "head")

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is not None:
            self._task.cancel()
        self.release()

    def data_received(self, data: bytes) -> None:
        if self._discard:
            self._swallow(len(data))
            return
        self._buf += data
        if self._busy:
            # Backpressure: a client pipelining into a slow answer must not grow us forever.
            if len(self._buf) > self.busy_buffer and not self._paused and self._transport is not None:
                self._paused = True
                self._transport.pause_reading()
            return
        self._process()

    # -- helpers for servers ---------------------------------------------------------------
    def fail(self, status: int, message: str) -> None:
        """Answer with an error and close the connection, lingering: the answer is followed
        by a FIN, and what the client still sends is swallowed for `LINGER_S` seconds (or
        until it closes) before the socket is closed. Closing at once would answer a byte
        that arrives after the close with a reset, and a reset can discard the error answer
        the client had not read yet (a slow client cut by a timeout keeps sending)."""
        transport = self._transport
        assert transport is not None
        transport.write(render(self.error_reply(status, message), keep_alive=False))
        self._closed = True
        self._busy = True
        self._buf.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.release()
        if not transport.can_write_eof():  # TLS: no half close, so close at once
            transport.close()
            return
        transport.write_eof()
        self._discard = LINGER_BYTES
        self._timer = asyncio.get_running_loop().call_later(LINGER_S, transport.close)

    def refuse(self, status: int, message: str, body_left: int) -> None:
        """Answer with an error before the body is read, then swallow the `body_left` bytes
        the client may still send (a client that writes its whole request before reading
        gets the answer, not a reset), and close."""
        assert self._transport is not None
        self._transport.write(render(self.error_reply(status, message), keep_alive=False))
        self._busy = True
        self._buf.clear()
        self.release()
        self._discard = body_left
        # Without a body deadline (or for a body far over the limit) the connection closes
        # at once: the client may see a reset instead of the answer, but nothing waits.
        if body_left <= 0 or self.body_timeout is None or body_left > 2 * self.max_body:
            self._discard = 0
            self._transport.close()
            self._closed = True
        elif self.body_timeout is not None:
            self._deadline(self.body_timeout, "body")

    def _swallow(self, n: int) -> None:
        self._discard = max(self._discard - n, 0)
        if not self._discard and self._transport is not None:
            self._transport.close()
            self._closed = True

    def _deadline(self, seconds: float, part: str) -> None:
        """Close the connection with a 408 unless the request's `part` is in within
        `seconds` (replaces the deadline set before)."""
        if self._timer is not None:
            self._timer.cancel()
        self._waiting = part
        self._timer = asyncio.get_running_loop().call_later(seconds, self._expired, seconds, part)

    def _expired(self, seconds: float, part: str) -> None:
        self._timer = None
        self._waiting = None
        if self._closed or self._transport is None:
            return
        if self._discard:  # the refused body never came: the answer is out already
            self._transport.close()
            self._closed = True
            return
        self.fail(408, f"the request {part} did not arrive within {seconds:g}s")

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
        self.release()
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
                elif self.head_timeout is not None and self._timer is None:
                    self._deadline(self.head_timeout, "head")
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
                if len(raw_len) > 18:  # int() of a huge run of digits is slow and large
                    self.fail(413, f"request body larger than {self.max_body} bytes")
                    return
                length = int(raw_len)
                if length > self.max_body:
                    waits = b"\r\nexpect: 100-continue" in lower and len(buf) == end + 4
                    self.refuse(413, f"request body larger than {self.max_body} bytes",
                                0 if waits else end + 4 + length - len(buf))
                    return
            total = end + 4 + length
            if not self._admitted:
                refused = self.admit(length)
                if refused is not None:
                    # A client waiting for `100 Continue` sends no body after a refusal.
                    waits = b"\r\nexpect: 100-continue" in lower and len(buf) == end + 4
                    self.refuse(*refused, 0 if waits else total - len(buf))
                    return
                self._admitted = True
            if len(buf) < total:
                if self._waiting != "body":  # the head is in: the body's deadline now
                    self._waiting = "body"
                    if self.body_timeout is not None:
                        self._deadline(self.body_timeout, "body")
                    elif self._timer is not None:
                        self._timer.cancel()
                        self._timer = None
                if not self._continued and b"\r\nexpect: 100-continue" in lower:
                    self._continued = True
                    assert self._transport is not None
                    self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                return
            if length > MAX_HEAD:  # one copy, not a slice's and then its bytes' (2x the body)
                with memoryview(buf) as view:
                    body = bytes(view[end + 4:total])
            else:
                body = bytes(buf[end + 4:total])
            del buf[:total]
            self._continued = False
            self._admitted = False
            if self._waiting is not None:  # the request is in: no deadline while it is answered
                self._waiting = None
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
            keep_alive = (b"\r\nconnection: close" not in lower if version == b"HTTP/1.1"
                          else b"\r\nconnection: keep-alive" in lower)
            if not self.respond(Request(method, target, head, lower, body, keep_alive)):
                self._busy = True
                return


__all__ = ["JSON_HEADERS", "LAST_CHUNK", "MAX_BODY", "MAX_HEAD", "SSE_HEADERS", "STATUS_LINES",
           "Http1Connection", "Reply", "Request", "chunk", "chunked_head", "header", "render",
           "status_line"]
