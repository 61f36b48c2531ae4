"""Scoring processes for `nel serve`: a bounded pool of long-lived workers that can be killed.

A scorer is arbitrary code (BYOB files, sympy, user regexes): it may loop forever or allocate
without bound. A thread running it cannot be stopped, so an overrun kept burning CPU and
memory after its request was answered 422. Here every score runs in a worker process:

- A *zygote* is forked once, when the pool is built (before the server's event loop and its
  threads exist), holding the benchmark already loaded. Each worker is forked from it, so a
  replacement costs one `fork()` of a quiet single-threaded process and no re-import.
- A worker scores one response at a time on its own persistent event loop (async `verify`
  needs one; building a loop per request was the old design's main cost), under an address
  space limit (`RLIMIT_AS`) so a scorer that blows memory gets a `MemoryError`, not the box.
- A request waits for an idle worker and for its verdict within its time limit; past it the
  worker is SIGKILLed (its CPU and memory are released at once), replaced, and the request
  is answered 422 (`ScoringTimeout`).
- Nothing outlives the server: the zygote dies with the server (PR_SET_PDEATHSIG) and every
  worker with the zygote, whichever way the server ends (SIGTERM, SIGKILL, a crash);
  `close()` kills them at once on a normal shutdown.

Messages are length-prefixed JSON over a socketpair per worker; the server side uses the
running loop's `sock_*` calls, so one pool serves whichever event loop calls it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import resource
import signal
import socket
import struct
import sys
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

from benchmarks.serve_json import dumps, loads

__all__ = [
    "DEFAULT_SCORER_MEMORY_MB",
    "ScoringFailed",
    "ScoringPool",
    "ScoringTimeout",
    "default_pool_size",
]

#: Address space a worker may grow by beyond what it inherits (MiB).
DEFAULT_SCORER_MEMORY_MB = 2048
_HEADER = struct.Struct("!I")
_PR_SET_PDEATHSIG = 1


class ScoringTimeout(Exception):
    """Scoring one response took longer than its limit (the worker was killed)."""


class ScoringFailed(Exception):
    """The scorer raised, returned no verdict, or its worker died; the message says which."""


def default_pool_size(http_workers: int = 1) -> int:
    """Scoring workers per server process: the CPUs shared among the HTTP workers, at least 2
    (one overrunning scorer must not stall every other request until its limit)."""
    return max(2, (os.cpu_count() or 1) // max(1, http_workers))


def _die_with_parent() -> None:
    """Get SIGKILL when the parent exits (Linux); exit now if it already has."""
    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(0)


def _send_frame(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(_HEADER.pack(len(payload)) + payload)


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _recv_frame(sock: socket.socket) -> bytes | None:
    head = _recv_exact(sock, _HEADER.size)
    if head is None:
        return None
    return _recv_exact(sock, _HEADER.unpack(head)[0])




# --------------------------------------------------------------------------- worker side


def _limit_memory(extra_bytes: int | None) -> None:
    """Cap the address space at what the worker holds now plus `extra_bytes`."""
    if extra_bytes is None:
        return
    try:
        with open("/proc/self/statm") as fh:
            current = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return
    limit = current + extra_bytes
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _worker_main(sock: socket.socket, env: Any, memory_bytes: int | None) -> None:
    """Score requests from `sock` one at a time until it closes."""
    from benchmarks._types import VerifyResult

    _limit_memory(memory_bytes)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    while True:
        frame = _recv_frame(sock)
        if frame is None:
            return
        request = loads(frame)
        retire = False
        try:
            result = loop.run_until_complete(
                env.verify(request["text"], request["expected"], **request["kwargs"])
            )
            if isinstance(result, VerifyResult):
                reply: dict[str, Any] = {"ok": result.to_dict()}
            else:
                reply = {"error": "scorer returned no VerifyResult"}
        except MemoryError:
            # Fragmented and near its cap: answer, then make way for a fresh worker.
            retire = True
            reply = {"error": "scorer failed: MemoryError: the scorer exceeded its memory limit"}
        except BaseException as exc:  # the request gets the error; the worker carries on
            reply = {"error": f"scorer failed: {type(exc).__name__}: {exc}"[:500]}
        reply["retire"] = retire
        try:
            payload = dumps(reply)
        except Exception as exc:
            payload = dumps({"error": f"verdict not serialisable: {exc}"[:500], "retire": False})
        _send_frame(sock, payload)
        if retire:
            return


def _zygote_main(control: socket.socket, env: Any, memory_bytes: int | None) -> None:
    """Fork a worker for each socket the server sends; answer with the worker's PID."""
    # Children are reaped by the kernel: a killed worker vanishes at once.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    while True:
        try:
            _, fds, _, _ = socket.recv_fds(control, 16, 1)
        except OSError:
            return
        if not fds:
            return  # the server closed the control socket
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                control.close()
                _die_with_parent()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                with socket.socket(fileno=fds[0]) as sock:
                    _worker_main(sock, env, memory_bytes)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(fds[0])
        control.sendall(_HEADER.pack(pid))


# --------------------------------------------------------------------------- server side


class _Channel(asyncio.Protocol):
    """The server's end of one worker's socket: hands each reply frame to the waiting call.

    A protocol registered once with the loop (rather than `sock_recv` per call, which adds
    and removes a reader each time) keeps the round trip to one write and one wake-up.
    """

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.waiter: asyncio.Future[bytes | None] | None = None
        self.transport: Any = None  # uvloop's transports are no asyncio.Transport subclass

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buf = self.buffer
        buf += data
        if len(buf) < _HEADER.size:
            return
        (n,) = _HEADER.unpack_from(buf)
        if len(buf) < _HEADER.size + n:
            return
        frame = bytes(buf[_HEADER.size : _HEADER.size + n])
        del buf[: _HEADER.size + n]
        self._settle(frame)

    def connection_lost(self, exc: Exception | None) -> None:
        self._settle(None)  # the worker died (or was killed)

    def _settle(self, frame: bytes | None) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(frame)


@dataclass(eq=False)
class _Worker:
    pid: int
    sock: socket.socket
    channel: _Channel | None = None
    loop: asyncio.AbstractEventLoop | None = None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.pid, signal.SIGKILL)
        if self.channel is not None and self.channel.transport is not None:
            self.channel.transport.abort()
        else:
            self.sock.close()


class ScoringPool:
    """Up to `size` worker processes scoring `env.verify`, each killable on overrun.

    Args:
        env: The environment whose `verify` the workers run (inherited through `fork`).
        size: Most workers alive at once, hence most responses scored at once.
        memory_mb: Address space each worker may grow by (MiB); None for no cap.

    Build it from the main thread before serving (the zygote is forked at once).
    """

    def __init__(self, env: Any, size: int, memory_mb: int | None = DEFAULT_SCORER_MEMORY_MB):
        if size < 1:
            raise ValueError(f"scoring pool size must be >= 1, got {size}")
        self.size = size
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._spawn_lock = threading.Lock()
        self._closed = False
        memory_bytes = None if memory_mb is None else memory_mb << 20
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        # Flush before forking so buffered output is not written twice.
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                parent_end.close()
                _die_with_parent()
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the server's to handle
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                _zygote_main(child_end, env, memory_bytes)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        child_end.close()
        self._zygote_pid = pid
        self._control = parent_end

    # ---------------------------------------------------------------- lifecycle

    def pids(self) -> list[int]:
        """PIDs of the live workers (the zygote excluded)."""
        return [w.pid for w in (*self._idle, *self._busy)]

    def _spawn(self) -> _Worker:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with self._spawn_lock:
                socket.send_fds(self._control, [b"w"], [theirs.fileno()])
                head = _recv_exact(self._control, _HEADER.size)
        finally:
            theirs.close()
        if head is None:
            ours.close()
            raise ScoringFailed("the scoring pool's zygote is gone (is the server stopping?)")
        ours.setblocking(False)
        return _Worker(_HEADER.unpack(head)[0], ours)

    def close(self) -> None:
        """Kill every worker and the zygote (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for worker in (*self._idle, *self._busy):
            worker.kill()
        self._idle.clear()
        self._busy.clear()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._zygote_pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self._zygote_pid, 0)
        self._control.close()
        for waiter in self._waiters:
            if not waiter.done():
                waiter.cancel()

    # ---------------------------------------------------------------- dispatch

    async def _acquire(self) -> _Worker:
        while True:
            if self._closed:
                raise ScoringFailed("the server is stopping")
            if self._idle:
                worker = self._idle.pop()
                if worker.loop is not None and worker.loop is not asyncio.get_running_loop():
                    # Bound to an event loop that is no longer serving (a test client's
                    # earlier loop): replace it rather than share a socket across loops.
                    worker.kill()
                    continue
                self._busy.add(worker)
                return worker
            if len(self._busy) < self.size:
                worker = self._spawn()
                self._busy.add(worker)
                return worker
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                with contextlib.suppress(RuntimeError):  # its loop is gone
                    waiter.set_result(None)
                    return

    def _release(self, worker: _Worker, healthy: bool) -> None:
        self._busy.discard(worker)
        if healthy and not self._closed:
            self._idle.append(worker)
        else:
            worker.kill()
        self._wake_one()

    async def _exchange(self, worker: _Worker, payload: bytes) -> bytes | None:
        loop = asyncio.get_running_loop()
        if worker.channel is None:
            _, worker.channel = await loop.create_unix_connection(_Channel, sock=worker.sock)
            worker.loop = loop
        channel = worker.channel
        if channel.transport is None or channel.transport.is_closing():
            return None
        waiter: asyncio.Future[bytes | None] = loop.create_future()
        channel.waiter = waiter
        channel.transport.write(_HEADER.pack(len(payload)) + payload)
        return await waiter

    async def verify(
        self, text: str, expected: str, kwargs: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        """Score in a worker within `timeout` s (waiting for one included).

        Returns:
            The verdict, `VerifyResult.to_dict()`.

        Raises:
            ScoringTimeout: the limit passed (a worker that was scoring is killed).
            ScoringFailed: the scorer raised or returned no verdict, or its worker died.
        """
        payload = dumps({"text": text, "expected": expected, "kwargs": kwargs})
        worker: _Worker | None = None
        reply: dict[str, Any] | None = None
        try:
            async with asyncio.timeout(timeout):
                worker = await self._acquire()
                frame = await self._exchange(worker, payload)
            reply = loads(frame) if frame is not None else None
        except TimeoutError:
            if worker is None:
                raise ScoringTimeout(f"no scoring worker free within {timeout:g} s") from None
            raise ScoringTimeout(
                f"scoring took longer than {timeout:g} s (its worker was stopped)"
            ) from None
        finally:
            # Anything but a clean answer (timeout, cancellation, a dead worker, a worker
            # retiring after a MemoryError) leaves no reusable worker: kill and replace it.
            if worker is not None:
                self._release(worker, healthy=reply is not None and not reply.get("retire"))
        if reply is None:
            raise ScoringFailed("scorer failed: its worker process died (crashed or was killed)")
        if "error" in reply:
            raise ScoringFailed(reply["error"])
        return reply["ok"]
