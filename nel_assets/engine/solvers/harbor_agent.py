"""The `harbor` solver: a Harbor agent (terminus-2, or any agent Harbor knows) works each
problem in the sample's sandbox, its model calls through nel's capture proxy.

Harbor is published for Python >= 3.12 and nel runs on 3.11, so the agent runs in Harbor's
own venv (`make peers` installs `harbor==0.24.0`; the solver finds it as `harbor_bin` on
PATH, default `harbor`). Per shard the solver starts the capture proxy in front of the model
service (its interceptor chain and key: the agent never holds the key). Per sample it serves
the sample's sandbox on a Unix socket (`harbor_bridge`) and runs

    <harbor venv>/bin/python -P harbor_runtime/drive_agent.py JOB.json

which builds the agent with Harbor's AgentFactory (model `openai/<model>` at the sample's
session URL on the proxy), runs `agent.setup()` and `agent.run(instruction)` against a
Harbor environment backed by that socket, and writes the agent's context. The task's own
verifier then runs in the same sandbox, as for `tool_calling`.

The agent's time limit follows NeMo Evaluator 0.3.0's `timeout_strategy`: `override` (the
default) uses `run_timeout`, else the benchmark's `timeout`, else 1800 s; `task` the task's
`[agent] timeout_sec`; `max` the larger; `max_agent_timeout` caps it. As in Harbor, an agent
stopped by its time limit is no error: the sandbox is verified as the agent left it.

The trajectory is the agent's own ATIF file (`trajectory.json`, which Harbor agents write)
when there is one, else the proxy's record of the model calls; every sandbox command the
agent ran is counted with its latency in the scoring details, and so are its model calls
(and how many of them failed) as the proxy saw them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.errors import NelError
from nel_assets.engine.solvers.base import SolveContext, SolveResult
from nel_assets.engine.solvers.harbor_bridge import SandboxBridge
from nel_assets.engine.solvers.shard_proxy import ShardProxy
from nel_resources.model_client import ModelResponse
from nel_resources.runtime.harbor_install import harbor_python

if TYPE_CHECKING:
    from benchmarks._types import SeedResult
    from nel_resources.config import ServiceConfig

__all__ = ["DEFAULT_RUN_TIMEOUT", "HarborSolver", "resolve_agent_timeout"]

#: Seconds for one agent run when nothing else says (NeMo Evaluator 0.3.0's default).
DEFAULT_RUN_TIMEOUT = 1800.0
#: Seconds beyond the agent's time limit before nel kills a driver that did not stop itself
#: (its setup, and writing its result, happen outside the limit).
_SETUP_ALLOWANCE = 300.0
_DRIVER = Path(__file__).parent / "harbor_runtime" / "drive_agent.py"
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")
# Keep LiteLLM (inside Harbor's agents) from fetching its model price list or sending
# telemetry: nel's traffic goes to the model service only.
_QUIET_ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False",
              "LITELLM_LOG": "ERROR", "HARBOR_TELEMETRY": "0", "DO_NOT_TRACK": "1"}


def resolve_agent_timeout(strategy: str, config_timeout: float, task_timeout: float | None,
                          cap: float | None) -> float:
    """The agent's time limit (NeMo Evaluator 0.3.0's `timeout_strategy`)."""
    if strategy == "task" and task_timeout is not None:
        limit = task_timeout
    elif strategy == "max" and task_timeout is not None:
        limit = max(config_timeout, task_timeout)
    else:
        limit = config_timeout
    return min(limit, cap) if cap is not None else limit


class HarborSolver:
    """Runs a Harbor agent on each problem, in the sample's sandbox, through nel's proxy.

    Args:
        service: the model service under test, with its effective URL.
        agent: a Harbor agent name (`terminus-2`, ...) or `module:Class`.
        agent_kwargs: passed to the agent's constructor (Harbor's `--agent-kwarg`).
        container_env: variables every command of the agent gets in the sandbox.
        run_timeout: `solver.run_timeout` (None: the benchmark's timeout, else 1800 s).
        cmd_timeout: a sandbox command's limit when the agent gives none (default 600 s).
        timeout_strategy: `override`, `task` or `max` (see the module docstring).
        max_agent_timeout: a cap on the agent's time limit.
        skill: a skill name: `skill_dir`'s files go to `/skills/<skill>/` and the
            instruction asks the agent to read its SKILL.md first.
        skill_dir: the skill's local directory.
        harbor_bin: Harbor's CLI, whose venv's Python runs the agent.
        model_id: the model under test as trajectories name it.
    """

    def __init__(self, service: ServiceConfig, *, agent: str,
                 agent_kwargs: dict[str, Any] | None = None,
                 container_env: dict[str, str] | None = None, run_timeout: float | None = None,
                 cmd_timeout: float | None = None, timeout_strategy: str = "override",
                 max_agent_timeout: float | None = None, skill: str | None = None,
                 skill_dir: str | None = None, harbor_bin: str = "harbor",
                 model_id: str = "") -> None:
        self.service = service
        self.agent = agent
        self.agent_kwargs = dict(agent_kwargs or {})
        if agent in ("terminus-2", "terminus"):
            # No asciinema in most task images, and nothing can be installed offline.
            self.agent_kwargs.setdefault("record_terminal_session", False)
        self.container_env = dict(container_env or {})
        self.run_timeout = run_timeout or DEFAULT_RUN_TIMEOUT
        self.cmd_timeout = cmd_timeout or 600.0
        self.timeout_strategy = timeout_strategy
        self.max_agent_timeout = max_agent_timeout
        self.skill = skill
        self.skill_dir = Path(skill_dir) if skill_dir else None
        self.harbor_bin = harbor_bin
        self.model_id = model_id or str(service.model or "")
        self._python: Path | None = None
        #: Harbor's version, once `prepare()` has checked the agent.
        self.harbor_version: str | None = None
        # A short prefix: the samples' bridge sockets live in this directory.
        self._shard = ShardProxy(service, "nel-hb-")

    @property
    def capture_path(self) -> Path:
        """The proxy's record of every model call of the shard (JSONL, `capture.py`)."""
        return self._shard.capture_path

    async def prepare(self) -> None:
        """Find Harbor's Python and start the capture proxy (before any sample runs)."""
        self._python = harbor_python(self.harbor_bin)
        if self._python is None:
            raise NelError(f"the 'harbor' solver cannot run here: Harbor's CLI "
                           f"`{self.harbor_bin}` is not on PATH (install it with `make peers` "
                           "and put `.venv-peers/harbor/bin` on PATH, or give its path in "
                           "`solver.harbor_bin`)")
        if self._shard.running:
            return
        rc, said = await _check_agent(self._python, self.agent)
        if rc != 0:
            raise NelError(f"the 'harbor' solver cannot run agent {self.agent!r}: {said}")
        self.harbor_version = said.removeprefix("harbor ")
        await self._shard.start()

    async def close_tools(self) -> None:
        """Stop the proxy and remove the shard's agent logs (the shard's end)."""
        await self._shard.stop()

    def time_limit(self, task: SeedResult) -> float:
        """The agent's time limit for `task` (`timeout_strategy`)."""
        from nel_assets.engine.solvers.tool_calling import agent_timeout

        return resolve_agent_timeout(self.timeout_strategy, self.run_timeout,
                                     agent_timeout(task), self.max_agent_timeout)

    async def solve(self, task: SeedResult, ctx: SolveContext | None = None) -> SolveResult:
        """One agent run on `task`; failures come back as `SolveResult.error` + category."""
        if ctx is None or ctx.sandbox is None:
            return SolveResult("", error="the 'harbor' solver needs a sandbox on the benchmark",
                               failure_category="config_error")
        if not self._shard.running:
            await self.prepare()
        assert self._shard.root is not None and self._python is not None
        sample = ctx.sample_id
        run_dir = Path(tempfile.mkdtemp(prefix=_SAFE.sub("-", f"{sample}-")[:40], dir=self._shard.root))
        bridge = SandboxBridge(ctx.sandbox, run_dir / "s.sock")
        limit = self.time_limit(task)
        try:
            await ctx.sandbox.exec("mkdir -p /logs/agent /logs/verifier /logs/artifacts", 30)
            instruction = await self._with_skill(ctx.sandbox, task.prompt)
            job = {"agent": self.agent, "agent_kwargs": self.agent_kwargs,
                   "model_name": f"openai/{self.service.model or 'model'}",
                   "api_base": self._shard.session_url(sample), "api_key": "nel-proxy",
                   "instruction": instruction, "logs_dir": str(run_dir), "socket": str(bridge.path),
                   "run_timeout": limit, "cmd_timeout": self.cmd_timeout,
                   "env": self.container_env}
            (run_dir / "job.json").write_text(json.dumps(job))
            await bridge.start()
            started = time.perf_counter()
            rc, stderr = await _run_driver(
                [str(self._python), "-P", str(_DRIVER), str(run_dir / "job.json")],
                limit + _SETUP_ALLOWANCE)
            latency_ms = (time.perf_counter() - started) * 1000.0
            return self._result(sample, run_dir, bridge, rc, stderr, limit, latency_ms)
        finally:
            await bridge.close()
            shutil.rmtree(run_dir, ignore_errors=True)

    async def _with_skill(self, sandbox: Any, prompt: str) -> str:
        """Upload the skill's files and point the instruction at them (NeMo Evaluator's
        `skill` / `skill_dir`)."""
        if not self.skill:
            return prompt
        dest = f"/skills/{self.skill}"
        await sandbox.exec(f"mkdir -p {shlex.quote(dest)}", 30)
        if self.skill_dir is not None:
            for f in sorted(p for p in self.skill_dir.rglob("*") if p.is_file()):
                rel = f.relative_to(self.skill_dir)
                await sandbox.exec(f"mkdir -p {shlex.quote(str(Path(dest) / rel.parent))}", 30)
                await sandbox.upload(f, f"{dest}/{rel}")
        return (f"Before working on this task, read the skill guidance at `{dest}/SKILL.md` "
                f"and apply it throughout your work.\n\n{prompt}")

    def _result(self, sample: str, run_dir: Path, bridge: SandboxBridge, rc: int | None,
                stderr: str, limit: float, latency_ms: float) -> SolveResult:
        captured = self._shard.session(sample)
        steps = _agent_steps(run_dir / "agent") or captured.steps()
        turns = sum(1 for s in steps if s.get("source") == "agent")
        execs = [c for c in bridge.calls if c.op == "exec"]
        details: dict[str, Any] = {
            "agent": self.agent, "sandbox_commands": len(execs),
            "sandbox_command_ms": round(sum(c.latency_ms for c in execs), 1),
            "model_calls": len(captured.records), "model_calls_failed": len(captured.failed)}
        try:
            out = json.loads((run_dir / "result.json").read_text())
        except (OSError, ValueError):
            out = None

        def failed(message: str, category: str) -> SolveResult:
            return SolveResult("", error=message, failure_category=category, steps=steps,
                               turns=turns, scoring_details=details)

        if rc is None:
            return failed(f"the Harbor agent's driver did not stop within {limit:g}s + "
                          f"{_SETUP_ALLOWANCE:g}s (it was killed)", "timeout")
        if out is None:
            return failed(f"the Harbor agent's driver exited {rc} without a result: "
                          f"{stderr.strip()[-400:]}", "agent_error")
        if out.get("agent_version"):
            details["agent_version"] = out["agent_version"]
        if self.harbor_version:
            details["harbor_version"] = self.harbor_version
        context = out.get("context") or {}
        prompt_tokens, completion_tokens = context.get("n_input_tokens"), context.get("n_output_tokens")
        if out.get("error"):
            if captured.failed:
                return failed(f"{ShardProxy.describe_failure(captured.failed[-1])}; the agent stopped in "
                              f"{out.get('phase')}: {out['error']}", "model_error")
            return failed(f"the Harbor agent failed in {out.get('phase')}: {out['error']}",
                          "agent_error")
        text = _last_message(steps)
        if out.get("timed_out"):
            details.update({"agent_timed_out": True, "agent_timeout_s": limit})
            steps.append({"step_id": len(steps) + 1, "source": "system",
                          "message": f"agent timeout: the agent was stopped after {limit:g}s",
                          "extra": {"agent_timed_out": True}})
        mr = ModelResponse(content=text, finish_reason="stop", prompt_tokens=prompt_tokens,
                           completion_tokens=completion_tokens, latency_ms=round(latency_ms, 2),
                           model=self.model_id)
        return SolveResult(text, model_response=mr, steps=steps, turns=turns,
                           prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                           scoring_details=details)


async def _check_agent(python: Path, agent: str) -> tuple[int, str]:
    """(exit status, last line) of the driver's `--check AGENT`."""
    proc = await asyncio.create_subprocess_exec(
        str(python), "-P", str(_DRIVER), "--check", agent, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=_driver_env(), start_new_session=True)
    out, err = await proc.communicate()
    lines = (out.decode("utf-8", "replace").strip() or err.decode("utf-8", "replace").strip()
             ).splitlines()
    return int(proc.returncode or 0), (lines[-1] if lines else f"exit {proc.returncode}")


def _driver_env() -> dict[str, str]:
    """This process's environment without Python's variables (the driver runs another
    Python), with LiteLLM and Harbor kept quiet."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(_QUIET_ENV)
    return env


def _agent_steps(agent_dir: Path) -> list[dict[str, Any]]:
    """The steps of the agent's ATIF trajectory file(s), in order (a continued trajectory
    is written as trajectory.cont-1.json, ... after trajectory.json)."""
    files = sorted(agent_dir.glob("trajectory*.json"),
                   key=lambda p: (p.name != "trajectory.json", p.name))
    steps: list[dict[str, Any]] = []
    for f in files:
        with contextlib.suppress(OSError, ValueError):
            doc = json.loads(f.read_text())
            steps.extend(s for s in doc.get("steps") or [] if isinstance(s, dict))
    for i, st in enumerate(steps, start=1):
        st["step_id"] = i
    return steps


def _last_message(steps: list[dict[str, Any]]) -> str:
    for st in reversed(steps):
        if st.get("source") == "agent" and isinstance(st.get("message"), str) and st["message"]:
            return st["message"]
    return ""


async def _run_driver(cmd: list[str], timeout: float) -> tuple[int | None, str]:
    """Run the driver in its own process group: (exit status, or None when it was killed
    at `timeout`; its stderr)."""
    proc = await asyncio.create_subprocess_exec(
        *cmd, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE, env=_driver_env(), start_new_session=True)
    comm = asyncio.ensure_future(proc.communicate())
    try:
        _, err = await asyncio.wait_for(asyncio.shield(comm), timeout)
        return proc.returncode, err.decode("utf-8", "replace")[-8000:]
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(comm, 30.0)
        return None, ""
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                await proc.wait()

