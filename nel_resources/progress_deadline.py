"""A start-up deadline that a busy machine does not break.

A fixed deadline on a process starting is a hang detector, and a poor one: on a loaded
machine (a CI run with two test workers, a build beside it) an interpreter importing its
dependencies can take many times its idle start-up time while making steady progress.
``ProgressDeadline`` tells the two apart. It expires when the watched process group has
used no CPU for ``stall`` seconds (hung: blocked on a lock, a pipe, a dead peer), or when
the generous ``ceiling`` has passed, whichever comes first. While the group keeps using
CPU, a slow start is waited for.

Linux only (``/proc``); elsewhere the deadline is the ceiling alone.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

__all__ = ["ProgressDeadline", "group_cpu_seconds"]

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
#: CPU is read at most this often: listing /proc on every 50 ms health poll costs more
#: than the check is worth, and clock ticks are 10 ms anyway.
_CPU_READ_EVERY_S = 0.5


def group_cpu_seconds(pgid: int) -> float | None:
    """CPU seconds (user + system, own and reaped children's) used by the live members of
    process group ``pgid``; None where /proc cannot be read."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    total = 0
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_bytes()
        except OSError:
            continue
        # Field 2 (the command) may hold spaces and parentheses: split after the last ')'.
        fields = raw[raw.rfind(b")") + 2 :].split()
        if int(fields[2]) != pgid:
            continue
        # utime, stime, cutime, cstime are fields 14-17 (1-based) of the whole line.
        total += sum(int(f) for f in fields[11:15])
    return total / _TICKS


class ProgressDeadline:
    """Expires after ``stall`` seconds without CPU progress of group ``pgid``, or at ``ceiling``.

    Args:
        pgid: The process group to watch (a ``ManagedProcess``'s pid).
        stall: Seconds without any CPU use after which the start counts as hung.
        ceiling: Seconds after which the wait ends however busy the group is.
        watch: False for a plain wall-clock deadline at ``ceiling`` (``stall`` unused).
    """

    def __init__(self, pgid: int, *, stall: float, ceiling: float, watch: bool = True) -> None:
        now = time.monotonic()
        self.pgid = pgid
        self.stall = stall if watch else ceiling
        self.ceiling = ceiling
        self.watch = watch
        self._start = now
        self._last_progress = now
        self._last_read = now
        self._cpu = group_cpu_seconds(pgid) if watch else None

    def _observe(self, now: float) -> None:
        if not self.watch or now - self._last_read < _CPU_READ_EVERY_S:
            return
        self._last_read = now
        cpu = group_cpu_seconds(self.pgid)
        if cpu is not None and (self._cpu is None or cpu > self._cpu):
            self._cpu = cpu
            self._last_progress = now

    def remaining(self) -> float:
        """Seconds left (0 when expired); reads the group's CPU now and then."""
        now = time.monotonic()
        self._observe(now)
        left_stall = self._last_progress + self.stall - now
        left_ceiling = self._start + self.ceiling - now
        return max(min(left_stall, left_ceiling), 0.0)

    def expired(self) -> bool:
        """True once the group stalled for ``stall`` seconds or ``ceiling`` has passed."""
        return self.remaining() <= 0.0

    def describe(self) -> str:
        """Why it expired, for an error message."""
        now = time.monotonic()
        waited = now - self._start
        if not self.watch or now - self._start >= self.ceiling:
            return f"not ready after {waited:.1f}s"
        return (f"no CPU progress for {now - self._last_progress:.1f}s "
                f"(waited {waited:.1f}s in all)")
