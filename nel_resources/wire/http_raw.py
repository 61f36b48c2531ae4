"""A minimal HTTP/1.1 keep-alive client on an asyncio protocol, for plain-HTTP model servers.

Why: measured here against the reference server at concurrency 64, aiohttp's client does
~12k requests/s and this one ~38k: per request aiohttp builds request/response objects,
header multidicts, trace hooks and timers, none of which an evaluation needs. It speaks
only what OpenAI-compatible servers answer to a non-streaming POST: a status line,
headers, and a body framed by Content-Length or chunked transfer encoding. HTTPS and
anything unusual stay with aiohttp (see `ModelClient(transport=...)`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass
from typing import Any

from nel_resources.runtime import heap


class RawHTTPError(ConnectionError):
    """The connection failed or the server's answer was not valid HTTP/1.1."""


class StaleConnectionError(RawHTTPError):
    """A reused keep-alive connection was closed before any byte of the answer.

    The server may have closed it while idle, or reset it after reading the request: the
    caller cannot tell, so resending is its decision (and counts as another attempt).
    """


@dataclass(slots=True)
class RawResponse:
    """Status, lower-cased headers and the full body of one response."""

    status: int
    headers: dict[str, str]
    body: bytes


_HEAD_LIMIT = 1 << 22  # bytes of a response head (and of a chunk-size line) at most


class RawHTTPPool:
    """Keep-alive connections to one host:port, at most `limit` at a time.

    Idle connections are reused LIFO. Every call writes the request exactly once: a reused
    connection found closed raises StaleConnectionError rather than being resent here, so
    the caller sees (and counts) every request that went on the wire.
    """

    def __init__(self, host: str, port: int, *, limit: int = 64, connect_timeout: float = 10.0,
                 host_header: str | None = None) -> None:
        self.host = host
        self.port = port
        self.connect_timeout = connect_timeout
        self._idle: list[_Connection] = []
        self._slots = _Slots(limit)
        self._host_header = (host_header or f"{host}:{port}").encode()
        self._closed = False
        # asyncio's transports `recv(256 KiB)` into a new bytes object for every read. Above
        # glibc's mmap threshold each such buffer cost an mmap, an mremap and an munmap
        # (`strace -c`: 3,000 of each for 3,000 requests) and ~15 us more client CPU per
        # request (40 against 25 us) in a process where no earlier import had happened to
        # raise the threshold; fixed above that size here, the fast case is the rule.
        heap.keep_blocks_on_heap()

    async def _connect(self) -> _Connection:
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await asyncio.get_running_loop().create_connection(
                    _Connection, self.host, self.port)
                return conn
        except TimeoutError:
            raise TimeoutError(f"connect to {self.host}:{self.port} timed out") from None
        except OSError as exc:
            raise RawHTTPError(f"cannot connect to {self.host}:{self.port}: {exc}") from None

    def head(self, method: str, path: str, headers: bytes, length: int) -> bytes:
        """The request head; `headers` are pre-encoded `Name: value\\r\\n` lines."""
        return (b"%s %s HTTP/1.1\r\nHost: %s\r\n%sContent-Length: %d\r\n\r\n"
                % (method.encode(), path.encode(), self._host_header, headers, length))

    async def request(self, method: str, path: str, headers: bytes = b"",
                      body: bytes = b"", watch: Any = None) -> RawResponse:
        """Send one request and read the whole response. `watch.conn`, when given, is set to
        the connection: its `received` count shows whether the answer is arriving."""
        if not self._slots.take():
            await self._slots.acquire()
        try:
            data = self.head(method, path, headers, len(body)) + body
            reused = bool(self._idle)
            conn = self._idle.pop() if reused else await self._connect()
            if watch is not None:
                watch.conn = conn
            try:
                resp, keep = await conn.exchange(data)
            except _Stale:
                _close(conn)
                if not reused:
                    raise RawHTTPError("the server closed the connection without answering") from None
                # The other idle connections date from before this one died: likely dead too.
                while self._idle:
                    _close(self._idle.pop())
                raise StaleConnectionError(
                    "the server closed a reused keep-alive connection without answering") from None
            except BaseException:
                _close(conn)  # timeouts and cancellation leave the connection mid-response
                raise
            if keep and not self._closed:
                self._idle.append(conn)
            else:
                _close(conn)
            return resp
        finally:
            self._slots.release()

    async def close(self) -> None:
        """Close every idle connection."""
        self._closed = True
        while self._idle:
            _close(self._idle.pop())


class _Slots:
    """A counting limit like `asyncio.Semaphore`, with a free slot taken without awaiting.

    `Semaphore.acquire` in Python 3.11 scans its waiters and runs a coroutine even when a
    slot is free: a measurable share of the request path at thousands of requests a second.
    Waiters are served in order; a slot freed while some wait goes straight to the first.
    """

    __slots__ = ("_free", "_waiters")

    def __init__(self, limit: int) -> None:
        self._free = limit
        self._waiters: deque[asyncio.Future[None]] = deque()

    def take(self) -> bool:
        """Take a free slot now if there is one (no waiter is ahead)."""
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return True
        return False

    async def acquire(self) -> None:
        """Take a slot, waiting for one when none is free."""
        if self.take():
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # handed a slot just as it was cancelled: pass it on
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(fut)
            raise

    def release(self) -> None:
        """Give a slot back: to the first live waiter, else to the pool."""
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return
        self._free += 1


class _Stale(Exception):
    """The connection was closed before any byte of the answer (safe to resend)."""


def _close(conn: _Connection) -> None:
    with contextlib.suppress(Exception):  # a broken transport may refuse even to close
        conn.close()


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
        raise RawHTTPError(f"not an HTTP/1.x response: {lines[0][:80]!r}")
    try:
        status = int(parts[1])
    except ValueError:
        raise RawHTTPError(f"bad status line: {lines[0][:80]!r}") from None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        k, sep, v = line.partition(b":")
        if sep:
            headers[k.strip().lower().decode("latin-1")] = v.strip().decode("latin-1")
    return status, headers


class _Connection(asyncio.Protocol):
    """One keep-alive connection, reading its answers in `data_received`.

    Why a protocol, not asyncio's streams: a response that arrives whole (the usual case)
    is parsed from the bytes the transport hands over, and the waiting request is woken
    once; with a StreamReader every answer cost a `readuntil`, a `readexactly`, a waiter
    future per read, and a copy of the data into and out of its buffer.

    One exchange at a time: `exchange` writes the request and waits for the answer, which
    `data_received` completes (or `connection_lost` / EOF fails).
    """

    __slots__ = ("_body", "_buf", "_done", "_eof", "_got_bytes", "_head", "_loop", "_pos",
                 "_size", "_transport", "_waiter", "received")

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._buf: bytes | bytearray = b""  # the answer received so far (not yet complete)
        self._waiter: asyncio.Future[tuple[RawResponse, bool]] | None = None
        self._eof = False  # the server closed its side (or the connection is lost)
        self._got_bytes = False  # any byte of the current answer arrived
        self._head: tuple[int, dict[str, str]] | None = None  # parsed once it is complete
        self._pos = 0  # where the body starts / the next chunk-size line is, in _buf
        self._size = -2  # framing: >= 0 Content-Length, -1 chunked, -3 until close
        self._body: bytearray | None = None  # chunks decoded so far
        self._done = False
        # Reads of the current answer: the hang cut (deadlines.py) sees an answer arriving.
        self.received = 0

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        # Once per connection: `get_running_loop()` costs a getpid system call per use.
        self._loop = asyncio.get_running_loop()

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:
            return  # bytes nobody asked for (no request pending): nothing can own them
        self._got_bytes = True
        self.received += 1
        if not self._buf:
            self._buf = data  # usually the whole answer: parsed without a copy
        else:
            if not isinstance(self._buf, bytearray):
                self._buf = bytearray(self._buf)
            self._buf += data
        try:
            out = self._parse(False)
        except RawHTTPError as exc:
            self._fail(exc)
            return
        if out is not None:
            self._complete(out)

    def eof_received(self) -> bool:
        self._eof = True
        self._ended()
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        self._ended()

    # -- the exchange ----------------------------------------------------------------------
    def exchange(self, data: bytes) -> asyncio.Future[tuple[RawResponse, bool]]:
        """Write one request; the future of its whole answer: (response, keep-alive).
        (A plain call returning the future: no coroutine of its own per request.)"""
        if self._eof or self._transport is None or self._loop is None or self._transport.is_closing():
            raise _Stale  # closed while idle: nothing of this request reaches the server
        self._buf, self._got_bytes, self._head, self._body = b"", False, None, None
        self._pos, self._size, self._done, self.received = 0, -2, False, 0
        waiter = self._waiter = self._loop.create_future()
        self._transport.write(data)
        return waiter

    def close(self) -> None:
        """Close the connection (a pending exchange fails)."""
        self._eof = True
        if self._transport is not None:
            self._transport.close()

    def _complete(self, out: tuple[RawResponse, bool]) -> None:
        waiter = self._waiter
        # (the bytes and decoded chunks are not kept alive on an idle connection)
        self._waiter, self._buf, self._body, self._done = None, b"", None, True
        if waiter is not None and not waiter.done():
            waiter.set_result(out)

    def _fail(self, exc: BaseException) -> None:
        waiter = self._waiter
        # (the bytes and decoded chunks are not kept alive on an idle connection)
        self._waiter, self._buf, self._body, self._done = None, b"", None, True
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self.close()

    def _ended(self) -> None:
        """The server closed: the end of a close-delimited answer, or a cut one."""
        if self._waiter is None or self._done:
            return
        if not self._got_bytes:
            self._fail(_Stale())
            return
        try:
            out = self._parse(True)
        except RawHTTPError as exc:
            self._fail(exc)
            return
        if out is None:
            self._fail(RawHTTPError("the server closed the connection mid-response"))
        else:
            self._complete(out)

    def _parse(self, at_eof: bool) -> tuple[RawResponse, bool] | None:
        """The answer once `_buf` holds all of it (None: not yet)."""
        buf = self._buf
        if self._head is None:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > _HEAD_LIMIT:
                    raise RawHTTPError("response headers too large")
                return None
            status, headers = self._head = _parse_head(bytes(buf[:end + 4]))
            self._pos = end + 4
            if headers.get("transfer-encoding", "").lower().endswith("chunked"):
                self._size, self._body = -1, bytearray()
            elif "content-length" in headers:
                try:
                    self._size = int(headers["content-length"])
                except ValueError:
                    raise RawHTTPError("invalid Content-Length or chunk size") from None
                if self._size < 0:
                    raise RawHTTPError("invalid Content-Length or chunk size")
            elif status in (204, 304) or 100 <= status < 200:
                self._size = 0
            else:
                self._size = -3
        status, headers = self._head
        size = self._size
        if size >= 0:
            start = self._pos
            if len(buf) - start < size:
                return None
            body = buf[start:start + size] if start or len(buf) != size else buf
        elif size == -1:
            body = self._chunked(buf)
            if body is None:
                return None
        else:  # close-delimited: whatever came until the server closed
            if not at_eof:
                return None
            return RawResponse(status, headers, bytes(buf[self._pos:])), False
        keep = headers.get("connection", "").lower() != "close"
        return RawResponse(status, headers, bytes(body)), keep

    def _chunked(self, buf: bytes | bytearray) -> bytes | None:
        """The chunked body once its last chunk and trailers are in `buf` (decoded so far
        kept in `_body`, from `_pos` on)."""
        body = self._body
        assert body is not None
        pos = self._pos
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                if len(buf) - pos > _HEAD_LIMIT:
                    raise RawHTTPError("a chunk-size line is too long")
                self._pos = pos
                return None
            try:
                size = int(buf[pos:eol].split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise RawHTTPError("invalid Content-Length or chunk size") from None
            if size == 0:
                # trailers end with an empty line
                end = eol if buf[eol + 2:eol + 4] == b"\r\n" else buf.find(b"\r\n\r\n", eol)
                if end < 0:
                    self._pos = pos
                    return None
                return bytes(body)
            if len(buf) < eol + 2 + size + 2:
                self._pos = pos
                return None
            body += buf[eol + 2:eol + 2 + size]
            pos = eol + 2 + size + 2
