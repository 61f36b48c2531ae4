"""The flip query (DuckDB over the shard Parquet): per-item means crossing the threshold,
failed samples left out, every flip counted while only `limit` per direction are listed, and
agreement with `nel compare`'s own flip counts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.support.synthetic_runs import write_run
from nel_assets.engine.results.flips import query_flips
from nel_assets.engine.results.runs import compare_runs, run_from_store
from nel_resources.storage.store import ResultStore


def _files(root: Path, model: str, bench: str = "synth") -> list[Path]:
    return ResultStore(root).committed_shard_files(bench, model)


def test_single_sample_flips_both_ways_with_texts(tmp_path: Path) -> None:
    base = np.array([1, 1, 0, 0, 1, 0], dtype=float)
    cand = np.array([1, 0, 1, 0, 0, 0], dtype=float)
    cats = ["a", "b", "a", "b", "a", "b"]
    write_run(tmp_path, "synth", "base", base, categories=cats, shards=2,
              responses=[f"base says {i}" for i in range(6)])
    write_run(tmp_path, "synth", "cand", cand, categories=cats, shards=3,
              responses=[f"cand says {i}" for i in range(6)])
    f = query_flips("synth", _files(tmp_path, "base"), _files(tmp_path, "cand"))
    assert f.n_paired == 6 and f.counts == {"pass_to_fail": 2, "fail_to_pass": 1}
    assert f.by_category == {"a": {"pass_to_fail": 1, "fail_to_pass": 1}, "b": {"pass_to_fail": 1, "fail_to_pass": 0}}
    assert [(r.item, r.direction) for r in f.rows] == [(1, "pass_to_fail"), (4, "pass_to_fail"), (2, "fail_to_pass")]
    r = f.rows[0]
    assert r.base["response"] == "base says 1" and r.cand["response"] == "cand says 1"
    assert r.expected == "1" and r.base["extracted"] == "1" and r.cand["extracted"] == "2"
    assert r.prompt.startswith("Question 1:") and r.category == "b" and not f.truncated


def test_repeats_flip_on_the_item_mean_and_failed_samples_do_not_count(tmp_path: Path) -> None:
    # 3 repeats; threshold 0.5 = majority of the scored repeats
    base = np.array([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 0, 1]], dtype=float)
    cand = np.array([[1, 0, 0], [1, 1, 0], [0, 0, 0], [0, 0, 1]], dtype=float)
    # item 3's candidate: two failed requests and one right answer -> mean 1.0 over 1 sample
    failed = np.zeros_like(cand, dtype=bool)
    failed[3, :2] = True
    write_run(tmp_path, "synth", "base", base, shards=1)
    write_run(tmp_path, "synth", "cand", cand, shards=2, failed=failed)
    f = query_flips("synth", _files(tmp_path, "base"), _files(tmp_path, "cand"), threshold=0.5)
    got = {r.item: (r.direction, r.base_mean, r.cand_mean, r.cand_n) for r in f.rows}
    assert got == {0: ("pass_to_fail", pytest.approx(2 / 3), pytest.approx(1 / 3), 3),
                   1: ("fail_to_pass", pytest.approx(1 / 3), pytest.approx(2 / 3), 3),
                   2: ("pass_to_fail", 1.0, 0.0, 3),
                   3: ("fail_to_pass", pytest.approx(1 / 3), 1.0, 1)}
    # the candidate's shown sample of item 3 is its first *scored* repeat (repeat 2)
    assert next(r for r in f.rows if r.item == 3).cand["reward"] == 1.0
    # threshold 0 (any credit): only item 2 flips
    f0 = query_flips("synth", _files(tmp_path, "base"), _files(tmp_path, "cand"), threshold=0.0)
    assert f0.counts == {"pass_to_fail": 1, "fail_to_pass": 0}


def test_items_on_one_side_or_all_failed_are_counted_not_paired(tmp_path: Path) -> None:
    write_run(tmp_path, "synth", "base", np.array([1, 1, 1, 1], dtype=float), shards=1)
    failed = np.array([False, True, False], dtype=bool)  # item 1 failed, item 3 absent
    write_run(tmp_path, "synth", "cand", np.array([0, 0, 1], dtype=float), shards=1, failed=failed)
    f = query_flips("synth", _files(tmp_path, "base"), _files(tmp_path, "cand"))
    assert (f.n_paired, f.n_base_only, f.n_cand_only) == (2, 2, 0)
    assert f.counts == {"pass_to_fail": 1, "fail_to_pass": 0}


def test_limit_lists_the_first_flips_but_counts_all(tmp_path: Path) -> None:
    n = 500
    base = np.ones(n)
    cand = np.ones(n)
    cand[::5] = 0  # 100 pass -> fail
    base[1::10] = 0  # 50 fail -> pass
    write_run(tmp_path, "synth", "base", base)
    write_run(tmp_path, "synth", "cand", cand)
    f = query_flips("synth", _files(tmp_path, "base"), _files(tmp_path, "cand"), limit=7)
    assert f.counts == {"pass_to_fail": 100, "fail_to_pass": 50} and f.truncated
    assert [r.item for r in f.rows if r.direction == "pass_to_fail"] == list(range(0, 35, 5))
    assert [r.item for r in f.rows if r.direction == "fail_to_pass"] == list(range(1, 70, 10))


def test_counts_agree_with_nel_compare(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    base = (rng.random((300, 2)) < 0.6).astype(float)
    cand = (rng.random((300, 2)) < 0.5).astype(float)
    write_run(tmp_path, "synth", "base", base)
    write_run(tmp_path, "synth", "cand", cand)
    store = ResultStore(tmp_path)
    for t in (0.0, 0.5):
        doc = compare_runs(run_from_store(store, "base"), run_from_store(store, "cand"), correct_above=t)
        flips = doc["benchmarks"]["synth"]["flips"]
        f = query_flips("synth", _files(tmp_path, "base"), _files(tmp_path, "cand"), threshold=t)
        assert f.counts == {"pass_to_fail": flips["better_to_worse"]["count"],
                            "fail_to_pass": flips["worse_to_better"]["count"]}
        assert f.n_paired == doc["benchmarks"]["synth"]["n_paired"]
