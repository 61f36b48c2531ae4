"""Per-request timeouts at the cost of a set insert: one periodic check for all requests.

`asyncio.timeout()` costs ~10 us per use here (a Timeout object, a timer handle in the
loop's heap, state changes on the way out): at tens of thousands of model requests a
second that was a quarter of the client's own CPU per request. Request timeouts are
seconds long and need no microsecond precision, so `Deadlines` keeps the armed requests
in a set and one timer, ticking every `tick` seconds while any are armed, cancels the
tasks whose deadline has passed. A fired deadline shows as `entry.fired`; the awaiting
code turns its CancelledError into a TimeoutError (see `ModelClient._send`).

The same check cuts hung attempts early (`HangCut`, hang_cut.py): an attempt silent for
far longer than the answers seen so far is cancelled with `entry.cut` set, and retried.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

from nel_resources.wire.hang_cut import HangCut


class Deadline:
    """One armed timeout.

    `scale` stretches the hang cut for this attempt (0: never cut); `conn`, when the
    transport sets it, is the connection whose `received` count shows progress.
    """

    __slots__ = ("at", "conn", "cut", "fired", "n0", "scale", "seen", "since", "start", "task")

    def __init__(self, at: float, task: asyncio.Task[object], start: float, scale: float,
                 n0: int = 0) -> None:
        self.at = at
        self.task = task
        self.fired = False
        self.cut = False
        self.start = self.since = start
        self.scale = scale
        self.conn: Any = None
        self.seen = 0
        # Answers counted at the start plus the attempts then in flight: answers past this
        # many came from attempts started after this one (it was overtaken).
        self.n0 = n0


class Deadlines:
    """The armed timeouts of one client (one event loop at a time).

    Args:
        tick: seconds between checks: a deadline fires at most this late.
    """

    def __init__(self, tick: float = 0.02, hang: HangCut | None = None,
                 hang_every: float = 0.1) -> None:
        self.tick = tick
        # Hung attempts are looked for less often than deadlines fire: a cut is seconds late
        # at the earliest, and the scan reads every attempt's connection.
        self.hang = hang
        self.hang_every = hang_every
        self._hang_at = -math.inf
        self._armed: set[Deadline] = set()
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def arm(self, timeout: float, scale: float = 0.0) -> Deadline:
        """A deadline `timeout` seconds from now for the current task; `scale` > 0 lets the
        hang cut end it earlier (at `scale` times the learnt cut)."""
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
        now = loop.time()
        hang = self.hang
        entry = Deadline(now + timeout, task, now, scale,
                         hang.n + len(self._armed) if hang is not None and scale else 0)
        self._armed.add(entry)
        if self._handle is None or self._loop is not loop:
            # A client reused on a new event loop: the old loop's timer is gone with it.
            self._loop = loop
            self._handle = loop.call_later(self.tick, self._check)
        return entry

    def disarm(self, entry: Deadline) -> None:
        """The awaited work ended (done, failed or fired)."""
        self._armed.discard(entry)

    def answered(self, entry: Deadline) -> None:
        """The attempt got its answer: its latency teaches the hang cut."""
        if self.hang is not None and self._loop is not None:
            self.hang.observe(self._loop.time() - entry.start)

    def _check(self) -> None:
        loop = self._loop
        assert loop is not None
        now = loop.time()
        for entry in [e for e in self._armed if e.at <= now]:
            self._armed.discard(entry)
            entry.fired = True
            entry.task.cancel()
        if self.hang is not None and self._armed and now - self._hang_at >= self.hang_every:
            self._hang_at = now
            self._cut_hung(now, self.hang)
        self._handle = loop.call_later(self.tick, self._check) if self._armed else None

    def _cut_hung(self, now: float, hang: HangCut) -> None:
        """Cancel the attempts silent past the learnt cut that are few among those in flight
        or were overtaken by later attempts (see hang_cut.py)."""
        limit = hang.limit(now)
        if limit == math.inf:
            return
        overdue = []
        for entry in self._armed:
            conn = entry.conn
            if conn is not None and conn.received != entry.seen:
                entry.seen, entry.since = conn.received, now  # bytes arrived: not hung
            elif entry.scale > 0 and now - entry.since > limit * entry.scale:
                overdue.append(entry)
        if not overdue:
            return
        few = hang.allows(len(overdue), len(self._armed))
        for entry in overdue:
            if not few and hang.n - entry.n0 < hang.overtaken:
                continue
            self._armed.discard(entry)
            entry.cut = True
            hang.cuts += 1
            entry.task.cancel()

    def close(self) -> None:
        """Stop the timer (armed deadlines are dropped)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._armed.clear()


__all__ = ["Deadline", "Deadlines"]
