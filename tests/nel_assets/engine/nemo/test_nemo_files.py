"""nel writes NeMo Evaluator 0.3.0's result files (names, layout, keys and their shapes).

The reference is not a hand copy: the real NeMo Evaluator (`tests/support/peers.py`) runs the
same BYOB benchmark against the same reference server in this module, and every key path of
every file it writes must be in nel's file with the same JSON kind. Both runs share the
module; one more nel run has a failed request (its marking is checked against 0.3.0's own
marking of infrastructure failures)."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nel_assets.engine.nemo import nemo_format as nf
from nel_resources.reference_server import start_reference_server
from tests.support.cli import run_nel
from tests.support.peers import run_peer_nemo

BENCH = "nemo_style_capitals"
FILES = Path(__file__).parents[3] / "benchmarks" / "nemo_files"
# France right (an Answer: line), Japan wrong, Kenya an empty reply (a failure in both tools'
# analysis), Peru right (a bare city name).
ANSWERS = [{"match": "France", "content": "Paris is lovely.\nAnswer: Paris"},
           {"match": "Japan", "content": "Answer: Kyoto"},
           {"match": "Kenya", "content": ""},
           {"match": "Peru", "content": "Lima"}]
UNSET = ["NEL_SHUFFLE_SEED", "NEL_SHARD_IDX", "NEL_TOTAL_SHARDS"]
# Maps whose keys are data (category names, scorer fields, dataset columns), not format:
# only the keys both hold are compared.
DATA_KEYED = {"finish_reason_counts", "categories", "breakdowns", "scoring_details", "metadata",
              "seed_metadata", "scorer_rewards", "completed_benchmarks", "failed_benchmarks", "details"}


@dataclass
class Runs:
    peer: Path
    nel: Path
    nel_failed: Path


def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int | float):
        return "number"
    return type(v).__name__


def shape_gaps(theirs: Any, ours: Any, path: str = "") -> list[str]:
    """Key paths of `theirs` missing in `ours` or holding another JSON kind there (a null on
    either side matches anything: both tools write null for an absent value)."""
    if theirs is None or ours is None:
        return []
    if _kind(theirs) != _kind(ours):
        return [f"{path or '.'}: {_kind(theirs)} there, {_kind(ours)} here"]
    gaps: list[str] = []
    if isinstance(theirs, dict):
        data_keyed = path.rsplit(".", 1)[-1] in DATA_KEYED
        for k, v in theirs.items():
            if k.startswith("_"):
                continue  # 0.3.0's private keys (e.g. config._sandbox_config)
            if k not in ours and data_keyed:
                continue  # another category, column or scorer field: data, not format
            if k not in ours:
                gaps.append(f"{path}.{k}: missing")
            else:
                gaps += shape_gaps(v, ours[k], f"{path}.{k}")
    elif isinstance(theirs, list) and theirs and ours:
        gaps += shape_gaps(theirs[0], ours[0], f"{path}[]")
    return gaps


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _bundle(out: Path) -> dict[str, Any]:
    (ev,) = (out / BENCH).glob("eval-*.json")
    return json.loads(ev.read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    root = tmp_path_factory.mktemp("nemo-files")
    for name in ("capitals_bench.py", "capitals.jsonl"):
        shutil.copy(FILES / name, root / name)
    proc, url = start_reference_server(answers=ANSWERS)
    # every attempt at Kenya's prompt fails with a 500: one failed request in nel's run
    fproc, furl = start_reference_server(answers=ANSWERS, fault_match="Kenya", fail_rate=1.0,
                                         fail_attempts=1000, fail_status=500)
    try:
        p = run_peer_nemo("eval", "run", "--bench", "capitals_bench.py", "--model-url", url, "--model-id", "ref",
                          "-n", "2", "-o", str(root / "peer"), cwd=root, unset=UNSET)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
        p = run_nel("eval", "run", "--bench", "capitals_bench.py", "--model-url", url, "--model-id", "ref",
                    "-n", "2", "-o", str(root / "nel"), "--no-progress", cwd=root, unset=UNSET)
        assert p.returncode == 0, p.stderr[-2000:]
        p = run_nel("eval", "run", "--bench", "capitals_bench.py", "--model-url", furl, "-o", str(root / "nelf"),
                    "--no-progress", "-O", "services.default.max_retries=0", cwd=root, unset=UNSET)
        assert (root / "nelf" / BENCH / "results.jsonl").is_file(), p.stderr[-2000:]
    finally:
        proc.stop()
        fproc.stop()
    yield Runs(root / "peer", root / "nel", root / "nelf")


def test_the_same_files_in_the_same_layout(runs: Runs) -> None:
    for out in (runs.peer, runs.nel):
        names = {p.name for p in (out / BENCH).iterdir()}
        (ev,) = [n for n in names if n.startswith("eval-")]
        assert re.fullmatch(rf"eval-\d{{8}}T\d{{6}}Z-{BENCH}\.json", ev), ev
        assert {"results.jsonl", "trajectories.jsonl", "runtime_stats.json", "failure_analysis.json"} <= names
        assert ev == _bundle(out)["run_id"] + ".json"
        for run_file in ("nel_run.json", "checkpoint.json", "report.md"):
            assert (out / run_file).is_file(), (out, run_file)
    # the run-level report names the benchmark and its score in both
    for out in (runs.peer, runs.nel):
        assert BENCH in (out / "report.md").read_text()


@pytest.mark.parametrize("name", ["eval", "results.jsonl", "trajectories.jsonl", "runtime_stats.json",
                                  "failure_analysis.json", "../checkpoint.json", "../nel_run.json"])
def test_every_key_the_peer_writes_is_written_with_its_shape(runs: Runs, name: str) -> None:
    def load(out: Path) -> Any:
        if name == "eval":
            return _bundle(out)
        p = (out / BENCH / name).resolve()
        return _lines(p) if p.suffix == ".jsonl" else json.loads(p.read_text())

    theirs, ours = load(runs.peer), load(runs.nel)
    if isinstance(theirs, list):  # JSONL: every row of theirs against the row of the same step
        by_step = {(r["problem_idx"], r["repeat"]): r for r in ours}
        assert set(by_step) == {(r["problem_idx"], r["repeat"]) for r in theirs}
        gaps = sorted({g for r in theirs for g in shape_gaps(r, by_step[(r["problem_idx"], r["repeat"])])})
    else:
        gaps = shape_gaps(theirs, ours)
    assert gaps == [], gaps


def test_the_key_lists_of_nemo_format_are_the_peers(runs: Runs) -> None:
    """`nemo_format`'s key lists (what readers and tests rely on) are what 0.3.0 writes."""
    b = _bundle(runs.peer)
    assert set(nf.BUNDLE_KEYS) == set(b) and set(nf.BENCHMARK_KEYS) <= set(b["benchmark"])
    row = _lines(runs.peer / BENCH / "results.jsonl")[0]
    assert set(nf.RESULT_KEYS) == set(row) - {"trajectory"}
    step = next(s for s in _lines(runs.peer / BENCH / "trajectories.jsonl") if "model" in s)
    assert set(nf.TRAJECTORY_KEYS) <= set(step) and set(nf.TRAJECTORY_MODEL_KEYS) == set(step["model"])
    assert set(nf.RUNTIME_KEYS) == set(json.loads((runs.peer / BENCH / "runtime_stats.json").read_text()))
    fa = json.loads((runs.peer / BENCH / "failure_analysis.json").read_text())
    assert set(nf.FAILURE_KEYS) == set(fa)
    assert all(set(nf.FAILURE_CATEGORY_KEYS) == set(c) for c in fa["categories"].values())


def test_the_same_numbers_item_by_item(runs: Runs) -> None:
    theirs, ours = _bundle(runs.peer), _bundle(runs.nel)
    for k in ("samples", "repeats", "name"):
        assert ours["benchmark"][k] == theirs["benchmark"][k], k
    assert ours["n_results"] == theirs["n_results"] == 8
    for metric in ("pass@1", "pass@2"):
        assert ours["benchmark"]["scores"][metric]["value"] == theirs["benchmark"]["scores"][metric]["value"]
    assert ours["benchmark"]["scores"]["summary"]["mean"] == theirs["benchmark"]["scores"]["summary"]["mean"]
    assert ours["config"]["repeats"] == theirs["config"]["repeats"] == 2

    def rewards(out: Path) -> dict[tuple[int, int], float]:
        return {(r["problem_idx"], r["repeat"]): r["reward"] for r in _lines(out / BENCH / "results.jsonl")}

    assert rewards(runs.nel) == rewards(runs.peer)
    # the empty reply is a failure in both analyses, with the same share of the steps
    fa_t = json.loads((runs.peer / BENCH / "failure_analysis.json").read_text())
    fa_o = json.loads((runs.nel / BENCH / "failure_analysis.json").read_text())
    assert (fa_o["total_failures"], fa_o["failure_rate"]) == (fa_t["total_failures"], fa_t["failure_rate"]) == (2, 0.25)
    ex = {(e["problem_idx"], e["repeat"]) for c in fa_o["categories"].values() for e in c["exemplars"]}
    assert ex == {(2, 0), (2, 1)}
    # the same single-turn ATIF trajectory (system, user, agent) and hashes of the answer
    for out in (runs.peer, runs.nel):
        step = next(s for s in _lines(out / BENCH / "trajectories.jsonl") if s["problem_idx"] == 0)
        (doc,) = step["trajectory"]
        assert doc["schema_version"] == "ATIF-v1.6"
        assert [s["source"] for s in doc["steps"]] == ["system", "user", "agent"]
        assert [s["step_id"] for s in doc["steps"]] == [1, 2, 3]
        assert doc["steps"][2]["message"] == "Paris is lovely.\nAnswer: Paris"
        assert re.fullmatch(r"[0-9a-f]{16}", step["model"]["request_hash"])
    steps = {out: next(s for s in _lines(out / BENCH / "trajectories.jsonl") if s["problem_idx"] == 0)
             for out in (runs.peer, runs.nel)}
    assert steps[runs.peer]["model"]["response_hash"] == steps[runs.nel]["model"]["response_hash"]


def test_a_failed_request_is_marked_as_the_peer_marks_its_own(runs: Runs) -> None:
    """0.3.0 gives a request that failed after its retries reward 0.0 and
    `scoring_details.error_category = "infra_error"`; nel writes the same (its tools need a
    number), says what failed in `error`, and leaves it out of its scores."""
    rows = {r["problem_idx"]: r for r in _lines(runs.nel_failed / BENCH / "results.jsonl")}
    failed = rows[2]
    assert failed["reward"] == 0.0 and failed["model_response"] == ""
    assert failed["scoring_details"]["error_category"] == "infra_error" and "500" in failed["error"]
    assert "trajectory" not in failed
    step = next(s for s in _lines(runs.nel_failed / BENCH / "trajectories.jsonl") if s["problem_idx"] == 2)
    assert "model" not in step and "500" in step["model_error"]
    b = _bundle(runs.nel_failed)
    # nel's score is over the 3 answered questions (2 right); 0.3.0 would say 2 of 4
    assert b["benchmark"]["scores"]["pass@1"]["value"] == pytest.approx(round(2 / 3, 4))
    assert b["metrics"]["n_failed_samples"] == 1
    assert b["benchmark"]["scores"]["runtime"]["model_errors"] == 1
    fa = json.loads((runs.nel_failed / BENCH / "failure_analysis.json").read_text())
    assert fa["total_failures"] >= 1 and any(
        e["problem_idx"] == 2 and "500" in e["error"] for c in fa["categories"].values() for e in c["exemplars"])


def test_no_failure_analysis_without_failures(tmp_path: Path) -> None:
    """0.3.0 writes failure_analysis.json only when some step failed; a rebuilt benchmark
    without failures drops a stale one."""
    import pyarrow as pa

    from nel_assets.engine.nemo.exports import write_exports
    from nel_assets.engine.results.bundle import build_bundle
    from nel_resources.storage.schema import rows_to_table

    rows = [{"run_id": "r", "benchmark": "b", "model": "m", "model_id": "m", "shard": 0, "problem_idx": i,
             "repeat": 0, "sample_id": f"{i}:0", "prompt": "p", "response": "a", "reward": 1.0,
             "details": '{"method": "x"}', "model_ms": 1.0, "timestamp": 1.0} for i in range(3)]
    table: pa.Table = rows_to_table(rows)
    bundle = build_bundle(table, benchmark="b", model="m")
    (tmp_path / "failure_analysis.json").write_text("{}")
    paths = write_exports(tmp_path, table, bundle, config=nf.run_config("b", model_id="m", base_url=None, repeats=1,
                                                                        max_problems=None, shuffle=None))
    assert "failure_analysis" not in paths and not (tmp_path / "failure_analysis.json").exists()
    assert [p.name for p in tmp_path.glob("eval-*.json")] == [paths["eval"].name]
