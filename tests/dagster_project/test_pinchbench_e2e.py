"""PinchBench graded as NeMo Evaluator 0.3.0 grades it, end to end: `nel eval run` on a
checkout written by the test (one automated, one llm_judge, one hybrid task), a scripted
model doing the tasks with sandbox tools in a real `docker` sandbox (the workspace), and a
scripted judge behind nel's judge machinery (`type: judge` metric, kind `pinchbench`).

The automated checks (`grade()`) run in the sandbox on the files the agent wrote; the judge
gets PinchBench's own prompt (the checkout's `lib_grading._build_judge_prompt`, fed the
rubric, the transcript summary and the workspace files) and its per-criterion reply becomes
the reward; the hybrid task combines both with its `grading_weights`. The rewards are
1, 0.75 and 0.25 * 0 + 0.75 * 0.8 = 0.6.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from nel_resources.reference_server import start_reference_server
from tests.nel_assets.engine.solvers.scripts import call
from tests.support.cli import run_nel
from tests.support.docker_engine import BASE_IMAGE, start_docker_engine
from tests.support.pinchbench_checkout import NOTES, write_checkout

MODEL_SCRIPT: list[dict[str, Any]] = [
    {"match": "Task auto:", "turns": [
        {"tool_calls": [call("file_write", path="greeting.txt", content="hello\n")]},
        {"content": "Wrote greeting.txt."}]},
    {"match": "Task judge:", "turns": [
        {"tool_calls": [call("bash", command="head -c 30 notes.md > summary.txt")]},
        {"content": "Summary written."}]},
    {"match": "Task hybrid:", "turns": [{"content": "I will not write it."}]},
]
JUDGE_ANSWERS = [
    {"match": "JUDGE TASK\nTask judge:",
     "content": 'Looks fine.\n```json\n{"scores": {"completeness": 0.5, "accuracy": 1.0}, '
                '"total": 0.75, "notes": "partial"}\n```'},
    {"match": "JUDGE TASK\nTask hybrid:", "content": '{"total": 0.8, "notes": "no file"}'},
]


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[str, str]]:
    model, model_url = start_reference_server(tool_script=MODEL_SCRIPT)
    judge, judge_url = start_reference_server(answers=JUDGE_ANSWERS, default_content="no idea")
    try:
        yield model_url, judge_url
    finally:
        model.stop()
        judge.stop()


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory,
         servers: tuple[str, str]) -> dict[str, dict[str, Any]]:
    from nel_resources.storage.store import ResultStore

    host = start_docker_engine()
    root = tmp_path_factory.mktemp("pinchbench")
    model_url, judge_url = servers
    cfg = {
        "services": {
            "model": {"type": "api", "url": f"{model_url}/chat/completions",
                      "protocol": "chat_completions", "model": "ref", "max_concurrent": 3},
            "judge": {"type": "api", "url": f"{judge_url}/chat/completions",
                      "protocol": "chat_completions", "model": "judge-m", "role": "judge"},
        },
        "benchmarks": [{
            "name": "pinchbench", "params": {"tasks_dir": str(write_checkout(root / "skill"))},
            "solver": {"type": "tool_calling", "service": "model", "sandbox_tools": True,
                       "max_turns": 4},
            "sandbox": {"type": "docker", "image": BASE_IMAGE, "concurrency": 3},
            "scoring": {"metrics": [{"type": "judge", "name": "pinchbench_rubric",
                                     "service": "judge"}]}}],
        "output": {"dir": str(root / "out")},
    }
    path = root / "nel.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    p = run_nel("eval", "run", str(path), "--json", "--no-progress", env={"DOCKER_HOST": host})
    assert p.returncode == 0, p.stderr[-3000:]
    got = ResultStore(root / "out").read_shards("pinchbench", "model").to_pylist()
    return {json.loads(r["metadata"])["task_id"]: r for r in got}


def test_each_grading_type_gives_its_reward(rows: dict[str, dict[str, Any]]) -> None:
    assert {k: r["reward"] for k, r in rows.items()} == pytest.approx({
        "task_01_auto": 1.0, "task_02_judge": 0.75, "task_03_hybrid": 0.6})
    assert all(r["error"] is None for r in rows.values())


def test_the_automated_checks_ran_on_the_agents_workspace(rows: dict[str, dict[str, Any]]) -> None:
    auto = json.loads(rows["task_01_auto"]["details"])
    assert auto["breakdown"] == {"file_exists": 1.0, "content": 1.0, "said_so": 1.0}
    assert auto["automated_score"] == 1.0 and auto["grading_type"] == "automated"
    hybrid = json.loads(rows["task_03_hybrid"]["details"])
    assert hybrid["breakdown"] == {"exists": 0.0}
    combine = hybrid["judge"]["hybrid_combine"]
    assert combine["weights"] == {"automated": 0.25, "llm_judge": 0.75}
    assert (combine["automated"], combine["judge"]) == (0.0, 0.8)
    assert combine["combined"] == pytest.approx(0.6)


def test_the_judge_got_pinchbenchs_prompt_with_the_workspace(rows: dict[str, dict[str, Any]]) -> None:
    judge = json.loads(rows["task_02_judge"]["details"])["judge"]
    assert judge["kind"] == "pinchbench" and judge["service"] == "judge"
    system, user = judge["messages"]
    assert system == {"role": "system",
                      "content": "You are a strict evaluation judge. Always respond with valid JSON."}
    prompt = user["content"]
    assert prompt.startswith("JUDGE TASK\nTask judge: summarize notes.md into summary.txt.")
    assert "---RUBRIC---\nScore completeness and accuracy from 0 to 1." in prompt
    assert "---TRANSCRIPT---\nAssistant: Summary written." in prompt
    # the files the agent left (the asset it was given, and its own summary)
    assert f"### File: notes.md\n{NOTES}" in prompt
    assert f"### File: summary.txt\n{NOTES[:30]}" in prompt
    assert judge["parsed"]["scores"] == {"completeness": 0.5, "accuracy": 1.0}
