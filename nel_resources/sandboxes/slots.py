"""A bounded pool of numbered slots, usable from any event loop.

A factory may outlive one event loop (a Dagster resource used by several `asyncio.run`
calls), so its concurrency bound cannot be an `asyncio.Semaphore`, which binds to the
first loop that waits on it. Slots are numbered so a sandbox type can tie per-slot state
(a host uid, a warm container) to the slot it holds.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque


class SlotPool:
    """`size` slots numbered 0..size-1; `acquire` waits (FIFO) while all are taken."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("a slot pool needs at least one slot")
        self.size = size
        self._free: list[int] = list(range(size - 1, -1, -1))
        self._lock = threading.Lock()
        self._waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[int]]] = deque()

    @property
    def in_use(self) -> int:
        """Slots held right now."""
        with self._lock:
            return self.size - len(self._free)

    async def acquire(self) -> int:
        """A free slot number; waits until one is released."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._free and not self._waiters:
                return self._free.pop()
            fut: asyncio.Future[int] = loop.create_future()
            self._waiters.append((loop, fut))
        try:
            return await fut
        except asyncio.CancelledError:
            with self._lock:
                queued = (loop, fut) in self._waiters
                if queued:
                    self._waiters.remove((loop, fut))
            # Handed a slot just before the cancel: give it back (a hand-off still in
            # flight finds the future cancelled and gives it back itself).
            if not queued and fut.done() and not fut.cancelled():
                self.release(fut.result())
            raise

    def release(self, slot: int) -> None:
        """Give `slot` back (to the longest waiter, if any)."""
        with self._lock:
            while self._waiters:
                loop, fut = self._waiters.popleft()
                if loop.is_closed() or fut.done():
                    continue
                loop.call_soon_threadsafe(self._hand_off, fut, slot)
                return
            self._free.append(slot)

    def _hand_off(self, fut: asyncio.Future[int], slot: int) -> None:
        if fut.cancelled():
            self.release(slot)
        else:
            fut.set_result(slot)
