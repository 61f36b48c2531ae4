"""A shard's commit record is computed from its written file a batch of rows at a time, with
the values the whole-shard lists gave (the data version hashes the same bytes)."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import orjson
import pytest

from nel_assets.engine.evaluation.loop import needs_retry
from nel_assets.engine.evaluation.shard_file import file_batches, shard_summary
from nel_resources.storage.schema import rows_to_table
from nel_resources.storage.store import write_parquet_atomic


@pytest.mark.parametrize("n", [0, 1, 4096, 4097, 10_000])
def test_the_summary_equals_the_whole_shard_lists(n: int, tmp_path: Path) -> None:
    rnd = random.Random(n)
    rows = [{"sample_id": f"{i}:0", "problem_idx": i, "repeat": 0,
             "reward": None if i % 11 == 0 else rnd.choice([0.0, 1.0, 0.3]),
             "response": rnd.choice([None, "", "x é \u2028", "#### 4"]),
             "error": "boom" if i % 11 == 0 else None,
             "failure_category": rnd.choice(["timeout", "error", "auth"]) if i % 11 == 0
             else rnd.choice([None, "refusal"])} for i in range(n)]
    table = rows_to_table(rows)
    cols = {c: table.column(c).to_pylist() for c in ("sample_id", "reward", "response", "error",
                                                     "failure_category")}
    want = hashlib.sha256(orjson.dumps(list(zip(cols["sample_id"], cols["reward"], cols["response"],
                                                cols["error"], strict=True)))).hexdigest()[:16]
    rewards = [x for x in cols["reward"] if x is not None]
    write_parquet_atomic(tmp_path / "part-0.parquet", table)
    version, n_rows, n_err, n_failed, total, count = shard_summary(
        file_batches(tmp_path / "part-0.parquet"), needs_retry)
    assert version == want and n_rows == n
    assert n_err == sum(1 for e in cols["error"] if e is not None)
    assert n_failed == sum(1 for e, f in zip(cols["error"], cols["failure_category"], strict=True)
                           if needs_retry({"error": e, "failure_category": f}))
    assert count == len(rewards) and total == sum(rewards)
