"""Harbor-format agent tasks end to end: `nel eval run` on a terminal-bench-style task set
(written here in the real Harbor layout: task.toml naming the locally built image,
instruction.md, tests/test.sh writing /logs/verifier/reward.txt) with `solver.type:
tool_calling` and `sandbox_tools: true` in a real `docker` sandbox, driven by the scripted
reference server. After the agent's loop the task's tests run in the agent's own container:
the model that does the task gets 1, the one that does not gets 0, the one that rewrites
the tests, writes its own reward and leaves a process writing it again gets 0; the task's
`[agent] timeout_sec` stops a loop and its sandbox is still verified; trajectories show the
tool calls and the results the verifier's outcome. What cannot run is refused in one line
before any request."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nel_resources.reference_server import start_reference_server
from tests.nel_assets.engine.solvers.scripts import call
from tests.support import server_stats
from tests.support.cli import run_nel, summary_json
from tests.support.docker_engine import BASE_IMAGE, start_docker_engine
from tests.support.harbor_tasks import write_task_set as write_tasks

TASKS: dict[str, dict[str, Any]] = {
    "a-greet": {"instruction": "Task greet: write the word hello into /app/greeting.txt.",
                "file": "greeting.txt", "expected": "hello\n"},
    "b-answer": {"instruction": "Task answer: write the number 42 into /app/answer.txt.",
                 "file": "answer.txt", "expected": "42\n"},
    "c-cheat": {"instruction": "Task cheat: write the word yes into /app/yes.txt.",
                "file": "yes.txt", "expected": "yes\n"},
    "d-slow": {"instruction": "Task slow: write the word done into /app/done.txt.",
               "file": "done.txt", "expected": "done\n", "agent_timeout": 10.0},
}

CHEAT = "printf '#!/bin/bash\\necho 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh"
SCRIPT: list[dict[str, Any]] = [
    # does the task, checks it, says so
    {"match": "Task greet", "turns": [
        {"tool_calls": [call("bash", command="echo hello > greeting.txt && cat greeting.txt")]},
        {"content": "Wrote {last_tool}"}]},
    # does it wrong
    {"match": "Task answer", "turns": [
        {"tool_calls": [call("file_write", path="/app/answer.txt", content="41\n")]},
        {"content": "Done."}]},
    # never does the task: rewrites the tests, writes a reward, leaves a writer running
    {"match": "Task cheat", "turns": [
        {"tool_calls": [call("bash", command=(
            f"mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && {CHEAT} && "
            "(nohup sh -c 'while :; do echo 1 > /logs/verifier/reward.txt; sleep 0.05; done' "
            ">/dev/null 2>&1 &) && echo planted"))]},
        {"content": "All tests pass."}]},
    # does the task, then hangs past the task's agent timeout (in one command: the
    # timeout then has a whole model call and command start to spare before the work)
    {"match": "Task slow", "turns": [
        {"tool_calls": [call("bash", command="echo done > done.txt && sleep 600")]},
        {"content": "never reached"}]},
]


def write_task_set(root: Path, image: str = BASE_IMAGE) -> Path:
    return write_tasks(root, TASKS, image, agent_timeout=120.0)


@pytest.fixture(scope="module")
def docker_host() -> str:
    return start_docker_engine()


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    proc, base = start_reference_server(tool_script=SCRIPT)
    try:
        yield base
    finally:
        proc.stop()


def config(url: str, tmp_path: Path, tasks: Path, **bench: Any) -> Path:
    cfg = {
        "services": {"ref": {"type": "api", "url": f"{url}/chat/completions",
                             "protocol": "chat_completions", "model": "ref", "max_concurrent": 4}},
        # no image: each task brings its own (task.toml [environment] docker_image)
        "sandboxes": {"box": {"type": "docker", "concurrency": 4}},
        "benchmarks": [{"name": "terminal-bench-v1", "sandbox": "box",
                        "params": {"tasks_dir": str(tasks)},
                        "solver": {"type": "tool_calling", "service": "ref", "sandbox_tools": True,
                                   "max_turns": 5, "tool_timeout": 120}, **bench}],
        "output": {"dir": str(tmp_path / "out")},
    }
    path = tmp_path / "nel.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def test_harbor_tasks_are_verified_in_the_agents_docker_sandbox(tmp_path: Path, url: str,
                                                                docker_host: str) -> None:
    tasks = write_task_set(tmp_path / "tasks")
    s = summary_json(run_nel("eval", "run", str(config(url, tmp_path, tasks)), "--json",
                             "--no-progress", env={"DOCKER_HOST": docker_host}))
    (res,) = s["results"]
    assert res["benchmark"] == "terminal-bench-v1" and res["n_items"] == 4 and res["failed"] == 0
    assert res["score"] == 0.5  # the summary's score is the verifiers' rewards
    rows = {json.loads(r["metadata"])["task_id"]: r for r in _store_rows(tmp_path / "out")}
    assert {k: r["reward"] for k, r in rows.items()} == {
        "a-greet": 1.0, "b-answer": 0.0, "c-cheat": 0.0, "d-slow": 1.0}
    details = {k: json.loads(r["details"]) for k, r in rows.items()}
    for k, d in details.items():
        assert d["method"] == "harbor" and d["reward_source"] == "reward_file", (k, d)
        assert d["test_stderr"] == "", (k, d)
    assert details["a-greet"]["test_exit_code"] == 0 and details["a-greet"]["test_stdout"] == "PASS\n"
    assert rows["a-greet"]["extracted"] == "test_exit=0 reward=1"
    assert details["b-answer"]["reward_raw"] == "0" and details["b-answer"]["test_stdout"] == "FAIL\n"
    # the cheat's own test.sh and reward file were replaced and its writer killed: the
    # task's real tests ran, and failed
    assert details["c-cheat"]["reward_raw"] == "0" and details["c-cheat"]["test_stdout"] == "FAIL\n"
    # the task's agent timeout stopped the loop in its `sleep 600`; the work done before
    # it is what was verified (and the sleep did not hold the verifier up)
    assert details["d-slow"]["agent_timed_out"] is True and details["d-slow"]["agent_timeout_s"] == 10.0
    assert rows["d-slow"]["turns"] == 1 and rows["d-slow"]["error"] is None
    # trajectories.jsonl: each sample's tool calls as the model made them, their results,
    # and the verifier's outcome
    traj = {t["seed_metadata"]["task_id"]: t for t in map(
        json.loads, (Path(res["exports"]) / "trajectories.jsonl").read_text().splitlines())}
    steps = {k: t["trajectory"][0]["steps"] for k, t in traj.items()}
    calls = {k: [(c["function_name"], c["arguments"]) for st in v for c in st.get("tool_calls") or []]
             for k, v in steps.items()}
    assert calls["a-greet"] == [("bash", {"command": "echo hello > greeting.txt && cat greeting.txt"})]
    assert calls["b-answer"] == [("file_write", {"path": "/app/answer.txt", "content": "41\n"})]
    assert [n for n, _ in calls["c-cheat"]] == ["bash"] and [n for n, _ in calls["d-slow"]] == ["bash"]
    seen = [o["content"] for st in steps["a-greet"] for o in (st.get("observation") or {}).get("results", [])]
    assert seen == ["hello"]
    assert steps["d-slow"][-1]["extra"] == {"agent_timed_out": True}
    assert traj["c-cheat"]["scoring_details"]["test_stdout"] == "FAIL\n" and traj["c-cheat"]["reward"] == 0.0


def _store_rows(out: Path) -> list[dict[str, Any]]:
    from nel_resources.storage.store import ResultStore

    return ResultStore(out).read_shards("terminal-bench-v1", "ref").to_pylist()


@pytest.mark.parametrize(("bench", "key", "says"), [
    ({"solver": {"type": "simple", "service": "ref"}}, "benchmarks.0.solver",
     "nel runs it with `solver: {type: tool_calling, sandbox_tools: true}`"),
    # PinchBench is graded on the workspace in the sandbox: an agent working elsewhere cannot
    ({"name": "pinchbench", "solver": {"type": "simple", "service": "ref"}}, "benchmarks.0.solver",
     "'pinchbench' is graded on the agent's workspace in the sample's sandbox"),
], ids=["simple-solver", "pinchbench"])
def test_what_cannot_run_is_refused_in_one_line(tmp_path: Path, url: str, bench: dict[str, Any],
                                                key: str, says: str) -> None:
    tasks = write_task_set(tmp_path / "tasks")
    before = server_stats(url)["total_requests"]
    p = run_nel("eval", "run", str(config(url, tmp_path, tasks, **bench)), "--no-progress")
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert f"key {key}: " in lines[0] and says in lines[0], lines[0]
    assert server_stats(url)["total_requests"] == before


def test_a_task_image_the_engine_lacks_is_refused_before_any_request(tmp_path: Path, url: str,
                                                                     docker_host: str) -> None:
    tasks = write_task_set(tmp_path / "tasks", image="nel-test/no-such-image:0")
    before = server_stats(url)["total_requests"]
    p = run_nel("eval", "run", str(config(url, tmp_path, tasks)), "--no-progress",
                env={"DOCKER_HOST": docker_host})
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert "key benchmarks.0.sandbox: " in lines[0] and "(task a-greet)" in lines[0], lines[0]
    assert "`docker pull nel-test/no-such-image:0` or `docker load` it first" in lines[0], lines[0]
    assert server_stats(url)["total_requests"] == before
    assert not (tmp_path / "out").exists()
