"""nel's pyarrow (`nel_resources.storage.arrow`): no pandas import, malloc as the allocator, and the
row/column paths that keep a shard's memory small (`TableBuilder`, `read_shards(columns=)`,
`iter_shard_batches`) giving exactly the tables and rows of the whole-table paths."""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from nel_resources.storage.schema import TableBuilder, rows_to_table
from nel_resources.storage.store import ResultStore

REPO = Path(__file__).resolve().parents[3]

_PROBE = r"""
import json, sys
from nel_resources.storage.arrow import memory_pool_backend, pa, pandas_probed_out
import pyarrow.parquet as pq
t = pa.Table.from_pylist([{"s": "a", "x": 1.5}, {"s": None, "x": None}])
pq.write_table(t, sys.argv[1]); back = pq.read_table(sys.argv[1]); back.to_pylist(); pa.array([1, None])
out = {"probed": pandas_probed_out, "pandas_after_use": "pandas" in sys.modules,
       "pool": memory_pool_backend, "cpp_pool": pa.default_memory_pool().backend_name,
       "env_left": __import__("os").environ.get("ARROW_DEFAULT_MEMORY_POOL")}
try:
    df = back.to_pandas()  # what needs pandas still gets it
    out["to_pandas"] = df.shape[0]
except ImportError:
    out["to_pandas"] = "no pandas installed"
print(json.dumps(out))
"""


def _probe(tmp_path: Path, **env: str) -> dict[str, Any]:
    base = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    p = subprocess.run([sys.executable, "-c", _PROBE, str(tmp_path / "t.parquet")], capture_output=True,
                       text=True, cwd=REPO, env={**base, "PYTHONPATH": str(REPO), **env}, check=True)
    return json.loads(p.stdout)


def test_pyarrow_is_used_without_importing_pandas_and_on_malloc(tmp_path: Path) -> None:
    got = _probe(tmp_path)
    assert got["probed"] is True and got["pandas_after_use"] is False
    assert got["pool"] == "system" and got["cpp_pool"] == "system"
    assert got["env_left"] is None  # not passed on to child processes
    assert got["to_pandas"] in (2, "no pandas installed")


def test_a_pool_the_user_chose_wins(tmp_path: Path) -> None:
    got = _probe(tmp_path, ARROW_DEFAULT_MEMORY_POOL="jemalloc")
    assert got["pool"] == "jemalloc" and got["env_left"] == "jemalloc"


def _rows(n: int, seed: int) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        fail = rnd.random() < 0.1
        out.append({"run_id": "r", "benchmark": "b", "model": "m", "shard": 0, "problem_idx": i // 3,
                    "repeat": i % 3, "sample_id": f"{i // 3}:{i % 3}", "prompt": "p" * rnd.randrange(50),
                    "messages": '[{"role":"user","content":"q"}]', "response": None if fail else "x",
                    "reward": None if fail else rnd.choice([0.0, 1.0]), "error": "boom" if fail else None,
                    "failure_category": "timeout" if fail else None, "details": '{"method":"m"}',
                    "model_ms": rnd.random(), "completion_tokens": rnd.choice([None, 7])})
    return out


def _parquet_bytes(t: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(t, buf, compression="zstd")
    return buf.getvalue()


def test_table_builder_gives_rows_to_table_of_the_sorted_rows() -> None:
    rows = _rows(3000, 1)
    ref = rows_to_table(rows)  # already in (problem_idx, repeat) order
    for order in (list(rows), random.Random(2).sample(rows, len(rows))):
        b = TableBuilder(batch_rows=500)
        for r in order:
            b.add(r)
        t = b.table()
        assert t.equals(ref, check_metadata=True)
        assert _parquet_bytes(t) == _parquet_bytes(ref)
    empty = TableBuilder().table()
    assert empty.num_rows == 0 and empty.schema.equals(ref.schema)


def test_column_reads_and_batches_match_the_whole_table(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    rows = _rows(1200, 3)
    # an older shard file without the agentic columns, then a current one
    store.write_shard("b", "m", 1, rows_to_table(rows[600:]), {"fingerprint": "y"})
    store.write_shard("b", "m", 0, rows_to_table(rows[:600]).drop_columns(["turns", "tool_calls", "steps"]),
                      {"fingerprint": "x"})
    full = store.read_shards("b", "m")
    cols = ["problem_idx", "reward", "steps", "no_such_column"]
    part = store.read_shards("b", "m", columns=cols)
    assert part.column_names == ["problem_idx", "reward", "steps"]
    assert part.equals(full.select(["problem_idx", "reward", "steps"]))
    streamed = [r for b in store.iter_shard_batches("b", "m", batch_size=128) for r in b.to_pylist()]
    assert len(streamed) == full.num_rows
    assert [{k: r.get(k) for k in full.column_names} for r in streamed] == full.to_pylist()
    assert store.read_shards("b", "nobody", columns=cols).column_names == ["problem_idx", "reward", "steps"]


_PEAK_PROBE = r"""
import json, random
import pyarrow as pa
from nel_resources.storage.schema import TableBuilder
rnd = random.Random(7)
b = TableBuilder()
order = list(range(30_000))
rnd.shuffle(order)  # rows finish out of order, as under concurrency
for i in order:
    b.add({"problem_idx": i // 4, "repeat": i % 4, "sample_id": f"{i // 4}:{i % 4}",
           "prompt": "p" * 400, "response": "r" * 200, "messages": "m" * 500, "reward": 1.0})
b._flush()
pool = pa.default_memory_pool()
held, before = pool.bytes_allocated(), pool.max_memory()
t = b.table()
print(json.dumps({"held": held, "before": before, "peak": pool.max_memory(),
                  "sorted": t.column("problem_idx").to_pylist() == sorted(t.column("problem_idx").to_pylist()),
                  "rows": t.num_rows}))
"""


def test_sorting_a_shards_rows_holds_one_table_and_one_column_at_most() -> None:
    # Arrow's own accounting of its allocations (the pool's high-water mark), in a fresh
    # process: sorting 30,000 rows that arrived out of order must not hold two whole tables.
    p = subprocess.run([sys.executable, "-c", _PEAK_PROBE], capture_output=True, text=True, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, check=True)
    got = json.loads(p.stdout)
    assert got["sorted"] and got["rows"] == 30_000
    assert got["before"] <= got["held"] * 1.05  # the batches were the high-water mark so far
    # the largest column (messages) is ~1/3 of the table: well under 1.5x; two tables are 2x
    assert got["peak"] < 1.5 * got["held"], got
