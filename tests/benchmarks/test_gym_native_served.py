"""`gym://host:port?protocol=native` without `data=` (NeMo Evaluator 0.3.0's example 11): the
problems are the server's, as 0.3.0 asks for them (`/dataset_size`, `/seed_session`), and
`/verify` gets NeMo Gym's native body. Against a real `nel serve` process (NeMo Evaluator's
own BYOB file) and the reference model server: every problem runs and is scored by the
server. (Against a real NeMo Gym resources server, which serves no problems, the run
refuses in one line: test_gym_rollouts.py.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from nel_resources.reference_server import start_reference_server
from tests.benchmarks.test_byob_nemo import CAPITALS  # 4 problems: France, Japan, Kenya, Peru
from tests.benchmarks.test_serve import start_server, stop_server, wait_healthy
from tests.support.cli import run_nel, summary_json
from tests.support.reference import server_stats

ANSWERS = [{"match": "capital of France", "content": "Answer: Paris"},
           {"match": "capital of Japan", "content": "Answer: Osaka"},
           {"match": "capital of Kenya", "content": "Answer: Nairobi"},
           {"match": "capital of Peru", "content": "Answer: Bogota"}]


@pytest.fixture(scope="module")
def serve_port() -> Iterator[int]:
    proc, port = start_server(["-b", str(CAPITALS)])
    try:
        wait_healthy(port, proc)
        yield port
    finally:
        stop_server(proc)


def test_native_without_data_runs_the_servers_problems_scored_by_the_server(
        serve_port: int, tmp_path: Path) -> None:
    model, url = start_reference_server(answers=ANSWERS)
    try:
        name = f"gym://127.0.0.1:{serve_port}?protocol=native"
        out = tmp_path / "out"
        s = summary_json(run_nel("eval", "run", "-b", name, "--model-url", url,
                                 "--model-id", "ref", "-o", str(out), "--json", "--no-progress"))
        calls = server_stats(url)["by_endpoint"].get("/v1/chat/completions", 0)
    finally:
        model.stop()
    (res,) = s["results"]
    assert res["n_samples"] == 4 and res["failed"] == 0 and res["score"] == 0.5, res
    assert calls == 4  # one model call per problem the server served
    (bench_dir,) = [p for p in out.iterdir() if (p / "trajectories.jsonl").is_file()]
    rows = [json.loads(line) for line in (bench_dir / "trajectories.jsonl").read_text().splitlines()]
    by_idx = {r["problem_idx"]: r for r in rows}
    # the server's prompts and gold answers; its scorer read the native body's answer
    assert [by_idx[i]["expected_answer"] for i in range(4)] == ["Paris", "Tokyo", "Nairobi", "Lima"]
    assert [by_idx[i]["reward"] for i in range(4)] == [1.0, 0.0, 1.0, 0.0]
    assert [by_idx[i]["extracted_answer"] for i in (0, 2)] == ["Paris", "Nairobi"]
    assert "capital of Japan" in by_idx[1]["prompt"]


def test_native_without_data_plans_without_asking_the_server(tmp_path: Path) -> None:
    """The dry run sends no request (the port is closed): the server is a run-time check."""
    name = "gym://127.0.0.1:9?protocol=native"
    p = run_nel("eval", "run", "-b", name, "--model-url", "http://127.0.0.1:9/v1", "--dry-run",
                "--json", "-o", str(tmp_path / "out"))
    assert p.returncode == 0, p.stderr
    plan = json.loads(p.stdout)
    assert plan["would_run"] == 1 and not plan["errors"], plan
    assert any("needs the server up" in c and name in c for c in plan["deferred_checks"]), plan
