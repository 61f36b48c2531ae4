"""`ResultStore.iter_shard_batches(start_row=...)`: the rows from any row on, the same rows in
the same order, with the shard files and row groups before the start never decoded (the
second half of the 0.3.0 line files starts mid-store: `line_halves`)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa


def test_the_store_starts_its_batches_at_any_row(tmp_path: Path) -> None:
    # The child's half begins mid-store: whole shard files and row groups before the start
    # are skipped, and the rows from the start on are the same rows in the same order.
    from nel_resources.storage.schema import RESULT_SCHEMA
    from nel_resources.storage.store import ResultStore

    store = ResultStore(tmp_path)
    for shard in range(3):
        n = 10
        cols = {f.name: pa.nulls(n, f.type) for f in RESULT_SCHEMA}
        cols.update(shard=pa.array([shard] * n, pa.int32()), problem_idx=pa.array(range(n), pa.int64()),
                    repeat=pa.array([0] * n, pa.int32()), sample_id=pa.array([f"{shard}-{i}" for i in range(n)]))
        store.write_shard("b", "m", shard, pa.table([cols[f.name] for f in RESULT_SCHEMA], schema=RESULT_SCHEMA),
                          {"fingerprint": "f", "n_failed": 0, "data_version": "d", "n_rows": n})
    every = [s for b in store.iter_shard_batches("b", "m", batch_size=4) for s in b.column("sample_id").to_pylist()]
    assert len(every) == 30
    for start in (0, 3, 10, 17, 29, 30):
        got = [s for b in store.iter_shard_batches("b", "m", batch_size=4, start_row=start)
               for s in b.column("sample_id").to_pylist()]
        assert got == every[start:], start
