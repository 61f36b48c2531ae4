"""Peak memory of a process tree, measured from the host's /proc while it runs.

A measurement independent of the sandbox under test (which may have no cgroup to ask):
a thread sums the resident memory (RSS) of the descendants of a pid every few
milliseconds and keeps the largest sum seen. Only processes started while the block runs
count: under pytest-xdist the worker's tree also holds what earlier tests left running
(session fixtures: model servers, Ray, a Dagster webserver), whose memory is not the
block's (a CI run summed 3.6 GB of it into a sandbox's 2 GiB).
"""

from __future__ import annotations

import os
import threading
from types import TracebackType

_PAGE = os.sysconf("SC_PAGE_SIZE")


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # exited while we looked
        kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def _start_ticks(pid: int) -> int | None:
    """When `pid` started (clock ticks since boot), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def tree_pids(root: int) -> set[tuple[int, int | None]]:
    """(pid, start time) of every descendant of `root` now: a pid alone may be reused."""
    kids, out, todo = _children_map(), set(), [root]
    while todo:
        for pid in kids.get(todo.pop(), []):
            todo.append(pid)
            out.add((pid, _start_ticks(pid)))
    return out


def tree_rss(root: int, skip: frozenset[tuple[int, int | None]] = frozenset()) -> int:
    """Bytes resident in the descendants of `root` right now (not `root` itself), leaving
    out the processes in `skip` but not their children started since."""
    kids, total, todo = _children_map(), 0, [root]
    while todo:
        for pid in kids.get(todo.pop(), []):
            todo.append(pid)
            if skip and (pid, _start_ticks(pid)) in skip:
                continue
            try:
                with open(f"/proc/{pid}/statm", "rb") as f:
                    total += int(f.read().split()[1]) * _PAGE
            except (OSError, IndexError, ValueError):
                continue
    return total


class PeakTreeRss:
    """`with PeakTreeRss() as m: ...` then `m.peak`: the most the calling process's
    descendants started in the block held at once while it ran."""

    def __init__(self, root: int | None = None, interval_s: float = 0.005) -> None:
        self.root = os.getpid() if root is None else root
        self.peak = 0
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._before: frozenset[tuple[int, int | None]] = frozenset()

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_rss(self.root, self._before))
            self._stop.wait(self._interval)

    def __enter__(self) -> PeakTreeRss:
        self._before = frozenset(tree_pids(self.root))
        self._thread.start()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
