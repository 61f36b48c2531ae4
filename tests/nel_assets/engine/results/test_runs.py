"""Loading runs (nel store, bundle file, NeMo Evaluator files) and comparing them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.errors import NelError
from nel_assets.engine.evaluation.evaluate import build_model_bundle
from nel_assets.engine.results.runs import (
    check_drop_units,
    compare_runs,
    load_run,
    write_regression,
)
from nel_resources.storage.schema import rows_to_table
from nel_resources.storage.store import ResultStore


def _write(root: Path, model: str, right: set[int], n: int = 50, bench: str = "gsm8k") -> None:
    rows = [{"benchmark": bench, "model": model, "model_id": f"{model}-id", "shard": 0, "problem_idx": i,
             "repeat": 0, "sample_id": f"{i}:0", "prompt": f"q{i}", "expected": "1",
             "response": "r", "extracted": "1" if i in right else "2", "reward": float(i in right),
             "model_ms": 10.0 + i, "completion_tokens": 5} for i in range(n)]
    store = ResultStore(root)
    store.write_shard(bench, model, 0, rows_to_table(rows), {"fingerprint": "x", "data_version": model})
    build_model_bundle(None, store, bench, model)


def test_store_bundle_and_nemo_sources_agree(tmp_path: Path) -> None:
    _write(tmp_path, "a", set(range(40)))
    _write(tmp_path, "b", set(range(30)))
    with pytest.raises(NelError, match=r"several models \(a, b\).*--model"):
        load_run(tmp_path)
    base = load_run(tmp_path, model="a")
    assert base.kind == "nel" and base.model_id == "a-id" and base.benchmarks["gsm8k"].n_items == 50
    cand_bundle = load_run(tmp_path / "gsm8k" / "bundle" / "model=b" / "bundle.json")
    # two models: each has a NeMo Evaluator output dir of its own, <bench>/models/<model>
    cand_nemo = load_run(tmp_path / "gsm8k" / "models" / "b")
    assert cand_bundle.kind == "bundle" and cand_nemo.kind == "nemo"
    d1 = compare_runs(base, cand_bundle)["benchmarks"]["gsm8k"]
    d2 = compare_runs(base, cand_nemo)["benchmarks"]["gsm8k"]
    for k in ("delta", "se", "p_value", "mde", "n_paired"):
        assert d1[k] == pytest.approx(d2[k])
    assert d1["delta"] == pytest.approx(-0.2) and d1["verdict"] == "regression"
    ex = d1["flip_examples"]["better_to_worse"][0]
    assert ex["baseline"]["extracted"] == "1" and ex["candidate"]["extracted"] == "2"
    assert d1["runtime"]["model_ms"]["delta_mean"] == pytest.approx(0.0)
    p = write_regression(tmp_path / "reg", compare_runs(base, cand_bundle))
    assert p.name == "regression.json" and json.loads(p.read_text())["regression"] is True


def test_foreign_nemo_results_with_other_field_names(tmp_path: Path) -> None:
    for name, right in (("base", 8), ("cand", 6)):
        d = tmp_path / name / "task"
        d.mkdir(parents=True)
        (d / "eval-123.json").write_text(json.dumps({"task": "hellaswag", "model_name": name}))
        with open(d / "results.jsonl", "w") as f:
            for i in range(10):
                f.write(json.dumps({"doc_id": f"d{i}", "correct": i < right, "latency_ms": 5}) + "\n")
    doc = compare_runs(load_run(tmp_path / "base"), load_run(tmp_path / "cand"))
    c = doc["benchmarks"]["hellaswag"]
    assert c["n_paired"] == 10 and c["delta"] == pytest.approx(-0.2) and c["test"] == "mcnemar_exact"


def test_unpaired_items_and_missing_benchmarks_are_reported(tmp_path: Path) -> None:
    _write(tmp_path / "x", "a", set(range(20)), n=50)
    _write(tmp_path / "y", "a", set(range(20)), n=40)
    _write(tmp_path / "y", "a", set(), n=5, bench="mmlu")
    doc = compare_runs(load_run(tmp_path / "x"), load_run(tmp_path / "y"))
    c = doc["benchmarks"]["gsm8k"]
    assert (c["n_paired"], c["n_unpaired_base"], c["n_unpaired_cand"]) == (40, 10, 0)
    assert doc["missing"] == {"baseline": ["mmlu"], "candidate": []}


def test_drop_units() -> None:
    check_drop_units(0.01)
    check_drop_units(None)
    with pytest.raises(NelError, match=r"score units.*did you mean 0.03"):
        check_drop_units(3)
    with pytest.raises(NelError, match="≥ 0"):
        check_drop_units(-0.1)
    with pytest.raises(NelError, match="no such file"):
        load_run("/nonexistent/dir")
