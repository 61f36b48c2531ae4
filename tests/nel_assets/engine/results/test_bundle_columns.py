"""The bundle's column readers take Arrow's vectorised paths (numeric columns, null counts,
value counts, dictionary codes) and must give exactly what the per-value Python paths give:
the statistics of a bundle do not change, bit for bit."""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa

from nel_assets.engine import stats
from nel_assets.engine.results.bundle import _col, _counts, _floats, _ints, build_bundle
from nel_resources.storage.schema import rows_to_table


def _rows(n: int, seed: int) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    rows = []
    for i in range(n):
        fail = rnd.random() < 0.05
        rows.append({"run_id": rnd.choice(["r1", "r2", None]), "benchmark": "b", "model": "m",
                     "shard": rnd.choice([0, 3, None]), "problem_idx": i // 4, "repeat": rnd.randrange(4),
                     "sample_id": f"{i // 4}:{i % 4}", "category": rnd.choice([None, "a", "b"]),
                     "cluster": rnd.choice([None, "k1", "k2"]), "reward": None if fail else rnd.choice([0.0, 1.0]),
                     "extracted": rnd.choice([None, "", "4", "5", "C"]), "response": "x" * rnd.randrange(400),
                     "finish_reason": rnd.choice(["stop", "length", None]), "error": "boom" if fail else None,
                     "failure_category": "timeout" if fail else None,
                     "completion_tokens": rnd.choice([None, 5, 9]), "model_ms": None if fail else rnd.random(),
                     "attempts": rnd.choice([None, 0, 1, 3]), "timestamp": 1.7e9 + i + rnd.random()})
    return rows


def test_column_readers_match_the_python_paths() -> None:
    table = rows_to_table(_rows(3000, 1))
    table = pa.concat_tables([table.slice(11), table.slice(0, 11)])  # several chunks
    for name in ("reward", "model_ms", "completion_tokens", "timestamp", "attempts", "absent"):
        fast = _floats(table, name)
        slow = np.asarray([np.nan if v is None else v for v in _col(table, name)], dtype=float)
        assert fast.tobytes() == slow.tobytes(), name
    assert _ints(table, "problem_idx").tolist() == _col(table, "problem_idx")
    counts = _counts(table, "finish_reason")
    assert list(counts.items()) == list(Counter(f for f in _col(table, "finish_reason") if f is not None).items())


def test_label_codes_fast_path_matches_the_loop() -> None:
    rnd = random.Random(2)
    labels = np.array([rnd.choice(["b", "a", "c", "a\x00", "é"]) for _ in range(500)], dtype=object)
    codes = stats.units._codes(labels)
    first: dict[str, int] = {}
    assert codes.tolist() == [first.setdefault(v, len(first)) for v in labels.tolist()]
    # with a missing label the loop runs; each missing label is its own group
    with_none = np.array([*labels.tolist(), None, None], dtype=object)
    assert stats.units._codes(with_none).tolist() == [*codes.tolist(), codes.max() + 1, codes.max() + 2]


def test_bundle_is_the_same_from_any_chunking() -> None:
    rows = _rows(4000, 3)
    one = build_bundle(rows_to_table(rows), benchmark="b", model="m")
    t = rows_to_table(rows)
    many = build_bundle(pa.concat_tables([t.slice(0, 999), t.slice(999, 2), t.slice(1001)]), benchmark="b", model="m")
    for b in (one, many):
        b.pop("created_at")
    assert json.dumps(one) == json.dumps(many)
    assert one["failures"]["n_failed_requests"] == sum(r["error"] is not None for r in rows)
    assert one["run_ids"] == ["r1", "r2"] and one["shards"] == [0, 3]
