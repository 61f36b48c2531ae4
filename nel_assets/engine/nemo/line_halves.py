"""`results.jsonl` and `trajectories.jsonl` written by two processes, a half of the rows each.

Building the lines is Python holding the GIL: ~1 s of CPU at 42,208 rows, after the last
request of a run and before its command can return. A forked child builds the lines of the
second half of the rows while this process builds the first half's, on the other core; the
child's part is then appended to this process's files by the kernel (`os.copy_file_range`,
no copy through Python). Both halves come from the same `LineBuilder` code over the same
rows in the same order, so the files are byte for byte those one process writes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nel_assets.engine.nemo.nemo_lines import LineBuilder

if TYPE_CHECKING:
    import pyarrow as pa

#: Fewer rows than this are written by one process (a fork is not worth it).
SPLIT_MIN_ROWS = 20_000


def _rows(batches: Iterable[pa.RecordBatch], lo: int, hi: int | None) -> Iterator[pa.RecordBatch]:
    """The rows `lo` to `hi` (None: the end) of `batches`, as (sliced) batches."""
    start = 0
    for batch in batches:
        end = start + batch.num_rows
        if hi is not None and start >= hi:
            return
        if end > lo:
            a, b = max(lo - start, 0), (batch.num_rows if hi is None else min(hi, end) - start)
            yield batch if (a, b) == (0, batch.num_rows) else batch.slice(a, b - a)
        start = end


def write_lines(results: Path, trajectories: Path, batches: Iterable[pa.RecordBatch], *,
                messages: bool) -> None:
    """Both files' lines of `batches`, written to `results` and `trajectories` (created)."""
    builder = LineBuilder(messages=messages)
    with open(results, "wb") as fr, open(trajectories, "wb") as ft:
        for batch in batches:
            res, trj = builder.lines(batch)
            fr.write(b"".join(res))
            ft.write(b"".join(trj))


def write_lines_in_halves(results: Path, trajectories: Path,
                          batches: Callable[[int], Iterable[pa.RecordBatch]], n_rows: int, *,
                          messages: bool) -> None:
    """`write_lines` of every row of `batches(0)`, the second half written by a forked child.

    `batches(start)` gives the rows from row `start` on (called once per process, so each
    reads the rows itself; the child's skips the first half without decoding it)."""
    from nel_assets.engine.evaluation.forked import ForkedCall

    half = n_rows // 2
    part_r = results.with_name(f"{results.name}.part2")
    part_t = trajectories.with_name(f"{trajectories.name}.part2")
    later = ForkedCall("writing the second half of the 0.3.0 line files", write_lines, part_r, part_t,
                       _rows(batches(half), 0, None), messages=messages)
    try:
        write_lines(results, trajectories, _rows(batches(0), 0, half), messages=messages)
        later.result()
        for part, whole in ((part_r, results), (part_t, trajectories)):
            _append(part, whole)
    finally:
        later.wait()
        part_r.unlink(missing_ok=True)
        part_t.unlink(missing_ok=True)


def _append(part: Path, whole: Path) -> None:
    """Append the file `part` to the file `whole`, in the kernel where it can."""
    import shutil

    with open(part, "rb") as src, open(whole, "r+b") as dst:  # (copy_file_range refuses O_APPEND)
        dst.seek(0, os.SEEK_END)
        left = os.fstat(src.fileno()).st_size
        copy: Any = getattr(os, "copy_file_range", None)
        try:
            while left > 0 and copy is not None:
                n = copy(src.fileno(), dst.fileno(), left)
                if n <= 0:
                    break
                left -= n
        except OSError:  # not supported here (an old kernel, across file systems)
            pass
        if left > 0:  # what is left, through a buffer (the file positions moved with the copy)
            dst.seek(0, os.SEEK_END)
            shutil.copyfileobj(src, dst, 1 << 20)
