"""A minimal HTTP/1.1 keep-alive client on asyncio streams, for plain-HTTP model servers.

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

from nel_resources import heap


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


_Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


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
        self._idle: list[_Conn] = []
        self._slots = _Slots(limit)
        self._host_header = (host_header or f"{host}:{port}").encode()
        self._closed = False
        # asyncio's transports `recv(256 KiB)` into a new bytes object for every read. Above
        # glibc's mmap threshold each such buffer cost an mmap, an mremap and an munmap
        # (`strace -c`: 3,000 of each for 3,000 requests) and ~15 us more client CPU per
        # request (40 against 25 us) in a process where no earlier import had happened to
        # raise the threshold; fixed above that size here, the fast case is the rule.
        heap.keep_blocks_on_heap()

    async def _connect(self) -> _Conn:
        try:
            async with asyncio.timeout(self.connect_timeout):
                return await asyncio.open_connection(self.host, self.port, limit=1 << 22)
        except TimeoutError:
            raise TimeoutError(f"connect to {self.host}:{self.port} timed out") from None
        except OSError as exc:
            raise RawHTTPError(f"cannot connect to {self.host}:{self.port}: {exc}") from None

    def head(self, method: str, path: str, headers: bytes, length: int) -> bytes:
        """The request head; `headers` are pre-encoded `Name: value\\r\\n` lines."""
        return (b"%s %s HTTP/1.1\r\nHost: %s\r\n%sContent-Length: %d\r\n\r\n"
                % (method.encode(), path.encode(), self._host_header, headers, length))

    async def request(self, method: str, path: str, headers: bytes = b"",
                      body: bytes = b"") -> RawResponse:
        """Send one request and read the whole response."""
        if not self._slots.take():
            await self._slots.acquire()
        try:
            data = self.head(method, path, headers, len(body)) + body
            reused = bool(self._idle)
            conn = self._idle.pop() if reused else await self._connect()
            try:
                resp, keep = await self._exchange(conn, data)
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
                _close(conn)  # timeouts and cancellation leave the stream mid-response
                raise
            if keep and not self._closed:
                self._idle.append(conn)
            else:
                _close(conn)
            return resp
        finally:
            self._slots.release()

    async def _exchange(self, conn: _Conn, data: bytes) -> tuple[RawResponse, bool]:
        reader, writer = conn
        try:
            writer.write(data)
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if not exc.partial:
                raise _Stale from None
            raise RawHTTPError("the server closed the connection mid-response") from None
        except (ConnectionResetError, BrokenPipeError):
            raise _Stale from None
        except asyncio.LimitOverrunError:
            raise RawHTTPError("response headers too large") from None
        status, headers = _parse_head(head)
        try:
            if headers.get("transfer-encoding", "").lower().endswith("chunked"):
                body = await _read_chunked(reader)
            elif "content-length" in headers:
                body = await reader.readexactly(int(headers["content-length"]))
            elif status in (204, 304) or 100 <= status < 200:
                body = b""
            else:  # close-delimited body
                body = await reader.read(-1)
                return RawResponse(status, headers, body), False
        except asyncio.IncompleteReadError:
            raise RawHTTPError("the server closed the connection mid-response") from None
        except asyncio.LimitOverrunError:
            raise RawHTTPError("a chunk-size line is too long") from None
        except ValueError:
            raise RawHTTPError("invalid Content-Length or chunk size") from None
        keep = headers.get("connection", "").lower() != "close"
        return RawResponse(status, headers, body), keep

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


def _close(conn: _Conn) -> None:
    with contextlib.suppress(Exception):  # a broken transport may refuse even to close
        conn[1].close()


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


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    out = bytearray()
    while True:
        line = await reader.readuntil(b"\r\n")
        size = int(line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            # trailers end with an empty line
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass
            return bytes(out)
        out += await reader.readexactly(size)
        await reader.readexactly(2)
