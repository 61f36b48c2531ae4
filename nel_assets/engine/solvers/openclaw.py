"""The `openclaw` solver: the OpenClaw CLI agent works each problem on its own.

Per shard, nel starts its capture proxy in front of the benchmark's model service (the
service's interceptor chain and key, `nel_resources.proxy.run_proxy`). Per sample it makes
a fresh OpenClaw home and workspace (`openclaw_home`), whose config points OpenClaw at the
sample's session on that proxy, and runs

    openclaw agent --agent main --message <prompt> --session-id <id> --json --local

as a child in its own process group. The answer is the text of the run's final message;
the trajectory is the proxy's record of every model call (`captured_steps`) with the tool
details OpenClaw keeps in its transcript (`openclaw_steps`).

A run that outlasts the benchmark's `timeout` (default 600 s, as NeMo Evaluator) has all
its processes killed: category `timeout`. A run that exits non-zero is a
`model_error` when a model call through the proxy failed, else an `agent_error`; stdout
that holds no result is `malformed_output`, a result without text `empty_response`. Each
is the sample's error; the trajectory keeps what was captured up to then.

With `web_search_provider: tavily` the agent has OpenClaw's `web_search` tool, served by the
shard's search relay (`openclaw_search`: the key stays in nel); each sample's searches are
in its `scoring_details` (`web_searches`).

With a `sandbox:` block (`docker`, `ecs_fargate`) the agent runs inside the sample's
sandbox instead, as NeMo Evaluator 0.3.0 runs it: its workspace is the sandbox's workdir,
which the benchmark's grading then reads (`openclaw_sandbox`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.errors import NelError
from nel_assets.engine.solvers import openclaw_steps as oc
from nel_assets.engine.solvers.base import SolveContext, SolveResult
from nel_assets.engine.solvers.openclaw_home import (
    agent_command,
    agent_env,
    make_home,
    read_user_config,
)
from nel_assets.engine.solvers.openclaw_sandbox import (
    PLUGIN_MOUNT,
    SandboxLayout,
    image_layout,
    mounted_layout,
    run_in_sandbox,
)
from nel_assets.engine.solvers.openclaw_search import API_KEY_ENV, SearchRelay
from nel_assets.engine.solvers.shard_proxy import ShardProxy
from nel_resources.model_client import ModelResponse

if TYPE_CHECKING:
    from benchmarks._types import SeedResult
    from nel_resources.config import ServiceConfig
    from nel_resources.sandboxes.base import VolumeMount
    from nel_resources.sandboxes.unix_relay import UnixRelay

__all__ = ["DEFAULT_TIMEOUT", "OpenClawSolver"]

#: Seconds for one agent run when the benchmark's `timeout` does not say (NeMo Evaluator's).
DEFAULT_TIMEOUT = 600.0
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


class OpenClawSolver:
    """Runs each problem as one `openclaw agent --local` turn against nel's capture proxy.

    Args:
        service: the model service under test, with its effective URL (its chain and key
            are the proxy's; the agent never holds the key).
        openclaw_bin: the OpenClaw CLI (a name on PATH or a path).
        thinking: OpenClaw's `--thinking` level ("" for none).
        timeout: seconds for one run, after which all its processes are killed.
        max_concurrent: agent runs at once in a shard (each is a Node process of ~1 GB),
            also OpenClaw's own `maxConcurrent`.
        context_window: the model's context window as OpenClaw is told (None: its default).
        idle_timeout_seconds: how long OpenClaw waits on a silent model call.
        system_prompt: written to the workspace's `AGENTS.md` (OpenClaw puts it in the
            system message of every model call).
        model_id: the model under test as trajectories name it.
        web_search_provider: "tavily" gives the agent web search (key: `TAVILY_API_KEY`).
        config_path: the user's `openclaw.json`, under nel's required settings.
        sandbox_type: the benchmark's sandbox type when the agent runs in its sandbox
            (`docker`: the host's OpenClaw mounted in; `ecs_fargate`: 0.3.0's image).
    """

    def __init__(self, service: ServiceConfig, *, openclaw_bin: str = "openclaw",
                 thinking: str = "high", timeout: float = DEFAULT_TIMEOUT,
                 max_concurrent: int = 4, context_window: int | None = None,
                 idle_timeout_seconds: int = 600, system_prompt: str | None = None,
                 model_id: str = "", web_search_provider: str | None = None,
                 config_path: str | None = None, sandbox_type: str | None = None) -> None:
        self.service = service
        self.openclaw_bin = openclaw_bin
        self.thinking = thinking
        self.timeout = timeout
        self.max_concurrent = max_concurrent
        self.context_window = context_window
        self.idle_timeout_seconds = idle_timeout_seconds
        self.system_prompt = system_prompt
        self.model_id = model_id or str(service.model or "")
        self._slots = asyncio.Semaphore(max_concurrent)
        self._shard = ShardProxy(service, "nel-openclaw-")
        self.web_search_provider = web_search_provider
        self.config_path = config_path
        self._user_config: dict[str, Any] | None = None
        self._search: SearchRelay | None = None
        self.sandbox_type = sandbox_type
        self._layout: SandboxLayout | None = None
        self._relay: UnixRelay | None = None

    @property
    def _root(self) -> Path | None:
        """The shard's scratch directory (the OpenClaw homes live in it)."""
        return self._shard.root

    @property
    def capture_path(self) -> Path:
        """The proxy's record of every model call of the shard (JSONL, `capture.py`)."""
        return self._shard.capture_path

    async def prepare(self) -> None:
        """Check the CLI and start the capture proxy (before any sample runs)."""
        # In an image that brings OpenClaw (ecs_fargate) the host needs no CLI.
        if self.sandbox_type in (None, "docker") and shutil.which(self.openclaw_bin) is None:
            raise NelError(f"the 'openclaw' solver cannot run here: the OpenClaw CLI "
                           f"`{self.openclaw_bin}` is not on PATH (install it with `make "
                           "peers`, or give its path in `solver.openclaw_bin`)")
        if self.config_path:
            try:
                self._user_config = read_user_config(self.config_path)
            except ValueError as exc:
                raise NelError(f"the 'openclaw' solver's {exc}") from None
        if self.web_search_provider and self._search is None:
            relay = SearchRelay.from_env()
            if not os.environ.get(API_KEY_ENV):
                raise NelError(f"web_search_provider: {self.web_search_provider} needs "
                               f"{API_KEY_ENV} set in the environment (the search provider's "
                               "key, as NeMo Evaluator reads it)")
            await relay.start()
            self._search = relay
        await self._shard.start()
        if self.sandbox_type is not None and self._layout is None:
            await self._prepare_sandbox()

    @property
    def sandbox_volumes(self) -> list[VolumeMount]:
        """What every sandbox of the shard must mount for the agent (after `prepare`)."""
        return list(self._layout.volumes) if self._layout is not None else []

    @property
    def sandbox_ports(self) -> tuple[int, ...]:
        """Host ports a sandbox with a network path of its own (`ecs_fargate`) must reach:
        the proxy's and the search relay's (a docker sandbox reaches them by socket)."""
        if self._layout is None or self._layout.bridge is not None:
            return ()
        return tuple(self._ports())

    def _ports(self) -> list[int]:
        from urllib.parse import urlsplit

        urls = [self._shard.session_url("x")]
        if self._search is not None:
            urls.append(self._search.session_url("x"))
        return [int(urlsplit(u).port or 80) for u in urls]

    async def _prepare_sandbox(self) -> None:
        if self.sandbox_type != "docker":
            self._layout = image_layout()
            return
        from nel_assets.engine.solvers.openclaw_tavily import PLUGIN_DIR
        from nel_resources.sandboxes.unix_relay import UnixRelay

        relay = UnixRelay(self._ports())
        socket_dir = await relay.start()
        self._relay = relay
        self._layout = mounted_layout(self.openclaw_bin, socket_dir,
                                      plugin_dir=PLUGIN_DIR if self._search is not None else None)

    async def close_tools(self) -> None:
        """Stop the proxy and the search relay, remove the shard's OpenClaw homes (the
        shard's end)."""
        if self._search is not None:
            await self._search.stop()
            self._search = None
        if self._relay is not None:
            await self._relay.stop()
            self._relay = None
        self._layout = None
        await self._shard.stop()

    async def solve(self, task: SeedResult, ctx: SolveContext | None = None) -> SolveResult:
        """One OpenClaw run on `task`; failures come back as `SolveResult.error` + category."""
        if not self._shard.running:
            await self.prepare()
        assert self._root is not None
        sample = ctx.sample_id if ctx is not None else "0:0"
        name = _SAFE.sub("-", f"nel-{sample}")
        if self._layout is not None and ctx is not None and ctx.sandbox is not None:
            async with self._slots:
                return await self._solve_in_sandbox(task, ctx.sandbox, sample, name)
        async with self._slots:
            home = make_home(self._root / "homes", name, base_url=self._shard.session_url(sample),
                             model=self.service.model or "model",
                             system_prompt=self.system_prompt,
                             context_window=self.context_window,
                             max_concurrent=self.max_concurrent,
                             idle_timeout_seconds=self.idle_timeout_seconds,
                             search_url=(self._search.session_url(name)
                                         if self._search is not None else None),
                             user_config=self._user_config)
            try:
                cmd = agent_command(self.openclaw_bin, task.prompt, name,
                                    thinking=self.thinking, timeout=self.timeout)
                started = time.perf_counter()
                rc, stdout, stderr = await _run(cmd, agent_env(home), home.workspace,
                                                self.timeout)
                latency_ms = (time.perf_counter() - started) * 1000.0
                return self._result(task.prompt, sample, home.state, name, rc, stdout, stderr,
                                    latency_ms)
            finally:
                shutil.rmtree(home.home, ignore_errors=True)

    async def _solve_in_sandbox(self, task: SeedResult, sandbox: Any, sample: str,
                                name: str) -> SolveResult:
        """One run inside the sample's sandbox (`openclaw_sandbox`)."""
        assert self._layout is not None
        from nel_assets.engine.solvers.openclaw_home import merged, openclaw_config

        cfg = openclaw_config(self._shard.session_url(sample), self.service.model or "model",
                              workspace=Path(sandbox.spec.workdir),
                              context_window=self.context_window,
                              max_concurrent=self.max_concurrent,
                              idle_timeout_seconds=self.idle_timeout_seconds,
                              search_url=(self._search.session_url(name)
                                          if self._search is not None else None))
        if self._search is not None:
            cfg["plugins"]["load"]["paths"] = [PLUGIN_MOUNT]
        if self._user_config:
            cfg = merged(self._user_config, cfg)
        argv = agent_command("openclaw", task.prompt, name, thinking=self.thinking,
                             timeout=self.timeout)[1:]
        run = await run_in_sandbox(sandbox, self._layout, cfg, argv, ports=self._ports(),
                                   system_prompt=self.system_prompt, timeout=self.timeout)
        try:
            return self._result(task.prompt, sample, run.state, name, run.rc, run.stdout,
                                run.stderr, run.latency_ms)
        finally:
            shutil.rmtree(run.state, ignore_errors=True)

    def _result(self, prompt: str, sample: str, state: Path, session: str, rc: int | None,
                stdout: str, stderr: str, latency_ms: float) -> SolveResult:
        captured = self._shard.session(sample)
        steps, n_calls = oc.tool_steps(captured.steps(), oc.transcript_tool_results(state, session))
        turns = sum(1 for s in steps if s.get("source") == "agent")
        details: dict[str, Any] = {"tool_calls": n_calls, "agent": "openclaw"}
        if self._search is not None:
            details["web_searches"] = self._search.searches(session)

        def failed(message: str, category: str) -> SolveResult:
            return SolveResult("", error=message, failure_category=category, steps=steps,
                               turns=turns, scoring_details=details)

        if rc is None:
            return failed(f"OpenClaw did not finish within {self.timeout:g}s (its processes "
                          "were killed)", "timeout")
        doc = oc.parse_result(stdout)
        if rc != 0:
            if captured.failed:
                return failed(f"{ShardProxy.describe_failure(captured.failed[-1])}; OpenClaw exited {rc}: "
                              f"{oc.error_text(doc, stderr)}", "model_error")
            return failed(f"OpenClaw exited {rc}: {oc.error_text(doc, stderr)}", "agent_error")
        if doc is None:
            return failed("OpenClaw printed no JSON result (stdout: "
                          f"{stdout.strip()[:200]!r})", "malformed_output")
        text = oc.answer_text(doc)
        if not text:
            return failed("OpenClaw finished without an answer", "empty_response")
        prompt_tokens, completion_tokens = oc.usage(doc)
        if prompt_tokens is None:  # the captured calls' own counts
            metrics = [s.get("metrics") or {} for s in steps if s.get("source") == "agent"]
            prompt_tokens = sum(m.get("prompt_tokens", 0) for m in metrics) if metrics else None
            completion_tokens = (sum(m.get("completion_tokens", 0) for m in metrics)
                                 if metrics else None)
        mr = ModelResponse(content=text, finish_reason="stop", prompt_tokens=prompt_tokens,
                           completion_tokens=completion_tokens, latency_ms=round(latency_ms, 2),
                           model=self.model_id)
        return SolveResult(text, model_response=mr,
                           trajectory=[{"role": "user", "content": prompt},
                                       {"role": "assistant", "content": text}],
                           steps=steps, turns=turns, prompt_tokens=prompt_tokens,
                           completion_tokens=completion_tokens, scoring_details=details)


async def _run(cmd: list[str], env: dict[str, str], cwd: Path, timeout: float
               ) -> tuple[int | None, str, str]:
    """Run `cmd` in its own process group; (exit status or None on timeout, stdout, stderr).

    On timeout (and if the caller is cancelled) every process of the run is killed, and the
    output so far is returned. OpenClaw starts its agent worker in a session of its own, so
    killing the CLI's group is not enough: the run's processes are found by their `HOME`
    (the sample's own directory, which they all inherit) as well as by descent. After a
    normal exit the same sweep ends whatever the agent left running in the background.
    """
    home = env["HOME"]
    proc = await asyncio.create_subprocess_exec(
        *cmd, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=env, cwd=str(cwd), start_new_session=True)
    comm = asyncio.ensure_future(proc.communicate())
    try:
        out, err = await asyncio.wait_for(asyncio.shield(comm), timeout)
        return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    except TimeoutError:
        _kill_run(proc.pid, home)
        try:  # the pipes close once every process that holds them is gone
            out, err = await asyncio.wait_for(comm, 30.0)
        except TimeoutError:
            out, err = b"", b""
        return None, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    finally:
        if proc.returncode is None:
            _kill_run(proc.pid, home)
            with contextlib.suppress(Exception):
                await proc.wait()
        _kill_run(None, home)  # what the agent left behind


def _kill_run(leader: int | None, home: str) -> None:
    """SIGKILL the run's processes: `leader`'s group and descendants, and every process
    whose HOME is the run's."""
    procs = _processes()
    doomed = {pid for pid, (_, env_home) in procs.items() if env_home == home}
    if leader is not None:
        doomed.add(leader)
        children: dict[int, list[int]] = {}
        for pid, (ppid, _) in procs.items():
            children.setdefault(ppid, []).append(pid)
        todo = [leader]
        while todo:  # descendants, before a dying parent hands them to init
            for child in children.get(todo.pop(), []):
                if child not in doomed:
                    doomed.add(child)
                    todo.append(child)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(leader, signal.SIGKILL)
    doomed.discard(os.getpid())
    for pid in doomed:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _processes() -> dict[int, tuple[int, str | None]]:
    """pid -> (parent pid, HOME) of the processes this user can read, from /proc."""
    out: dict[int, tuple[int, str | None]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue  # gone, or not ours
        # `pid (comm) state ppid ...`: comm may hold spaces and parentheses
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        home = next((v[5:].decode("utf-8", "replace") for v in environ.split(b"\0")
                     if v.startswith(b"HOME=")), None)
        out[int(entry.name)] = (ppid, home)
    return out
