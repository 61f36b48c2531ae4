"""`gym_delegation` on Harbor tasks with the task's sandbox on SLURM: the suite's real NeMo Gym
stack runs the agent; nel applies the patch it hands back in a `slurm` sandbox (each task's
image through the test-only Pyxis stand-in, tests/support/pyxis, on the real test cluster)
and the task's own tests decide: the same per-task rewards as nel's docker sandbox gives them
(test_gym_harbor_e2e.py, TEST_REWARDS)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.support.cli import run_nel, summary_json
from tests.support.docker_engine import BASE_IMAGE, start_docker_engine
from tests.support.gym_harbor import TASKS, TEST_REWARDS
from tests.support.harbor_tasks import write_task_set
from tests.support.nemo_gym import GYM_GROUP, SharedGym
from tests.support.pyxis import pyxis_env
from tests.support.slurm_cluster import start_slurm_cluster

pytestmark = [pytest.mark.xdist_group(GYM_GROUP), pytest.mark.slurm]


def test_the_agents_patch_is_verified_in_a_slurm_sandbox(tmp_path: Path,
                                                          shared_gym: SharedGym) -> None:
    env = {**os.environ, "DOCKER_HOST": start_docker_engine(), "SLURM_CONF": start_slurm_cluster()}
    tasks = write_task_set(tmp_path / "tasks", TASKS, BASE_IMAGE, agent_timeout=120.0)
    cfg = {
        "services": {
            "policy": {"type": "api", "url": f"{shared_gym.policy_url}/chat/completions",
                       "protocol": "chat_completions", "model": "reference", "max_concurrent": 3},
            "gym": {"type": "gym", "url": shared_gym.head_url}},
        "benchmarks": [{
            "name": "swebench-multilingual", "params": {"tasks_dir": str(tasks)}, "timeout": 120,
            "solver": {"type": "gym_delegation", "service": "policy", "gym_service": "gym",
                       "gym_agent": "counter_agent", "trust_reward": False},
            "sandbox": {"type": "slurm", "timeout": 1800.0, "concurrency": 2, "cpus": 1}}],
        "output": {"dir": str(tmp_path / "out")},
    }
    (tmp_path / "nel.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    record = tmp_path / "pyxis.jsonl"
    s = summary_json(run_nel("eval", "run", str(tmp_path / "nel.yaml"), "--json", "--no-progress",
                             env=pyxis_env(record, env, in_image=True)))
    (res,) = s["results"]
    assert res["n_items"] == 3 and res["failed"] == 0, res
    from nel_resources.storage.store import ResultStore

    rows = {json.loads(r["metadata"])["task_id"]: r for r in
            ResultStore(tmp_path / "out").read_shards("swebench-multilingual", "policy").to_pylist()}
    assert {k: r["reward"] for k, r in rows.items()} == TEST_REWARDS
    patch = json.loads(rows["a-fix"]["details"])["agent_patch"]
    assert patch == {"source": "answer", "applied": True, "files": ["result.txt"]}
    steps = [json.loads(line) for line in record.read_text().splitlines()]
    # the patch went in, and the tests ran, in steps of the task's image in SLURM allocations
    assert {st["options"]["--container-image"] for st in steps} == {BASE_IMAGE}
    assert any("test.sh" in " ".join(st["command"]) for st in steps)
    assert all(any(a.startswith("--jobid=") for a in st["command"]) for st in steps)
