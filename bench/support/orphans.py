"""What a measured command leaves running after it returns (nel's background Dagster
recording), adopted by the bench so that it can be waited for and counted.

A bench process that `become_subreaper()`s becomes the parent of its descendants' orphans;
`reap_new(before)` then waits for every child that was not there `before` and returns their
CPU seconds and largest peak RSS, so no work escapes the figures and nothing a command left
behind runs into the next measurement.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from pathlib import Path

_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Adopt the orphans of this process's descendants (Linux prctl)."""
    if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1) != 0:
        raise SystemExit("cannot become a child subreaper (prctl failed)")


def own_children() -> set[int]:
    """This process's children now."""
    pids: set[int] = set()
    for task in Path("/proc/self/task").glob("*/children"):
        with contextlib.suppress(OSError):
            pids |= {int(c) for c in task.read_text().split()}
    return pids


def reap_new(before: set[int]) -> tuple[float, float]:
    """Wait for each child not in `before`; returns (their CPU seconds, their largest peak
    RSS in MB)."""
    cpu, rss = 0.0, 0.0
    for pid in own_children() - before:
        with contextlib.suppress(ChildProcessError):
            _, _, ru = os.wait4(pid, 0)
            cpu += ru.ru_utime + ru.ru_stime
            rss = max(rss, ru.ru_maxrss / 1024)
    return cpu, rss
