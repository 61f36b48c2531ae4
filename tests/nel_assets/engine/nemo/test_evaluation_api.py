"""NeMo Evaluator's Python API on nel's engine, used the way its API reference shows.

`run_evaluation` end to end against the reference server, `write_all` files, `compare_runs`
on two real runs by glob, `write_regression(report, path)`, `get_environment(file)` and a
`ProgressTracker`, all imported through the `nemo_evaluator.*` paths a user's script uses.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.errors import NelError
from benchmarks.nemo_imports import install_nemo_imports

FILES = Path(__file__).resolve().parents[3] / "benchmarks" / "nemo_files"
CAPITALS = FILES / "capitals_bench.py"

GOOD = [{"match": c, "content": f"Answer: {a}"} for c, a in
        [("France", "Paris"), ("Japan", "Tokyo"), ("Kenya", "Nairobi"), ("Peru", "Lima")]]
WORSE = [{"match": "France", "content": "Answer: Paris"}, {"match": "Japan", "content": "Answer: Kyoto"},
         {"match": "Kenya", "content": "Answer: Mombasa"}, {"match": "Peru", "content": "Answer: Cusco"}]


class Recorder:
    """A ProgressTracker that keeps every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def on_start(self, *a: Any) -> None:
        self.calls.append(("start", a))

    def on_step(self, *a: Any) -> None:
        self.calls.append(("step", a))

    def on_phase(self, *a: Any) -> None:
        self.calls.append(("phase", a))

    def on_done(self, *a: Any) -> None:
        self.calls.append(("done", a))


def _evaluate(url: str, out: Path, progress: Any = None, n_repeats: int = 2) -> dict[str, Any]:
    install_nemo_imports()
    from nemo_evaluator import ChatSolver, ModelClient, get_environment, run_evaluation
    from nemo_evaluator.engine import write_all

    env = get_environment(str(CAPITALS))
    client = ModelClient(base_url=url, model="m", max_concurrent=4)
    bundle = asyncio.run(run_evaluation(env, ChatSolver(client), n_repeats=n_repeats,
                                        config={"note": "api"}, progress=progress))
    asyncio.run(client.close())
    write_all(bundle, out)
    return bundle


def test_run_evaluation_end_to_end_and_write_all(tmp_path: Path, reference_server, server_stats) -> None:
    url = reference_server(answers=WORSE)
    rec = Recorder()
    bundle = _evaluate(url, tmp_path / "run", progress=rec)
    assert bundle["benchmark"] == "nemo_style_capitals"
    assert bundle["score"]["mean"] == pytest.approx(0.25)
    assert bundle["score"]["n_samples"] == 8 and bundle["config"] == {"note": "api"}
    assert server_stats(url)["by_endpoint"]["/v1/chat/completions"] == 8
    kinds = [k for k, _ in rec.calls]
    assert kinds[0] == "start" and kinds[-1] == "done" and kinds.count("step") == 8
    assert rec.calls[0][1] == ("nemo_style_capitals", 4, 2)
    correct, total = rec.calls[-1][1][:2]
    assert (correct, total) == (2, 8)
    files = sorted(p.name for p in (tmp_path / "run").iterdir())
    assert [f for f in files if f.startswith("eval-")] and "results.jsonl" in files
    assert {"trajectories.jsonl", "runtime_stats.json"} <= set(files)
    rows = [json.loads(x) for x in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 8
    # NeMo Evaluator's rule: failure_analysis.json only when some step failed
    assert ("failure_analysis.json" in files) == any(r["failure_category"] for r in rows)
    assert {r["problem_idx"]: r["reward"] for r in rows} == {0: 1.0, 1: 0.0, 2: 0.0, 3: 0.0}


def test_compare_runs_and_write_regression_on_two_real_runs(tmp_path: Path, reference_server) -> None:
    _evaluate(reference_server(answers=GOOD), tmp_path / "baseline", n_repeats=3)
    _evaluate(reference_server(answers=WORSE), tmp_path / "candidate", n_repeats=3)
    from nemo_evaluator.engine import compare_runs, write_regression

    report = compare_runs(str(tmp_path / "baseline" / "eval-*.json"),
                          str(tmp_path / "candidate" / "eval-*.json"))
    comp = report["benchmarks"]["nemo_style_capitals"]
    assert comp["delta"] == pytest.approx(-0.75)
    assert report["regression"] is True and report["regressions"] == ["nemo_style_capitals"]
    # NeMo Evaluator's top-level verdict, by its rules: 3 of 4 problems lost is not significant
    # for its one-sided McNemar, and 3 discordant pairs are underpowered for its 0.005 default
    assert report["verdict"] == comp["outcome"] == "INCONCLUSIVE"
    assert comp["nemo_verdict"]["n_discordant"] == 3 and comp["nemo_verdict"]["min_effect"] == 0.005
    written = write_regression(report, tmp_path / "out" / "regression.json")
    assert json.loads(written.read_text())["regressions"] == ["nemo_style_capitals"]
    with pytest.raises(NelError, match="matches 0 files"):
        compare_runs(str(tmp_path / "nowhere" / "eval-*.json"), str(tmp_path / "candidate"))


def test_run_evaluation_runs_any_solver(reference_server) -> None:
    """A user's own `Solver` (no model client at all) runs through the same loop: its
    answers are verified by the benchmark, its failures are recorded per sample."""
    install_nemo_imports()
    from nemo_evaluator import get_environment, run_evaluation

    from nel_assets.engine.solvers import SolveResult

    env = get_environment(str(CAPITALS))

    class Oracle:
        async def solve(self, task: Any, ctx: Any = None) -> SolveResult:
            if ctx.problem_idx == 0:
                return SolveResult("", error="gave up", failure_category="my_reason")
            return SolveResult(response=str(task.expected_answer))

    bundle = asyncio.run(run_evaluation(env, Oracle()))
    rows = bundle["_table"].to_pylist()
    assert len(rows) == len(env) > 1
    assert (rows[0]["reward"], rows[0]["failure_category"], rows[0]["error"]) == (
        None, "my_reason", "gave up")
    assert [r["reward"] for r in rows[1:]] == [1.0] * (len(rows) - 1)


def test_run_evaluation_refuses_what_nel_has_not_built(reference_server) -> None:
    install_nemo_imports()
    from nemo_evaluator import ChatSolver, ModelClient, get_environment, run_evaluation

    env = get_environment(str(CAPITALS))
    client = ModelClient(base_url=reference_server(), model="m")

    class NotASolver:
        def answer(self, task: Any) -> str:
            raise AssertionError("never called")

    with pytest.raises(NelError, match="NotASolver is not a solver"):
        asyncio.run(run_evaluation(env, NotASolver()))
    with pytest.raises(NelError, match="judge_client= is not supported yet"):
        asyncio.run(run_evaluation(env, ChatSolver(client), judge_client=client))
    with pytest.raises(NelError, match="n_repeats"):
        asyncio.run(run_evaluation(env, ChatSolver(client), n_repeats=0))
