"""Agent benchmarks (Harbor tasks) run by NeMo Gym, verified in nel's Docker sandbox.

NeMo Evaluator's walkthrough 09 (`wt07_gym_delegation`, `wt08_tool_calling_gym`; examples
09, 10, 21) runs SWE-bench-style tasks with the agent in NeMo Gym and the task's tests in a
sandbox the evaluator provides. Here one `nel eval run`, on the suite's real Gym stack
(`shared_gym`) and real Docker, runs three Harbor task sets written by the test
(`tests/support/gym_harbor.py`):

- `gym_delegation` with `trust_reward: false` (walkthrough 07): Gym's `simple_agent` drives
  Gym's policy model, whose answer holds a diff; nel applies it in the task's sandbox and the
  task's tests/test.sh decides (1 where the diff is right, 0 where it is wrong or missing);
- `gym_delegation` with `trust_reward: true` and `sandbox: {type: none}` (example 10): Gym's
  counter reward is the sample's (it differs from the tests' verdict on every task);
- `tool_calling` with only `resource_service:` and no `sandbox:` (walkthrough 08): nel
  drives a scripted model, Gym's counter server provides the tools, nel provides a docker
  sandbox (the task's image), the model's final diff is applied there and the tests decide.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from nel_resources.reference_server import start_reference_server
from tests.nel_assets.engine.solvers.scripts import call
from tests.support.cli import run_nel
from tests.support.docker_engine import BASE_IMAGE, start_docker_engine
from tests.support.gym_harbor import GYM_REWARDS, PATCHES, TASKS, TEST_REWARDS
from tests.support.harbor_tasks import write_task_set
from tests.support.nemo_gym import GYM_GROUP, SharedGym

pytestmark = pytest.mark.xdist_group(GYM_GROUP)

# nel's own tool-calling model: one counter call, then the task's diff (none for c-silent).
TOOL_SCRIPT: list[dict[str, Any]] = [
    {"match": f"Task gym-{name[2:]}:", "turns": [
        {"tool_calls": [call("increment_counter", count=1)]},
        {"content": f"Done:\n```diff\n{PATCHES[name]}```" if name in PATCHES else "Done."}]}
    for name in TASKS]


@dataclass
class Run:
    proc: subprocess.CompletedProcess[str]
    out: Path
    results: dict[str, dict[str, Any]]


@pytest.fixture(scope="module")
def tool_model() -> Iterator[str]:
    proc, base = start_reference_server(tool_script=TOOL_SCRIPT)
    try:
        yield base
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, shared_gym: SharedGym, tool_model: str) -> Run:
    docker_host = start_docker_engine()
    root = tmp_path_factory.mktemp("gym_harbor")
    tasks = write_task_set(root / "tasks", TASKS, BASE_IMAGE, agent_timeout=120.0)
    params = {"tasks_dir": str(tasks)}
    delegation = {"type": "gym_delegation", "service": "policy", "gym_service": "gym",
                  "gym_agent": "counter_agent"}
    cfg = {
        "services": {
            "ref": {"type": "api", "url": f"{tool_model}/chat/completions",
                    "protocol": "chat_completions", "model": "ref", "max_concurrent": 3},
            "policy": {"type": "api", "url": f"{shared_gym.policy_url}/chat/completions",
                       "protocol": "chat_completions", "model": "reference", "max_concurrent": 3},
            "gym": {"type": "gym", "url": shared_gym.head_url},
            "counter": {"type": "gym", "url": shared_gym.url("counter")},
        },
        "benchmarks": [
            {"name": "swebench-multilingual", "params": params, "timeout": 120,
             "solver": {**delegation, "trust_reward": False},
             "sandbox": {"type": "docker", "timeout": 1800.0, "concurrency": 3}},
            {"name": "terminal-bench-v1", "params": params, "timeout": 120,
             "solver": {**delegation, "trust_reward": True}, "sandbox": {"type": "none"}},
            {"name": "swebench-verified", "params": params,
             # no `sandbox:` (walkthrough 08): nel provides a docker one, each task's image
             "solver": {"type": "tool_calling", "service": "ref", "resource_service": "counter",
                        "max_turns": 5}},
        ],
        "output": {"dir": str(root / "out")},
    }
    config = root / "nel.yaml"
    config.write_text(yaml.safe_dump(cfg, sort_keys=False))
    proc = run_nel("eval", "run", str(config), "--json", "--no-progress",
                   env={"DOCKER_HOST": docker_host})
    summary = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    return Run(proc, root / "out", {r["benchmark"]: r for r in summary.get("results", [])})


def _rows(run: Run, bench: str) -> dict[str, dict[str, Any]]:
    from nel_resources.storage.store import ResultStore

    model = "policy" if bench != "swebench-verified" else "ref"
    rows = ResultStore(run.out).read_shards(bench, model).to_pylist()
    return {json.loads(r["metadata"])["task_id"]: r for r in rows}


def test_the_run_finishes(run: Run) -> None:
    assert run.proc.returncode == 0, run.proc.stderr[-3000:]
    assert set(run.results) == {"swebench-multilingual", "terminal-bench-v1", "swebench-verified"}
    for res in run.results.values():
        assert res["n_items"] == 3 and res["failed"] == 0, res


@pytest.mark.parametrize("bench", ["swebench-multilingual", "swebench-verified"])
def test_the_agents_patch_is_verified_by_the_tasks_tests_in_nels_sandbox(run: Run,
                                                                         bench: str) -> None:
    rows = _rows(run, bench)
    assert {k: r["reward"] for k, r in rows.items()} == TEST_REWARDS
    details = {k: json.loads(r["details"]) for k, r in rows.items()}
    for k, d in details.items():
        assert d["method"] == "harbor" and d["reward_source"] == "reward_file", (k, d)
    assert details["a-fix"]["test_stdout"] == "PASS\n"
    assert details["b-wrong"]["test_stdout"] == "FAIL\n"
    for k in ("a-fix", "b-wrong"):
        assert details[k]["agent_patch"] == {"source": "answer", "applied": True,
                                             "files": ["result.txt"]}, details[k]
    silent = details["c-silent"]["agent_patch"]
    assert silent["applied"] is False and "no patch" in silent["error"]
    # the step that records it is in the trajectory, after the agent's turns
    steps = json.loads(rows["a-fix"]["steps"])
    assert steps[-1]["source"] == "system" and "applied in the task's sandbox" in steps[-1]["message"]


def test_trust_reward_takes_gyms_reward_without_a_sandbox(run: Run) -> None:
    rows = _rows(run, "terminal-bench-v1")
    assert {k: r["reward"] for k, r in rows.items()} == GYM_REWARDS
    assert {r["method"] for r in rows.values()} == {"gym_reward"}
    assert all("agent_patch" not in json.loads(r["details"]) for r in rows.values())


def test_the_tools_came_from_gym(run: Run) -> None:
    rows = _rows(run, "swebench-verified")
    assert set(rows) == set(TASKS)
    for r in rows.values():
        steps = json.loads(r["steps"])
        results = [o["content"] for st in steps
                   for o in (st.get("observation") or {}).get("results", [])]
        assert [json.loads(x) for x in results] == [{"success": True}], steps
