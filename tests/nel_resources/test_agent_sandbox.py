"""The sandbox nel provides to Harbor tasks whose agent works in NeMo Gym (`agent_sandbox`),
and NeMo Evaluator's walkthrough 07/08 and examples 09/10/21 as written: with the task files
here they plan unchanged (`--dry-run`, real Docker engine for the task image check); a
verifying solver with `sandbox: {type: none}` written out is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nel_resources.agent_sandbox import effective_sandbox
from nel_resources.config import load_config
from tests.support.cli import run_nel
from tests.support.docker_engine import BASE_IMAGE, start_docker_engine
from tests.support.gym_harbor import TASKS
from tests.support.harbor_tasks import write_task_set

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nemo_configs"
COPIES = {"wt07_gym_delegation": "walkthrough", "wt08_tool_calling_gym": "walkthrough",
          "09_gym_runtime": "examples", "10_gym_full": "examples", "21_tool_calling_gym": "examples"}


def test_which_benchmarks_get_a_docker_sandbox() -> None:
    got = {name: effective_sandbox(load_config(FIXTURES / folder / f"{name}.yaml").benchmarks[0])
           for name, folder in COPIES.items()}
    assert got["wt08_tool_calling_gym"] is not None and got["21_tool_calling_gym"] is not None
    for name in ("wt08_tool_calling_gym", "21_tool_calling_gym"):  # none written: nel's
        assert (got[name].type, got[name].network, got[name].image) == ("docker", "none", None)
    assert got["10_gym_full"].type == "none"  # written out: kept (Gym's reward is trusted)
    assert got["wt07_gym_delegation"].type == got["09_gym_runtime"].type == "docker"
    gsm8k = load_config(FIXTURES / "examples" / "01_gsm8k_chat.yaml").benchmarks[0]
    assert effective_sandbox(gsm8k) is None  # no agent benchmark: nothing added



def test_openclaw_in_docker_gets_room_for_nodes_reservations() -> None:
    """OpenClaw's Node reserves more address space than the default 4 GB data limit: a
    docker block without `memory` gets `OPENCLAW_MEMORY`; one that sets it keeps it."""
    from nel_resources.agent_sandbox import OPENCLAW_MEMORY
    from nel_resources.config import BenchmarkConfig

    def bench(**sandbox: object) -> BenchmarkConfig:
        return BenchmarkConfig.model_validate({"name": "pinchbench", "sandbox": sandbox,
                                               "solver": {"type": "openclaw", "service": "m"}})
    got = effective_sandbox(bench(type="docker"))
    assert got is not None and got.memory == OPENCLAW_MEMORY == "8g" and got.network == "none"
    kept = effective_sandbox(bench(type="docker", memory="12g"))
    assert kept is not None and kept.memory == "12g"
    ecs = effective_sandbox(bench(type="ecs_fargate", region="us-west-2"))
    assert ecs is not None and ecs.memory is None  # Fargate's memory is the task's own


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    write_task_set(root / "swebench-multilingual", TASKS, BASE_IMAGE, agent_timeout=60.0)
    return root


@pytest.mark.parametrize("name", sorted(COPIES))
def test_the_walkthrough_configs_plan_unchanged(name: str, data: Path, tmp_path: Path) -> None:
    host = start_docker_engine()
    path = FIXTURES / COPIES[name] / f"{name}.yaml"
    p = run_nel("eval", "run", str(path), "--dry-run", "--json", "-o", str(tmp_path / "o"),
                env={"NEL_DATA_DIR": str(data), "DOCKER_HOST": host})
    assert p.returncode == 0, p.stderr
    plan = json.loads(p.stdout)
    assert plan["would_run"] >= 1 and not plan["errors"], plan
    assert {s["benchmark"] for s in plan["shards"]} == {"swebench-multilingual"}


def test_a_verifying_solver_without_a_sandbox_is_refused(data: Path, tmp_path: Path) -> None:
    text = (FIXTURES / "examples" / "10_gym_full.yaml").read_text()
    path = tmp_path / "cfg.yaml"
    path.write_text(text.replace("trust_reward: true", "trust_reward: false"))
    p = run_nel("eval", "run", str(path), "--dry-run", "-o", str(tmp_path / "o"),
                env={"NEL_DATA_DIR": str(data)})
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert f"{path}:22: key benchmarks.0.sandbox: 'swebench-multilingual': the task's tests " \
           "run in a sandbox" in lines[0], lines[0]
