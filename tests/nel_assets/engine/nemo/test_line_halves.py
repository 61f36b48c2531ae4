"""`line_halves`: the 0.3.0 line files written by two processes (a forked child writes the
second half of the rows) are byte for byte the files one process writes, wherever the half
falls (inside a batch, on a batch's edge), and the child's part files do not stay behind."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from nel_assets.engine.nemo.line_halves import _rows, write_lines, write_lines_in_halves

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork: Linux only")


def _batches(n: int, size: int) -> list[pa.RecordBatch]:
    table = pa.table({
        "run_id": ["r"] * n, "model_id": ["m"] * n, "shard": [0] * n,
        "problem_idx": [i // 4 for i in range(n)], "repeat": [i % 4 for i in range(n)],
        "sample_id": [f"{i // 4}:{i % 4}" for i in range(n)],
        "prompt": [f"What is {i // 4} + 1?" for i in range(n)],
        "response": [f"It is {i // 4 + 1}. #### {i // 4 + 1}" for i in range(n)],
        "expected": [str(i // 4 + 1) for i in range(n)], "reward": [float(i % 3 == 0) for i in range(n)],
        "extracted": [str(i // 4 + 1) for i in range(n)], "method": ["hash_marker"] * n,
        "details": ['{"method": "hash_marker"}'] * n, "metadata": [f'{{"idx": {i // 4}}}' for i in range(n)],
        "error": [None if i % 17 else "timeout" for i in range(n)],
        "failure_category": [None if i % 17 else "timeout" for i in range(n)],
        "model_ms": [1.0 + i / 7 for i in range(n)], "total_ms": [2.0 + i / 7 for i in range(n)],
        "prompt_tokens": [10] * n, "completion_tokens": [5] * n, "attempts": [1] * n,
        "timestamp": [1.7e9 + i for i in range(n)]})
    return table.to_batches(max_chunksize=size)


@pytest.mark.parametrize(("n", "size"), [(1001, 100), (1000, 250), (7, 256)])
def test_two_processes_write_the_bytes_one_process_writes(tmp_path: Path, n: int, size: int) -> None:
    batches = _batches(n, size)
    write_lines(tmp_path / "one.r", tmp_path / "one.t", batches, messages=False)
    write_lines_in_halves(tmp_path / "two.r", tmp_path / "two.t", lambda start: _rows(batches, start, None), n,
                          messages=False)
    for kind in ("r", "t"):
        one, two = (tmp_path / f"one.{kind}").read_bytes(), (tmp_path / f"two.{kind}").read_bytes()
        assert one.count(b"\n") == n and one == two
    assert sorted(os.listdir(tmp_path)) == ["one.r", "one.t", "two.r", "two.t"]  # no part left


def test_the_halves_cover_every_row_once() -> None:
    batches = _batches(1001, 100)
    first = list(_rows(batches, 0, 500))
    second = list(_rows(batches, 500, None))
    ids = [s for b in first + second for s in b.column("sample_id").to_pylist()]
    assert ids == [s for b in batches for s in b.column("sample_id").to_pylist()]
    assert sum(b.num_rows for b in first) == 500

