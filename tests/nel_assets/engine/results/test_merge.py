"""`merge_outputs` on synthetic shard stores: global metrics, duplicates, gaps, journals."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from benchmarks.errors import NelError
from nel_assets.engine.evaluation.sharding import shard_bounds
from nel_assets.engine.results.merge import merge_outputs, ranges
from nel_resources.storage.schema import rows_to_table
from nel_resources.storage.store import ResultStore, write_parquet_atomic

N, TOTAL = 30, 3


def _shard(root: Path, s: int, *, rows_for: range | None = None, version: str | None = None) -> None:
    lo, hi = shard_bounds(N, s, TOTAL)
    idx = rows_for if rows_for is not None else range(lo, hi)
    rows = [{"benchmark": "gsm8k", "model": "m", "shard": s, "problem_idx": i, "repeat": 0,
             "sample_id": f"{i}:0", "reward": float(i % 2)} for i in idx]
    store = ResultStore(root)
    store.write_shard("gsm8k", "m", s, rows_to_table(rows), {"fingerprint": "f", "data_version": version or f"v{s}"})
    write_parquet_atomic(store.dataset_path("gsm8k"), pa.table({"problem_idx": list(range(N))}))


def test_ranges() -> None:
    assert ranges([5, 1, 2, 3, 9, 10]) == "1-3, 5, 9-10"


def test_merge_complete_rebuilds_global_bundle(tmp_path: Path) -> None:
    for s in range(TOTAL):
        _shard(tmp_path / f"s{s}", s)
    rep = merge_outputs([tmp_path / f"s{s}" for s in range(TOTAL)], tmp_path / "out")
    assert rep.merged and rep.complete and rep.copied == TOTAL and rep.expected == {"gsm8k/m": 3}
    (b,) = rep.bundles
    assert b["score"]["n_items"] == N and b["score"]["mean"] == pytest.approx(0.5) and b["complete"]


def test_missing_shard_is_inferred_and_reported(tmp_path: Path) -> None:
    _shard(tmp_path / "a", 0)
    _shard(tmp_path / "a", 1)  # shard 2 (problems 20-29) never ran: trailing gap
    rep = merge_outputs([tmp_path / "a"], tmp_path / "out")
    assert not rep.merged and not (tmp_path / "out").exists()
    assert rep.problems == ["gsm8k/m: missing shard(s) 2 of 3",
                            "gsm8k/m: problems 20-29 have no results (10 of 30)"]
    rep = merge_outputs([tmp_path / "a"], tmp_path / "out", allow_partial=True)
    assert rep.merged and rep.bundles[0]["complete"] is False and rep.bundles[0]["score"]["n_items"] == 20


def test_duplicates_and_conflicting_copies_are_refused(tmp_path: Path) -> None:
    _shard(tmp_path / "a", 0)
    _shard(tmp_path / "a", 1, rows_for=range(5, 20))  # overlaps shard 0 on problems 5-9
    with pytest.raises(NelError, match=r"5 sample_id\(s\) appear more than once: 5:0 \(shards 0, 1\)"):
        merge_outputs([tmp_path / "a"])
    _shard(tmp_path / "b", 0, version="other")
    with pytest.raises(NelError, match="shard 0 differs between"):
        merge_outputs([tmp_path / "a", tmp_path / "b"], tmp_path / "out")


def test_unfinished_journal_is_a_problem(tmp_path: Path) -> None:
    for s in range(TOTAL):
        _shard(tmp_path, s)
    j = ResultStore(tmp_path).journal_path("gsm8k", "m", 1, "abc")
    j.parent.mkdir(parents=True)
    j.write_text("{}\n")
    rep = merge_outputs([tmp_path], expected_shards=3)
    assert not rep.merged and "unfinished shard journal" in rep.problems[0]
