"""Limits that keep `nel serve` responsive against slow or hostile clients.

- `HeadDeadlineH11Protocol`: uvicorn's h11 protocol with a deadline on the request head.
  Uvicorn's only timer is the keep-alive one, which every received byte resets, so a
  client that sends its headers a byte at a time holds a connection forever.
- `run_scorer`: scoring runs in a daemon thread with its own event loop, bounded in time,
  so a slow scorer never blocks the server's event loop (`/health` keeps answering) and
  never keeps the process alive after SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["ENV_HEAD_TIMEOUT", "HeadDeadlineH11Protocol", "ScoringTimeout", "run_scorer"]

T = TypeVar("T")

# Read by each server process (workers too), so the CLI sets it before uvicorn starts.
ENV_HEAD_TIMEOUT = "NEL_SERVE_HEAD_TIMEOUT"
DEFAULT_HEAD_TIMEOUT = 10.0


class HeadDeadlineH11Protocol(H11Protocol):
    """Close a connection whose request line and headers do not all arrive in time.

    The deadline starts when a connection opens or a new request's first byte arrives on
    a kept-alive one, and is not reset by further bytes: only a complete head stops it.
    """

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._head_timer: asyncio.TimerHandle | None = None
        self._arm_head_timer()

    def _arm_head_timer(self) -> None:
        if self._head_timer is None:
            limit = float(os.environ.get(ENV_HEAD_TIMEOUT) or DEFAULT_HEAD_TIMEOUT)
            self._head_timer = self.loop.call_later(limit, self._head_timed_out)

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE:
            self._arm_head_timer()
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE and self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)


class ScoringTimeout(Exception):
    """Scoring one response took longer than its limit."""


async def run_scorer(
    make: Callable[[], Awaitable[T]], timeout: float, slots: asyncio.Semaphore
) -> T:
    """Await `make()` in a daemon thread with its own event loop, for at most `timeout` s.

    Args:
        make: Builds the scoring coroutine (called in the worker thread).
        timeout: Seconds before `ScoringTimeout`; the thread is abandoned (it is a daemon,
            so it cannot keep the process alive), its slot is freed when it ends.
        slots: Bounds the scoring threads alive at once, abandoned ones included, so
            hostile bodies cannot pile up threads without limit.

    Raises:
        ScoringTimeout: when the limit passes first.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()
    started = loop.time()
    try:
        # Waiting for a free thread counts against the same limit: when every slot is
        # held by overrunning scorers, new requests fail in time instead of queueing forever.
        await asyncio.wait_for(slots.acquire(), timeout)
    except TimeoutError:
        raise ScoringTimeout(f"no scoring thread free within {timeout:g} s") from None
    timeout = max(0.0, timeout - (loop.time() - started))

    def settle(result: Any, error: BaseException | None) -> None:
        slots.release()
        if done.cancelled():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)

    def work() -> None:
        try:
            outcome: tuple[Any, BaseException | None] = (asyncio.run(_awaited(make)), None)
        except BaseException as exc:  # handed to the awaiting request, never lost
            outcome = (None, exc)
        # An overrun that ends after the server stopped has nobody left to tell.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=work, name="nel-serve-scorer", daemon=True).start()
    try:
        return await asyncio.wait_for(asyncio.shield(done), timeout)
    except TimeoutError:
        raise ScoringTimeout(f"scoring took longer than {timeout:g} s") from None


async def _awaited(make: Callable[[], Awaitable[T]]) -> T:
    return await make()
