"""Scoring processes for `nel serve`: a bounded pool of long-lived workers that can be killed.

A scorer is arbitrary code (BYOB files, sympy, user regexes): it may loop forever or allocate
without bound. A thread running it cannot be stopped, so an overrun kept burning CPU and
memory after its request was answered 422. Here every score runs in a worker process
(`benchmarks.serve_worker` is the workers' side):

- A *zygote* is forked once, when the pool is built (before the server's event loop and its
  threads exist), holding the benchmark already loaded. Each worker is forked from it, so a
  replacement costs one `fork()` of a quiet single-threaded process and no re-import.
- Requests are batched: each goes to a worker with nothing in flight if there is one, else
  to the one with the fewest requests; a worker has at most one batch in flight, and what
  queues meanwhile goes in one write when that batch is answered (the worker answers a
  batch in one write too). Waking a sleeping process per request cost more than the HTTP
  serving itself; a batch costs one wake-up each way. A worker that finishes its batch
  with nothing queued takes the requests queued unsent on another (one stuck on an
  overrunning scorer holds only the requests already sent with the overrun).
- A worker scores its requests in order, so the oldest unanswered one is the one running.
  Every request has its own deadline (`timeout`, waiting included); when it passes, the
  request is answered `ScoringTimeout` and its worker is SIGKILLed (its CPU and memory are
  released at once); the requests queued behind it go to a fresh worker with their own
  deadlines unchanged. With one timeout for all requests (as the server has), deadlines in a
  worker's queue run oldest first, so only an overrunning scorer's worker is ever killed.
- Scorers run under an address space limit (`RLIMIT_AS`): one that blows memory gets a
  `MemoryError`, answers, and its worker retires.
- Nothing outlives the server: the zygote dies with the server (PR_SET_PDEATHSIG) and every
  worker with the zygote, whichever way the server ends (SIGTERM, SIGKILL, a crash);
  `close()` kills them at once on a normal shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from benchmarks.serve_json import dumps, loads
from benchmarks.serve_worker import (
    HEADER,
    REPLY_OK,
    REPLY_RETIRE,
    die_with_parent,
    frame,
    recv_exact,
    split_frames,
    zygote_main,
)

__all__ = [
    "DEFAULT_SCORER_MEMORY_MB",
    "ScoringFailed",
    "ScoringPool",
    "ScoringTimeout",
    "default_pool_size",
]

#: Address space a worker may grow by beyond what it inherits (MiB).
DEFAULT_SCORER_MEMORY_MB = 2048


class ScoringTimeout(Exception):
    """Scoring one response took longer than its limit (the worker was killed)."""


class ScoringFailed(Exception):
    """The scorer raised, returned no verdict, or its worker died; the message says which."""


def default_pool_size(http_workers: int = 1) -> int:
    """Scoring workers per server process: the CPUs shared among the HTTP workers, at least 2
    (one overrunning scorer must not stall every other request until its limit)."""
    return max(2, (os.cpu_count() or 1) // max(1, http_workers))


@dataclass(eq=False, slots=True)
class _Job:
    """One response to score: its framed request, the caller's future, its deadline."""

    request: bytes
    future: asyncio.Future[bytes]
    timeout: float
    timer: asyncio.TimerHandle | None = None
    worker: _Worker | None = None  # None once answered or failed


@dataclass(eq=False, slots=True)
class _Worker:
    """One scoring process, as the server sees it: its socket and its requests."""

    pid: int
    sock: socket.socket
    loop: asyncio.AbstractEventLoop
    jobs: deque[_Job] = field(default_factory=deque)  # sent or to send, oldest first
    out: list[bytes] = field(default_factory=list)  # framed requests not yet written
    transport: Any = None  # uvloop's transports are no asyncio.Transport subclass
    flush_pending: bool = False
    retiring: bool = False
    dead: bool = False

    def kill(self) -> None:
        self.dead = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.pid, signal.SIGKILL)
        if self.transport is not None:
            try:
                self.transport.abort()  # closes the socket too, from its loop
                return
            except RuntimeError:  # that loop is closed already
                pass
        self.sock.close()


class _Channel(asyncio.Protocol):
    """The server's end of one worker's socket: hands each reply to the pool.

    A protocol registered once with the loop (rather than `sock_recv` per call, which adds
    and removes a reader each time) keeps a round trip to one write and one wake-up.
    """

    def __init__(self, pool: ScoringPool, worker: _Worker) -> None:
        self.pool = pool
        self.worker = worker
        self.buffer = bytearray()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        for reply in split_frames(self.buffer):
            self.pool._answered(self.worker, reply)
        worker = self.worker
        if len(worker.jobs) == len(worker.out) and not (worker.dead or worker.retiring):
            # Its batch is answered: send what queued meanwhile, or what waits elsewhere.
            if not worker.out:
                self.pool._steal(worker)
            if worker.out:
                self.pool._flush(worker)

    def connection_lost(self, exc: Exception | None) -> None:
        self.pool._lost(self.worker, "scorer failed: its worker process died (crashed or was killed)")


def _settle(job: _Job, reply: bytes | None = None, error: Exception | None = None) -> None:
    """Answer `job`'s caller (if it still waits) and stop its deadline."""
    job.worker = None
    if job.timer is not None:
        job.timer.cancel()
    future = job.future
    if future.done():
        return
    with contextlib.suppress(RuntimeError):  # its loop is gone (a test client's earlier loop)
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(reply)  # type: ignore[arg-type]


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
        self._workers: list[_Worker] = []
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
                die_with_parent()
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the server's to handle
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                zygote_main(child_end, env, memory_bytes)
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
        return [w.pid for w in self._workers]

    def _spawn(self, loop: asyncio.AbstractEventLoop) -> _Worker:
        """Fork a worker from the zygote; it connects to `loop` in the background."""
        if self._closed:
            raise ScoringFailed("the server is stopping")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with self._spawn_lock:
                socket.send_fds(self._control, [b"w"], [theirs.fileno()])
                head = recv_exact(self._control, HEADER.size)
        except OSError:
            head = None
        finally:
            theirs.close()
        if head is None:
            ours.close()
            raise ScoringFailed("the scoring pool's zygote is gone (is the server stopping?)")
        ours.setblocking(False)
        worker = _Worker(HEADER.unpack(head)[0], ours, loop)
        self._workers.append(worker)
        loop.create_task(self._connect(worker))
        return worker

    async def _connect(self, worker: _Worker) -> None:
        try:
            transport, _ = await worker.loop.create_unix_connection(
                lambda: _Channel(self, worker), sock=worker.sock)
        except OSError:
            self._lost(worker, "scorer failed: its worker process could not be reached")
            return
        if worker.dead:
            transport.abort()
            return
        worker.transport = transport
        self._flush(worker)

    def close(self) -> None:
        """Kill every worker and the zygote (idempotent)."""
        if self._closed:
            return
        self._closed = True
        stopping = ScoringFailed("the server is stopping")
        for worker in self._workers:
            worker.kill()
            for job in worker.jobs:
                _settle(job, error=stopping)
            worker.jobs.clear()
        self._workers.clear()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._zygote_pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self._zygote_pid, 0)
        self._control.close()

    # ---------------------------------------------------------------- dispatch

    def _pick(self, loop: asyncio.AbstractEventLoop) -> _Worker:
        """The worker for a new request: one with nothing in flight (joining the batch it
        is about to be sent, which costs no extra wake-up), a new one while the pool has
        room, else the one with the fewest requests."""
        idle: _Worker | None = None
        busy: _Worker | None = None
        for worker in list(self._workers):
            if worker.loop is not loop:
                # Bound to an event loop that is no longer serving (a test client's earlier
                # loop): replace it rather than share a socket across loops.
                self._discard(worker)
                gone = ScoringFailed("scorer failed: its event loop stopped serving")
                for job in worker.jobs:
                    _settle(job, error=gone)
                worker.jobs.clear()
                continue
            if len(worker.jobs) == len(worker.out):  # nothing in flight
                if idle is None or len(worker.out) < len(idle.out):
                    idle = worker
            elif busy is None or len(worker.jobs) < len(busy.jobs):
                busy = worker
        if idle is not None and (not idle.out or len(self._workers) >= self.size):
            return idle
        if len(self._workers) < self.size:
            return self._spawn(loop)
        chosen = idle or busy
        assert chosen is not None
        return chosen

    def _steal(self, thief: _Worker) -> None:
        """Give `thief` (nothing in flight, nothing queued) the requests queued unsent on the
        worker with the most of them: unsent, they can move, and a worker stuck on an
        overrunning scorer must not hold them until its limit."""
        victim: _Worker | None = None
        for worker in self._workers:
            if (worker is not thief and worker.out and len(worker.jobs) > len(worker.out)
                    and (victim is None or len(worker.out) > len(victim.out))):
                victim = worker
        if victim is None:
            return
        moved = [victim.jobs.pop() for _ in victim.out]
        victim.out.clear()
        for job in reversed(moved):
            job.worker = thief
            thief.jobs.append(job)
            thief.out.append(job.request)

    def _send(self, job: _Job, worker: _Worker) -> None:
        """Queue `job` on `worker`: what queues while the worker has nothing in flight is
        written at the end of this loop iteration, in one write; what queues while it
        scores goes in one write once its batch is answered."""
        job.worker = worker
        worker.jobs.append(job)
        worker.out.append(job.request)
        if len(worker.jobs) > len(worker.out):
            # A batch is in flight: this goes with the next one, sent once that is answered
            # (a busy worker reads nothing meanwhile; writing now would only split batches).
            return
        if not worker.flush_pending:
            worker.flush_pending = True
            worker.loop.call_soon(self._flush, worker)

    def _flush(self, worker: _Worker) -> None:
        worker.flush_pending = False
        if worker.out and worker.transport is not None and not worker.dead:
            worker.transport.write(b"".join(worker.out))
            worker.out.clear()

    def _answered(self, worker: _Worker, reply: bytes) -> None:
        if worker.dead or not worker.jobs:
            return
        if reply[0] == REPLY_RETIRE:
            worker.retiring = True  # it exits after this; its other requests go elsewhere
        _settle(worker.jobs.popleft(), reply)

    def _discard(self, worker: _Worker) -> None:
        """Kill `worker` and forget it (its requests are the caller's to settle)."""
        worker.kill()
        with contextlib.suppress(ValueError):
            self._workers.remove(worker)

    def _resend(self, jobs: list[_Job]) -> None:
        """Requests a dead worker had not answered (nor, but for a killed head, started):
        to one fresh worker, oldest first, keeping their deadlines."""
        pending = [job for job in jobs if not job.future.done()]
        for job in jobs:
            if job.future.done():
                _settle(job)  # its caller is gone (cancelled): just stop its deadline
        if not pending:
            return
        try:
            worker = self._spawn(pending[0].future.get_loop())
        except ScoringFailed as exc:
            for job in pending:
                _settle(job, error=exc)
            return
        for job in pending:
            self._send(job, worker)

    def _lost(self, worker: _Worker, reason: str) -> None:
        """`worker`'s process ended: its running request failed, the rest go elsewhere."""
        if worker.dead:
            return  # we killed it, and dealt with its requests then
        self._discard(worker)
        jobs = list(worker.jobs)
        worker.jobs.clear()
        if jobs and not worker.retiring:
            _settle(jobs.pop(0), error=ScoringFailed(reason))
        if not self._closed:
            self._resend(jobs)

    def _expire(self, job: _Job) -> None:
        """`job`'s deadline passed unanswered: fail it; if its worker had it (or a request
        sent with it), kill that worker and resend the rest."""
        worker = job.worker
        if worker is None:
            return
        limit = f"{job.timeout:g} s"
        jobs = worker.jobs
        sent = len(jobs) - len(worker.out)
        index = jobs.index(job)
        if index >= sent:
            # Still queued unsent: the worker never saw it, so it just leaves the queue.
            del jobs[index]
            del worker.out[index - sent]
            _settle(job, error=ScoringTimeout(f"no scoring worker free within {limit}"))
            return
        # Sent: the first unanswered is what the worker is scoring (with one timeout for all
        # requests it is always that one which expires first).
        self._discard(worker)
        rest = [j for j in jobs if j is not job]
        jobs.clear()
        if index == 0:
            error = ScoringTimeout(f"scoring took longer than {limit} (its worker was stopped)")
        else:
            error = ScoringTimeout(f"no scoring worker free within {limit}")
        _settle(job, error=error)
        self._resend(rest)

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
        return loads(await self.verify_json(text, expected, kwargs, timeout))

    async def verify_json(
        self, text: str, expected: str, kwargs: dict[str, Any], timeout: float
    ) -> bytes:
        """As `verify`, but the verdict as the JSON bytes the worker wrote (a server can
        answer with them as they are)."""
        loop = asyncio.get_running_loop()
        request = frame(dumps({"text": text, "expected": expected, "kwargs": kwargs}))
        job = _Job(request, loop.create_future(), timeout)
        self._send(job, self._pick(loop))
        # A timer rather than `asyncio.timeout`: the pool, not the caller's task, decides
        # what a passed deadline means (kill the worker, resend what waited behind it).
        # A caller cancelled meanwhile leaves the timer armed, so an overrun still stops.
        job.timer = loop.call_later(timeout, self._expire, job)
        reply = await job.future
        if reply[0] != REPLY_OK:
            raise ScoringFailed(reply[1:].decode("utf-8", "replace"))
        return reply[1:]
