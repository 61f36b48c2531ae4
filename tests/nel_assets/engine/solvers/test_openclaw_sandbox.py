"""OpenClaw through the `ecs_fargate` sandbox's exec path (`openclaw_sandbox.run_in_sandbox`).

What moto cannot give is a running Fargate task and its SSH tunnel; past the tunnel an
`ecs_fargate` sandbox is its `ExecClient` talking to nel's exec server, which the task's main
container runs. Here that exec server is a real local process and the `EcsFargateSandbox` is
the product's, connected to it: the real OpenClaw CLI (`make peers`) gets its config
uploaded, runs 0.3.0's agent command through `/exec` against a scripted model server, its
tool writes into the sandbox's workdir, its transcript database comes back by `/download`,
and its home is removed. The layout for OpenClaw's image is 0.3.0's own.
"""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nel_assets.engine.solvers import openclaw_steps as oc
from nel_assets.engine.solvers.openclaw_home import agent_command, openclaw_config
from nel_assets.engine.solvers.openclaw_sandbox import (
    SandboxLayout,
    host_install,
    image_layout,
    run_in_sandbox,
)
from nel_resources.reference_server import start_reference_server
from nel_resources.runtime.processes import ManagedProcess
from nel_resources.sandboxes import exec_server
from nel_resources.sandboxes.base import SandboxSpec
from nel_resources.sandboxes.ecs_fargate import EcsFargateSandbox, ExecClient
from tests.support.agents import openclaw_bin
from tests.support.moto_server import port_from_log
from tests.support.realcomponents import REPO_ROOT

PEER_SOLVER = (REPO_ROOT / ".venv-peers" / "nemo-evaluator" / "lib" / "python3.12" /
               "site-packages" / "nemo_evaluator" / "solvers")


def test_the_image_layout_is_nemo_evaluators() -> None:
    """`node /app/openclaw.mjs`, config under `/home/node/.openclaw` (0.3.0's constants)."""
    if not PEER_SOLVER.is_dir():
        pytest.skip("NeMo Evaluator 0.3.0 is not installed (make peers)")
    src = (PEER_SOLVER / "openclaw.py").read_text() + (PEER_SOLVER / "openclaw_helpers.py").read_text()
    layout = image_layout()
    assert re.search(rf'_OPENCLAW_BIN = "{re.escape(layout.entry)}"', src)
    assert re.search(rf'_OPENCLAW_CONFIG_DIR = "{re.escape(layout.home)}/.openclaw"', src)
    assert 'f"node {_OPENCLAW_BIN} agent"' in src and layout.node == "node"


def test_an_openclaw_bin_that_cannot_be_mounted_is_one_line(tmp_path: Path) -> None:
    from benchmarks.errors import NelError

    other = tmp_path / "openclaw"
    other.write_text("#!/bin/sh\necho not openclaw\n")
    other.chmod(0o755)
    with pytest.raises(NelError) as exc:
        host_install(str(other))
    msg = str(exc.value)
    assert "\n" not in msg and f"`{other}` is neither" in msg and "solver.openclaw_bin" in msg
    with pytest.raises(NelError, match="is not on PATH"):
        host_install(str(tmp_path / "missing"))


@pytest.fixture(scope="module")
def exec_port() -> Iterator[int]:
    proc = ManagedProcess([sys.executable, exec_server.__file__], name="exec-server",
                          env={"NEL_EXEC_PORT": "0", "NEL_EXEC_BIND": "127.0.0.1"}).start()
    try:
        yield port_from_log(proc, r"listening (\d+)")
    finally:
        proc.stop()


def test_openclaw_runs_through_the_ecs_exec_path(exec_port: int, tmp_path: Path) -> None:
    node_root, modules = host_install(str(openclaw_bin()))
    layout = SandboxLayout(node=str(node_root / "bin" / "node"),
                           entry=str(modules / "openclaw" / "openclaw.mjs"),
                           home=str(tmp_path / "home"))
    work = tmp_path / "workspace"
    work.mkdir()
    script = [{"match": "Task", "turns": [
        {"tool_calls": [{"name": "exec", "arguments": {"command": "printf hello > greeting.txt"}}]},
        {"content": "Wrote greeting.txt."}]}]
    server, url = start_reference_server(tool_script=script, match_conversation=True)

    async def go() -> None:
        sandbox = EcsFargateSandbox(SandboxSpec(workdir=str(work)), control=None)  # type: ignore[arg-type]
        sandbox._client = ExecClient(exec_port)  # past the tunnel: the task's exec server
        cfg = openclaw_config(url, "ref", workspace=work, context_window=None,
                              max_concurrent=1, idle_timeout_seconds=60)
        argv = agent_command("openclaw", "Task: write hello", "nel-s1", thinking="off",
                             timeout=240)[1:]
        try:
            run = await run_in_sandbox(sandbox, layout, cfg, argv, ports=[],
                                       system_prompt="Be brief.", timeout=240)
        finally:
            await sandbox._client.close()
        try:
            assert run.rc == 0, run.stderr[-2000:]
            doc = oc.parse_result(run.stdout)
            assert doc is not None and oc.answer_text(doc) == "Wrote greeting.txt."
            assert (work / "greeting.txt").read_text() == "hello"
            assert (work / "AGENTS.md").read_text() == "Be brief.\n"
            tools = oc.transcript_tool_results(run.state, "nel-s1")
            assert [t["tool_name"] for t in tools] == ["exec"] and tools[0]["exit_code"] == 0
            assert not Path(layout.home).exists()  # the run's home is gone
        finally:
            import shutil

            shutil.rmtree(run.state, ignore_errors=True)
    try:
        asyncio.run(go())
    finally:
        server.stop()
