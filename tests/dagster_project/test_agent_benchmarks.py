"""`check_agent_benchmark`: which sandbox types a Harbor task runs in, and the one-line
refusals that remain (fast: no sandbox starts; the runs are test_harbor_slurm_e2e.py and
tests/nel_resources/sandboxes/test_apptainer_pool.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dagster_project.agent_benchmarks import check_agent_benchmark
from nel_resources.config import ConfigError, load_config
from tests.support.harbor_tasks import write_task_set

TASKS = {"a-greet": {"instruction": "write hello into /app/greeting.txt", "file": "greeting.txt",
                     "expected": "hello\n"}}
TOOLS = {"type": "tool_calling", "service": "m", "sandbox_tools": True}


def _check(tmp_path: Path, sandbox: dict[str, Any], solver: dict[str, Any]) -> None:
    tasks = write_task_set(tmp_path / "tasks", TASKS, "nel-test/no-such-image:0",
                           agent_timeout=60.0)
    path = tmp_path / "nel.yaml"
    path.write_text(yaml.safe_dump({
        "services": {"m": {"type": "api", "url": "http://127.0.0.1:9/v1", "model": "m"},
                     "gym": {"type": "gym", "url": "http://127.0.0.1:9"}},
        "benchmarks": [{"name": "terminal-bench-v1", "params": {"tasks_dir": str(tasks)},
                        "solver": solver, "sandbox": sandbox}]}))
    cfg = load_config(path)
    check_agent_benchmark(cfg, cfg.benchmarks[0])


@pytest.mark.parametrize("sandbox", [
    {"type": "slurm", "cpus": 1},
    {"type": "apptainer", "sif_cache_dir": "/tmp/nel-sifs"},
], ids=["slurm", "apptainer"])
def test_harbor_tasks_run_in_cluster_sandboxes_with_their_own_images(
        tmp_path: Path, sandbox: dict[str, Any]) -> None:
    # the task's image is not in the local Docker engine: Pyxis and `apptainer build` fetch
    # it as the cluster does, so nothing here asks the engine
    _check(tmp_path, sandbox, TOOLS)
    _check(tmp_path / "gym", sandbox, {"type": "gym_delegation", "service": "m",
                                       "gym_service": "gym", "gym_agent": "openhands"})


@pytest.mark.parametrize("sandbox", ["slurm", "apptainer"])
def test_terminus_is_refused_where_no_process_outlives_its_command(
        tmp_path: Path, sandbox: str) -> None:
    with pytest.raises(ConfigError) as err:
        _check(tmp_path, {"type": sandbox}, {"type": "harbor", "service": "m",
                                             "agent": "terminus-2"})
    msg = str(err.value)
    assert "\n" not in msg and "key benchmarks.0.solver.agent: terminus-2 drives a tmux " \
        f"session that must outlive each command, and a {sandbox} sandbox ends" in msg
