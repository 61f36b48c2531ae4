"""A shard's result rows spilled to disk as they arrive, then written sorted, in bounded memory.

Rows come in completion order; the shard file holds them sorted by (problem_idx, repeat).
Holding every row until the end (even as Arrow batches) made a run's memory grow with its
samples: ~1.1 KB a row, 47 MB at 42,208 samples, and a sort at the end that needed the table
and its sorted copy at once. Here each batch of rows goes to a spill file (Arrow IPC, LZ4) and
only the two sort keys stay in memory (16 bytes a row).
`write_sorted` then writes the shard file a row group at a time: for each run of the sorted
order it reads just the spilled batches that hold those rows (rows arrive nearly in order:
a shard's work is issued in key order, so one output group needs a few batches, and a batch
read for one group is kept for the next). Memory is a few batches, whatever the shard's size.

The rows written, and their order (a stable sort by the keys, as before), are the same as
`TableBuilder.table()`'s.
"""

from __future__ import annotations

import os
from array import array
from pathlib import Path
from typing import Any

from nel_resources.storage.arrow import pa
from nel_resources.storage.schema import COLUMNS, RESULT_SCHEMA

#: Rows per spilled batch (one Parquet row group of the spill file).
SPILL_ROWS = 1024
#: Rows per row group of the shard file.
OUTPUT_ROWS = 8192


class SpilledRows:
    """Result rows spilled to `spill_path` as they come; `write_sorted` writes the shard file.

    Args:
        spill_path: where the spill file goes (created at the first full batch, removed by
            `write_sorted` and `discard`).
        batch_rows: rows per spilled batch.
    """

    def __init__(self, spill_path: Path, batch_rows: int = SPILL_ROWS) -> None:
        self.spill_path = Path(spill_path)
        self._batch_rows = batch_rows
        self._pending: list[dict[str, Any]] = []
        self._writer: Any = None
        self._spilled = 0
        # The sort keys of every row, in arrival order.
        self._problem = array("q")
        self._repeat = array("q")

    def __len__(self) -> int:
        return len(self._problem)

    def add(self, row: dict[str, Any]) -> None:
        """Take one row (a full batch goes to the spill file)."""
        self._problem.append(int(row["problem_idx"]))
        self._repeat.append(int(row.get("repeat") or 0))
        self._pending.append(row)
        if len(self._pending) >= self._batch_rows:
            self._spill()

    def _spill(self) -> None:
        cols = {name: [r.get(name) for r in self._pending] for name in COLUMNS}
        batch = pa.RecordBatch.from_pydict(cols, schema=RESULT_SCHEMA)
        self._pending = []
        if self._writer is None:
            self.spill_path.parent.mkdir(parents=True, exist_ok=True)
            # Arrow's IPC file (batches as they are in memory, LZ4-compressed): read back
            # once, soon, a batch at a time; its job is to be cheap to write.
            self._writer = pa.ipc.new_file(self.spill_path, RESULT_SCHEMA,
                                           options=pa.ipc.IpcWriteOptions(compression="lz4"))
        self._writer.write_batch(batch)
        self._spilled += batch.num_rows

    def _order(self) -> Any:
        """Row numbers (arrival order) in sorted order: stable by (problem_idx, repeat)."""
        import pyarrow.compute as pc

        keys = pa.table({"p": pa.array(self._problem, type=pa.int64()),
                         "r": pa.array(self._repeat, type=pa.int64())})
        return pc.sort_indices(keys, sort_keys=[("p", "ascending"), ("r", "ascending")])

    def write_sorted(self, dest: Path, *, compression: str = "zstd", group_rows: int = OUTPUT_ROWS) -> int:
        """Write every row, sorted, to the Parquet file `dest` (a temp name the caller
        renames into place); the spill file is removed. Returns the number of rows."""
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        tail = (pa.RecordBatch.from_pydict({n: [r.get(n) for r in self._pending] for n in COLUMNS},
                                           schema=RESULT_SCHEMA) if self._pending else None)
        self._pending = []
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        n = len(self._problem)
        order = self._order()
        del self._problem, self._repeat  # 16 bytes a row, no longer needed
        self._problem, self._repeat = array("q"), array("q")
        spilled = pa.ipc.open_file(pa.OSFile(str(self.spill_path))) if self._spilled else None
        cache: dict[int, Any] = {}  # spilled batch -> its rows, while the next group needs it
        size = self._batch_rows
        try:
            with pq.ParquetWriter(dest, RESULT_SCHEMA, compression=compression) as out:
                if n == 0:
                    out.write_table(RESULT_SCHEMA.empty_table())
                for start in range(0, n, group_rows):
                    rows = pc.cast(order.slice(start, group_rows), pa.int64())
                    which = pc.divide(rows, size)  # integer division: the spilled batch
                    needed = sorted(pc.unique(which).to_pylist())
                    cache = {b: cache[b] if b in cache else _batch(spilled, tail, b, self._spilled, size)
                             for b in needed}
                    # Offsets into the needed batches concatenated in order (every spilled
                    # batch is full; the in-memory tail, if needed, is last).
                    slot = pc.index_in(which, value_set=pa.array(needed, type=pa.int64()))
                    take = pc.add(pc.multiply(pc.cast(slot, pa.int64()), size),
                                  pc.subtract(rows, pc.multiply(which, size)))
                    joined = pa.Table.from_batches([cache[b] for b in needed], schema=RESULT_SCHEMA)
                    out.write_table(joined.take(take), row_group_size=group_rows)
                    del joined, take, rows, which, slot
        finally:
            del spilled, cache
            self.spill_path.unlink(missing_ok=True)
        return n

    def discard(self) -> None:
        """Drop the rows and the spill file (a shard that failed)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._pending = []
        self.spill_path.unlink(missing_ok=True)


def _batch(spilled: Any, tail: Any, index: int, n_spilled: int, size: int) -> Any:
    """Spilled batch `index` of the spill file, or the in-memory tail."""
    if index * size >= n_spilled:
        return tail
    return spilled.get_batch(index)


def spill_path_for(shard_file: Path) -> Path:
    """The spill file of a shard being written: a dot-file beside it (readers never see it)."""
    return shard_file.with_name(f".{shard_file.stem}.spill{os.getpid()}.parquet")
