"""How many model requests may be in flight: backs off on 429s, recovers with time.

The first version withheld semaphore permits on a 429 and handed one back per run of
successes. Under a fault mix (a few percent of 429s, some hung requests) it withheld 38 of
64 slots, and since hung requests produce no successes the slots never came back: for most
of a run nothing was in flight. This limit instead looks at each time window as a whole:

* cut: when more than `tolerance` of the window's answers were 429s, the limit shrinks by
  that share (all 429s -> one request at a time). A few 429s among many successes are the
  server refusing single requests, not a sign of overload; those requests honour
  Retry-After on their own.
* recover: a window with few or no 429s doubles the limit again, whether or not anything
  succeeded in it (a window in which every request hangs, or nothing answers, recovers too).

Waiting requests are served retries first: a sample coming back from a back-off has
already waited, and finishing it shortens the run's tail. Nothing here is called per byte;
`acquire`/`release` are a counter and a deque on the hot path.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque


class AdaptiveLimit:
    """A counting limit on requests in flight whose size adapts to 429 answers.

    Args:
        maximum: The configured concurrency (the limit never exceeds it).
        window: Seconds per evaluation window (how fast it cuts and recovers).
        tolerance: Share of 429s in a window tolerated without a cut.
    """

    def __init__(self, maximum: int, *, window: float = 0.5, tolerance: float = 0.25) -> None:
        if maximum < 1:
            raise ValueError("maximum must be at least 1")
        self.maximum = maximum
        self.window = window
        self.tolerance = tolerance
        self.limit = maximum
        self.in_flight = 0
        self.cuts = 0
        self._throttled = 0
        self._answered = 0
        self._peak = 0  # most requests in flight during the current window
        self._fresh: deque[asyncio.Future[None]] = deque()
        self._retries: deque[asyncio.Future[None]] = deque()
        self._ticker: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ permits
    async def acquire(self, *, retry: bool = False) -> None:
        """Wait for a slot; `retry` requests are served before fresh ones."""
        if self.in_flight < self.limit and not self._retries and (retry or not self._fresh):
            self._take()
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        (self._retries if retry else self._fresh).append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # granted just as we were cancelled: give the slot back
            else:
                with contextlib.suppress(ValueError):
                    (self._retries if retry else self._fresh).remove(fut)
            raise

    def release(self) -> None:
        """Give a slot back (once per successful `acquire`)."""
        self.in_flight -= 1
        self._wake()

    def _take(self) -> None:
        self.in_flight += 1
        if self.in_flight > self._peak:
            self._peak = self.in_flight

    def _wake(self) -> None:
        while self.in_flight < self.limit:
            queue = self._retries or self._fresh
            if not queue:
                return
            fut = queue.popleft()
            if not fut.done():
                self._take()
                fut.set_result(None)

    # ------------------------------------------------------------------ feedback
    def record(self, *, throttled: bool) -> None:
        """Count one answer from the server (`throttled` for HTTP 429)."""
        if throttled:
            self._throttled += 1
            if self._ticker is None:
                self._ticker = asyncio.get_running_loop().create_task(self._tick())
        else:
            self._answered += 1

    def close(self) -> None:
        """Stop the window timer (the client is closing)."""
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None

    async def _tick(self) -> None:
        # Runs while there is something to judge: 429s seen, or a limit below maximum.
        try:
            while True:
                self._peak = self.in_flight
                await asyncio.sleep(self.window)
                self._evaluate()
                if self.limit >= self.maximum:
                    return  # back at full size; the next 429 starts a new timer
        finally:
            self._ticker = None

    def _evaluate(self) -> None:
        throttled, total = self._throttled, self._throttled + self._answered
        self._throttled = self._answered = 0
        if throttled and throttled / total > self.tolerance:
            # Shrink what was actually in use (a half-idle limit is not the problem).
            base = max(1, min(self.limit, self._peak))
            self.limit = max(1, int(base * (1.0 - throttled / total)))
            self.cuts += 1
        elif self.limit < self.maximum:
            self.limit = min(self.maximum, self.limit * 2)
            self._wake()
