"""The progress bar of `nel eval run` (rich, imported only when shown)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class Progress:
    """A rich progress bar fed by the engine's per-sample callback."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._bar: Any = None

    @contextmanager
    def task(self, label: str, total: int) -> Iterator[Callable[[int], None] | None]:
        if not self.enabled or total <= 0:
            yield None
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                      transient=False, refresh_per_second=4) as bar:
            tid = bar.add_task(label, total=total, rate="")
            t0 = time.perf_counter()
            done = 0
            last = 0.0

            def advance(k: int) -> None:
                nonlocal done, last
                done += k
                now = time.perf_counter()
                if now - last > 0.25 or done >= total:  # throttle: rich updates cost ~50µs
                    last = now
                    bar.update(tid, completed=done, rate=f"{done / max(now - t0, 1e-9):.0f}/s")

            yield advance
