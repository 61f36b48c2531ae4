"""The `harbor` solver's own rules: the agent's time limit (NeMo Evaluator 0.3.0's
`timeout_strategy`), the order of a continued ATIF trajectory, the Harbor venv's Python."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nel_assets.engine.solvers.harbor_agent import _agent_steps, resolve_agent_timeout
from nel_resources.runtime.harbor_install import harbor_python


@pytest.mark.parametrize(("strategy", "task", "cap", "want"), [
    ("override", 30.0, None, 600.0),   # the config's limit, whatever the task says
    ("task", 30.0, None, 30.0),        # the task's `[agent] timeout_sec`
    ("task", None, None, 600.0),       # a task that says nothing: the config's
    ("max", 900.0, None, 900.0),       # the larger of both
    ("max", 30.0, None, 600.0),
    ("max", 900.0, 700.0, 700.0),      # max_agent_timeout caps every strategy
    ("override", None, 100.0, 100.0),
])
def test_time_limit_follows_the_strategy(strategy: str, task: float | None, cap: float | None,
                                         want: float) -> None:
    assert resolve_agent_timeout(strategy, 600.0, task, cap) == want


def test_a_continued_trajectory_is_read_in_order_and_renumbered(tmp_path: Path) -> None:
    def write(name: str, *messages: str) -> None:
        steps = [{"step_id": 1 + i, "source": "agent", "message": m} for i, m in enumerate(messages)]
        (tmp_path / name).write_text(json.dumps({"steps": steps}))

    write("trajectory.cont-1.json", "c", "d")
    write("trajectory.json", "a", "b")
    (tmp_path / "trajectory.cont-2.json").write_text("{torn")  # a torn file adds nothing
    steps = _agent_steps(tmp_path)
    assert [(s["step_id"], s["message"]) for s in steps] == [(1, "a"), (2, "b"), (3, "c"), (4, "d")]
    assert _agent_steps(tmp_path / "missing") == []


def test_harbor_python_is_the_venv_beside_the_cli(tmp_path: Path) -> None:
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").write_text("")
    cli = venv_bin / "harbor"
    cli.write_text("#!/bin/sh\n")
    cli.chmod(0o755)
    assert harbor_python(str(cli)) == venv_bin / "python"
    assert harbor_python(str(tmp_path / "no-such-harbor")) is None


def test_the_services_generation_settings_end_the_agents_proxy_chain() -> None:
    from nel_assets.engine.solvers.shard_proxy import with_generation
    from nel_resources.config import ServiceConfig

    url = "http://127.0.0.1:9/v1/chat/completions"
    svc = ServiceConfig(type="api", url=url, model="m", generation={"max_tokens": 48, "seed": 7},
                        interceptors=[{"name": "system_message", "config": {"system_message": "hi"}}])
    chain = with_generation(svc).interceptors
    assert [i.name for i in chain] == ["system_message", "payload_modifier"]
    assert chain[-1].config == {"params_to_add": {"max_tokens": 48, "seed": 7}}
    bare = ServiceConfig(type="api", url=url, model="m")
    assert with_generation(bare) is bare  # nothing to set: the service's own chain
