"""Peak memory of a process tree, measured from the host's /proc while it runs.

A measurement independent of the sandbox under test (which may have no cgroup to ask):
a thread sums the resident memory (RSS) of every descendant of a pid every few
milliseconds and keeps the largest sum seen.
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


def tree_rss(root: int) -> int:
    """Bytes resident in every descendant of `root` right now (not `root` itself)."""
    kids, total, todo = _children_map(), 0, [root]
    while todo:
        for pid in kids.get(todo.pop(), []):
            todo.append(pid)
            try:
                with open(f"/proc/{pid}/statm", "rb") as f:
                    total += int(f.read().split()[1]) * _PAGE
            except (OSError, IndexError, ValueError):
                continue
    return total


class PeakTreeRss:
    """`with PeakTreeRss() as m: ...` then `m.peak`: the most the calling process's
    descendants held at once while the block ran."""

    def __init__(self, root: int | None = None, interval_s: float = 0.005) -> None:
        self.root = os.getpid() if root is None else root
        self.peak = 0
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_rss(self.root))
            self._stop.wait(self._interval)

    def __enter__(self) -> PeakTreeRss:
        self._thread.start()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
