"""When an attempt has run so far past the answers seen so far that it is hung.

The drills: under 2% hung requests, the default per-attempt timeout (120 s) let the hung
attempts fill the concurrency slots, and 42 of 49 ten-second windows finished no sample
(495 s against 20 s clean). A lower `--timeout` helps but cuts a genuinely slow model too,
so the cut here is learnt from the run itself:

* after `min_samples` answers, an attempt silent for longer than
  `max(factor x p99 of the answers' latencies, floor)` is cut and retried at once;
* a retried sample's next cut is twice as late (a rare, genuinely long answer gets its time
  within a few cuts; past the configured timeout nothing is cut any more), and cuts do not
  use up the sample's retries;
* never when the model as a whole is slow: an attempt past the cut is hung only if few of
  the attempts in flight are (at most `crowd` of them), or if attempts started after it
  have answered (`overtaken` of them; a hung attempt at the end of a run, when only hung
  ones are left in flight). When most attempts in flight are past the cut and none was
  overtaken, the model has slowed down and nothing is cut; its slow answers then raise the
  cut (a model whose every answer takes 20-60 s learns a cut of minutes anyway);
* silence, not age: bytes arriving on an attempt's connection (a response streaming in)
  restart its clock, so an answer making progress is never cut.

`observe` is a store into a ring on the hot path; the percentile is recomputed at most every
`refresh` seconds by the periodic check that already runs for the timeouts (deadlines.py).
"""

from __future__ import annotations

import math


class HangCut:
    """The learnt silence after which an attempt counts as hung.

    Args:
        factor: How many times the p99 latency an attempt may stay silent.
        floor: Seconds of silence never cut, however fast the answers are.
        min_samples: Answers seen before anything is cut.
        crowd: Share of the attempts in flight that may be past the cut at once and be cut;
            more means the model slowed down (unless `overtaken` says otherwise).
        overtaken: Answers from attempts started after an attempt that mark it as hung
            however many are past the cut.
        refresh: Seconds between recomputations of the percentile.
    """

    __slots__ = ("_computed_at", "_computed_n", "_limit", "_ring", "crowd", "cuts", "factor",
                 "floor", "min_samples", "n", "overtaken", "refresh")

    _SIZE = 1024  # the latest answers the percentile is taken over (a power of two)

    def __init__(self, *, factor: float = 8.0, floor: float = 2.0, min_samples: int = 32,
                 crowd: float = 0.25, overtaken: int = 4, refresh: float = 0.5) -> None:
        self.factor = factor
        self.floor = floor
        self.min_samples = min_samples
        self.crowd = crowd
        self.overtaken = overtaken
        self.refresh = refresh
        self.n = 0  # answers observed
        self.cuts = 0  # attempts cut
        self._ring = [0.0] * self._SIZE
        self._limit = math.inf
        self._computed_at = -math.inf
        self._computed_n = 0

    def observe(self, seconds: float) -> None:
        """Record one answered attempt's latency."""
        self._ring[self.n & (self._SIZE - 1)] = seconds
        self.n += 1

    def limit(self, now: float) -> float:
        """Seconds of silence past which an attempt is hung (inf until enough answers)."""
        if self.n < self.min_samples:
            return math.inf
        if self.n != self._computed_n and now - self._computed_at >= self.refresh:
            seen = sorted(self._ring[: min(self.n, self._SIZE)])
            p99 = seen[min(len(seen) - 1, int(0.99 * len(seen)))]
            self._limit = max(self.factor * p99, self.floor)
            self._computed_at, self._computed_n = now, self.n
        return self._limit

    def allows(self, overdue: int, in_flight: int) -> bool:
        """Whether `overdue` attempts past the cut among `in_flight` are hung ones (few),
        not a slow model (many)."""
        return overdue <= max(1, int(self.crowd * in_flight))


__all__ = ["HangCut"]
