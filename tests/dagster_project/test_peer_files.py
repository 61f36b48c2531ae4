"""NeMo Evaluator 0.3.0's own `compare`, `gate`, `eval report` and `eval merge` on nel's output.

One module run: the real peer (`tests/support/peers.py`) and nel evaluate the same BYOB
benchmark against one reference server; nel runs as two shard processes (NeMo Evaluator's
`OUTPUT/shard_<i>` layout) and merges them with its own `eval merge`. Every peer command must
succeed on nel's directories and files and report nel's numbers: scores, item counts and
per-item rewards, not just exit 0."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nel_resources.reference_server import start_reference_server
from tests.support.cli import run_nel
from tests.support.peers import run_peer_nemo

BENCH = "nemo_style_capitals"
FILES = Path(__file__).parents[1] / "benchmarks" / "nemo_files"
ANSWERS = [{"match": "France", "content": "Paris is lovely.\nAnswer: Paris"},
           {"match": "Japan", "content": "Answer: Kyoto"},
           {"match": "Peru", "content": "Lima"}]  # Kenya gets the default reply: wrong
UNSET = ["NEL_SHUFFLE_SEED", "NEL_SHARD_IDX", "NEL_TOTAL_SHARDS"]


@dataclass
class Runs:
    root: Path
    peer: Path  # NeMo Evaluator's run
    nel: Path  # nel's sharded run, merged by nel
    nel_shards: Path  # a copy of nel's shard directories before any merge


def _bundle(bench_dir: Path) -> tuple[Path, dict[str, Any]]:
    (path,) = bench_dir.glob("eval-*.json")
    return path, json.loads(path.read_text())


def _rewards(bench_dir: Path) -> dict[tuple[int, int], float]:
    rows = [json.loads(x) for x in (bench_dir / "results.jsonl").read_text().splitlines() if x.strip()]
    return {(r["problem_idx"], r["repeat"]): r["reward"] for r in rows}


def _value(bundle: dict[str, Any], metric: str = "pass@1") -> float:
    return bundle["benchmark"]["scores"][metric]["value"]


def peer_ok(*args: str, cwd: Path, code: int = 0) -> str:
    p = run_peer_nemo(*args, cwd=cwd, unset=UNSET)
    assert p.returncode == code, f"{args}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
    return p.stdout


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    root = tmp_path_factory.mktemp("peer-files")
    for name in ("capitals_bench.py", "capitals.jsonl"):
        shutil.copy(FILES / name, root / name)
    proc, url = start_reference_server(answers=ANSWERS)
    try:
        peer_ok("eval", "run", "--bench", "capitals_bench.py", "--model-url", url, "--model-id", "ref",
                "-n", "2", "-o", str(root / "peer"), cwd=root)
        for i in (0, 1):
            p = run_nel("eval", "run", "--bench", "capitals_bench.py", "--model-url", url, "--model-id", "ref",
                        "-n", "2", "-o", str(root / "nel" / f"shard_{i}"), "--no-progress", cwd=root,
                        env={"NEL_SHARD_IDX": str(i), "NEL_TOTAL_SHARDS": "2"}, unset=["NEL_SHUFFLE_SEED"])
            assert p.returncode == 0, p.stderr[-2000:]
    finally:
        proc.stop()
    shutil.copytree(root / "nel", root / "nel-shards", ignore=shutil.ignore_patterns(".dagster"))
    p = run_nel("eval", "merge", str(root / "nel"), cwd=root, unset=UNSET)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    yield Runs(root, root / "peer", root / "nel", root / "nel-shards")


def test_nel_scores_what_the_peer_scores(runs: Runs) -> None:
    """The premise of the other tests: nel's merged run and the peer's run agree item by item."""
    _, nel = _bundle(runs.nel / BENCH)
    _, peer = _bundle(runs.peer / BENCH)
    assert _rewards(runs.nel / BENCH) == _rewards(runs.peer / BENCH)
    assert len(_rewards(runs.nel / BENCH)) == nel["n_results"] == 8
    assert (_value(nel), _value(nel, "pass@2")) == (_value(peer), _value(peer, "pass@2")) == (0.5, 0.5)


def test_peer_eval_merge_merges_nel_shard_directories(runs: Runs) -> None:
    out = peer_ok("eval", "merge", str(runs.nel_shards), cwd=runs.root)
    assert f"Merging {BENCH}: 2 shards" in out
    _, merged = _bundle(runs.nel_shards / BENCH)
    _, nel = _bundle(runs.nel / BENCH)
    assert merged["benchmark"]["name"] == BENCH and merged["config"]["repeats"] == 2
    assert merged["n_results"] == nel["n_results"] == 8 and merged["benchmark"]["samples"] == 4
    assert (_value(merged), _value(merged, "pass@2")) == (_value(nel), _value(nel, "pass@2"))
    assert _rewards(runs.nel_shards / BENCH) == _rewards(runs.nel / BENCH)


def test_peer_eval_report_reads_nel_directories(runs: Runs) -> None:
    _, nel = _bundle(runs.nel / BENCH)
    table = json.loads(peer_ok("eval", "report", str(runs.nel / BENCH), "-f", "json", cwd=runs.root))
    row = table["benchmarks"][BENCH]
    assert table["model"] == "ref" and (row["samples"], row["repeats"]) == (4, 2)
    assert row["pass@1"]["value"] == _value(nel) and row["pass@2"]["value"] == _value(nel, "pass@2")
    assert row["total_tokens"] == nel["benchmark"]["scores"]["runtime"]["total_tokens"] > 0
    # the whole output directory (shard bundles and the merged one) reports too
    text = peer_ok("eval", "report", str(runs.nel), cwd=runs.root)
    assert f"| {BENCH} | pass@1 |" in text
    # and a shard process's own output directory, before any merge
    table = json.loads(peer_ok("eval", "report", str(runs.nel_shards / "shard_1"), "-f", "json", cwd=runs.root))
    assert table["benchmarks"][BENCH]["samples"] == 2


@pytest.mark.parametrize("form", ["dirs", "bundle files"])
def test_peer_compare_reads_nel_output_both_ways(runs: Runs, form: str) -> None:
    peer_file, peer = _bundle(runs.peer / BENCH)
    nel_file, nel = _bundle(runs.nel / BENCH)
    # both ways for directories; a nel bundle file as the candidate
    pairs = [(runs.peer, runs.nel, peer, nel), (runs.nel, runs.peer, nel, peer)] if form == "dirs" else [
        (peer_file, nel_file, peer, nel)]
    for b, c, b_doc, c_doc in pairs:
        doc = json.loads(peer_ok("compare", str(b), str(c), "--format", "json", "--no-report", cwd=runs.root))
        deltas = doc["score_deltas"]
        for metric in ("pass@1", "pass@2"):
            assert (deltas[metric]["baseline"], deltas[metric]["candidate"]) == (_value(b_doc, metric),
                                                                               _value(c_doc, metric))
            assert deltas[metric]["delta"] == 0.0
        # per-item pairing over nel's results.jsonl: 4 questions, the same answers on each side
        summary = doc["flip_report"]["summary"]
        assert summary["n_paired"] == 4 and (summary["n_regressions"], summary["n_improvements"]) == (0, 0)
        assert (summary["n_stable_correct"], summary["n_stable_wrong"]) == (2, 2)
        assert doc["verdict"] == "PASS"


def test_peer_gate_reads_nel_output_both_ways(runs: Runs) -> None:
    policy = runs.root / "policy.yaml"
    policy.write_text(f"version: 1\ndefaults:\n  max_drop: 0.05\n  metric: pass@1\nbenchmarks:\n  {BENCH}: {{}}\n")
    _, nel = _bundle(runs.nel / BENCH)
    for base, cand in ((runs.peer, runs.nel), (runs.nel, runs.peer)):
        # 4 paired items are too few for a decision: INCONCLUSIVE, exit 2 in strict mode
        doc = json.loads(peer_ok("gate", str(base), str(cand), "-p", str(policy), "--format", "json",
                                 "--no-report", cwd=runs.root, code=2))
        (row,) = doc["benchmarks"]
        assert row["benchmark"] == BENCH and row["status"] == "INSUFFICIENT_EVIDENCE"
        assert row["baseline_score"] == row["candidate_score"] == _value(nel) and row["n_paired"] == 4
        assert doc["missing"] == []


def test_nels_regression_json_carries_the_peers_delta_keys(runs: Runs) -> None:
    """`regression.json`: per benchmark, nel writes 0.3.0's `score_deltas` (with `ci_overlap`)
    and `runtime_deltas` next to its paired analysis; the score deltas agree with 0.3.0's own."""
    peer_ok("compare", str(runs.peer), str(runs.nel), "-o", str(runs.root / "peer-reg.json"), "--no-report",
            "--format", "json", cwd=runs.root)
    p = run_nel("compare", str(runs.peer), str(runs.nel), "-o", str(runs.root / "nel-reg"), "--no-report",
                "--format", "json", cwd=runs.root)
    assert p.returncode == 0, p.stderr
    # one benchmark: 0.3.0 writes its report at the top level; nel too, and under `benchmarks`
    theirs = json.loads((runs.root / "peer-reg.json").read_text())
    doc = json.loads((runs.root / "nel-reg" / "regression.json").read_text())
    for ours in (doc, doc["benchmarks"][BENCH]):
        assert set(theirs["score_deltas"]) >= set(ours["score_deltas"]) == {"pass@1"}
        for key in ("baseline", "candidate", "delta", "relative_pct", "ci_overlap"):
            assert ours["score_deltas"]["pass@1"][key] == theirs["score_deltas"]["pass@1"][key], key
        assert isinstance(ours["runtime_deltas"], dict) and ours["runtime_deltas"]
        assert all(set(d) == {"baseline", "candidate", "delta"} for d in ours["runtime_deltas"].values())
    assert {k for k in theirs if k not in ("flip_report", "mcnemar", "test_used", "test_reason")} <= set(doc)
    assert doc["verdict"] == theirs["verdict"] == "PASS" and doc["report_version"] == theirs["report_version"]
    assert {"run_id", "config"} <= set(doc["baseline"]) and {"run_id", "config"} <= set(doc["candidate"])
