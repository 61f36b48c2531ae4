"""A shard's rows spilled as they arrive and written sorted (nel_resources/storage/spill.py):
the file holds exactly what the in-memory builder's sorted table held, for every arrival
order (nearly sorted, resumed: two sorted runs, random, short, empty); the spill file is gone
afterwards and after a discard; and memory does not grow with the number of rows."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from nel_resources.storage.schema import TableBuilder
from nel_resources.storage.spill import SpilledRows
from tests.support.realcomponents import REPO_ROOT


def row(i: int, rep: int) -> dict[str, Any]:
    return {"sample_id": f"{i}:{rep}", "problem_idx": i, "repeat": rep, "benchmark": "b",
            "model": "m", "prompt": f"question {i} " * 20, "response": f"answer {i} {rep}",
            "reward": float((i + rep) % 2), "error": None if i % 7 else "boom"}


def arrivals(kind: str) -> list[dict[str, Any]]:
    keys = [(i, r) for i in range(700) for r in range(4)]
    rnd = random.Random(7)
    if kind == "nearly-sorted":  # completion order at some concurrency
        keys = sorted(keys, key=lambda k: k[0] * 4 + k[1] + rnd.randint(0, 64))
    elif kind == "resumed":  # the journal's rows first, then the rest
        keys = keys[1000:2000] + keys[:1000] + keys[2000:]
    elif kind == "random":
        rnd.shuffle(keys)
    elif kind == "short":
        keys = keys[:5][::-1]
    elif kind == "empty":
        keys = []
    return [row(i, r) for i, r in keys]


@pytest.mark.parametrize("kind", ["nearly-sorted", "resumed", "random", "short", "empty"])
def test_the_written_file_equals_the_sorted_table(kind: str, tmp_path: Path) -> None:
    rows = arrivals(kind)
    builder, spilled = TableBuilder(), SpilledRows(tmp_path / ".spill", batch_rows=100)
    for r in rows:
        builder.add(r)
        spilled.add(r)
    assert spilled.write_sorted(tmp_path / "out.parquet", group_rows=512) == len(rows)
    got = pq.read_table(tmp_path / "out.parquet")
    want = builder.table()
    assert got.schema == want.schema and got.equals(want), kind
    assert not (tmp_path / ".spill").exists()


def test_a_discarded_spill_leaves_no_file(tmp_path: Path) -> None:
    spilled = SpilledRows(tmp_path / ".spill", batch_rows=10)
    for r in arrivals("short") * 5:
        spilled.add(r)
    assert (tmp_path / ".spill").exists()
    spilled.discard()
    assert not (tmp_path / ".spill").exists()


_CHILD = """
import json, resource, sys
from nel_resources.storage.spill import SpilledRows
n, where = int(sys.argv[1]), sys.argv[2]
s = SpilledRows(where + "/.spill")
for k in range(n):
    i = k // 4
    s.add({"sample_id": f"{i}:{k % 4}", "problem_idx": i, "repeat": k % 4, "benchmark": "b",
           "model": "m", "prompt": ("question %d " % i) * 60, "response": "answer %d" % k,
           "messages": ("[{\\"role\\": \\"user\\"}] %d " % i) * 20, "reward": 1.0})
s.write_sorted(where + "/out.parquet")
print(json.dumps({"maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def test_memory_does_not_grow_with_the_rows(tmp_path: Path) -> None:
    # ~1.3 KB a row: 160,000 rows held in memory would be ~200 MB more than 20,000.
    peaks = {}
    for n in (20_000, 160_000):
        where = tmp_path / str(n)
        where.mkdir()
        p = subprocess.run([sys.executable, "-c", _CHILD, str(n), str(where)], capture_output=True,
                           text=True, cwd=REPO_ROOT, env={"PYTHONPATH": str(REPO_ROOT)}, timeout=600)
        assert p.returncode == 0, p.stderr
        peaks[n] = json.loads(p.stdout)["maxrss_mb"]
        assert pq.ParquetFile(where / "out.parquet").metadata.num_rows == n
    assert peaks[160_000] - peaks[20_000] < 25, peaks
