"""Per-request timeouts at the cost of a set insert: one periodic check for all requests.

`asyncio.timeout()` costs ~10 us per use here (a Timeout object, a timer handle in the
loop's heap, state changes on the way out): at tens of thousands of model requests a
second that was a quarter of the client's own CPU per request. Request timeouts are
seconds long and need no microsecond precision, so `Deadlines` keeps the armed requests
in a set and one timer, ticking every `tick` seconds while any are armed, cancels the
tasks whose deadline has passed. A fired deadline shows as `entry.fired`; the awaiting
code turns its CancelledError into a TimeoutError (see `ModelClient._send`).
"""

from __future__ import annotations

import asyncio


class Deadline:
    """One armed timeout."""

    __slots__ = ("at", "fired", "task")

    def __init__(self, at: float, task: asyncio.Task[object]) -> None:
        self.at = at
        self.task = task
        self.fired = False


class Deadlines:
    """The armed timeouts of one client (one event loop at a time).

    Args:
        tick: seconds between checks: a deadline fires at most this late.
    """

    def __init__(self, tick: float = 0.02) -> None:
        self.tick = tick
        self._armed: set[Deadline] = set()
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def arm(self, timeout: float) -> Deadline:
        """A deadline `timeout` seconds from now for the current task."""
        # The current task of the loop this client last ran on: `get_running_loop()` costs
        # a getpid system call on every use (CPython checks for a fork), once per request.
        # A loop that is not running has no current task, so None sends a client moved to
        # a new loop (or its first request) to ask for the running one.
        loop = self._loop
        task = asyncio.current_task(loop) if loop is not None else None
        if task is None:
            loop = asyncio.get_running_loop()
            task = asyncio.current_task(loop)
            assert task is not None
        entry = Deadline(loop.time() + timeout, task)
        self._armed.add(entry)
        if self._handle is None or self._loop is not loop:
            # A client reused on a new event loop: the old loop's timer is gone with it.
            self._loop = loop
            self._handle = loop.call_later(self.tick, self._check)
        return entry

    def disarm(self, entry: Deadline) -> None:
        """The awaited work ended (done, failed or fired)."""
        self._armed.discard(entry)

    def _check(self) -> None:
        loop = self._loop
        assert loop is not None
        now = loop.time()
        for entry in [e for e in self._armed if e.at <= now]:
            self._armed.discard(entry)
            entry.fired = True
            entry.task.cancel()
        self._handle = loop.call_later(self.tick, self._check) if self._armed else None

    def close(self) -> None:
        """Stop the timer (armed deadlines are dropped)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._armed.clear()


__all__ = ["Deadline", "Deadlines"]
