"""Runs one Harbor agent on one task, in Harbor's own Python (>= 3.12), for nel's `harbor`
solver (`nel_assets/engine/solvers/harbor_agent.py`).

    <harbor venv>/bin/python -P drive_agent.py JOB.json

This file is not imported by nel: it imports only the standard library and `harbor`. The
agent's environment is nel's sandbox for the sample, reached through the bridge socket the
solver serves (`harbor_bridge.py`): one JSON object a line each way, a request
`{"id", "op": "exec"|"upload"|"download", ...}` and its answer `{"id", ...}` or
`{"id", "error"}`. The agent's model calls go to nel's capture proxy (`api_base`).

`drive_agent.py --check AGENT` prints why Harbor cannot make that agent (exit 3), or Harbor's
version (exit 0).

JOB.json holds: `agent` (a Harbor agent name or `module:Class`), `agent_kwargs`,
`model_name`, `api_base`, `api_key`, `instruction`, `logs_dir`, `socket`, `run_timeout`
(seconds for `agent.run`), `cmd_timeout` (a command's default limit), `env` (variables every
command gets). It writes `<logs_dir>/result.json`: `{"timed_out", "error", "error_type",
"phase", "context"}` (the AgentContext), and exits 0 unless the job itself was unreadable.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import shlex
import sys
import tarfile
import tempfile
import traceback
from pathlib import Path
from typing import Any


class BridgeClient:
    """The solver's sandbox, over its Unix socket (requests may overlap)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        reader, self._writer = await asyncio.open_unix_connection(self._path, limit=1 << 26)
        self._reader_task = asyncio.create_task(self._read(reader))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        while line := await reader.readline():
            msg = json.loads(line)
            fut = self._pending.pop(int(msg["id"]), None)
            if fut is not None and not fut.done():
                fut.set_result(msg)
        for fut in self._pending.values():  # the solver went away
            if not fut.done():
                fut.set_exception(RuntimeError("nel's sandbox bridge closed"))

    async def call(self, op: str, **args: Any) -> dict[str, Any]:
        assert self._writer is not None
        rid = next(self._ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        self._writer.write(json.dumps({"id": rid, "op": op, **args}).encode() + b"\n")
        await self._writer.drain()
        msg = await fut
        if msg.get("error"):
            raise RuntimeError(f"nel sandbox {op}: {msg['error']}")
        return msg

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._reader_task is not None:
            self._reader_task.cancel()


def make_environment(bridge: BridgeClient, logs_dir: Path, *, cmd_timeout: float,
                     env: dict[str, str]) -> Any:
    """A Harbor environment whose commands and files go to nel's sandbox.

    It is duck-typed to what agents use of `BaseEnvironment` (exec, file moves, is_dir /
    is_file, trial_paths, default_user): nel, not Harbor, owns the container's life, so
    start/stop do nothing and BaseEnvironment's own constructor (which validates a task's
    environment definition and resources) is not run.
    """
    from harbor.environments.base import ExecResult
    from harbor.models.task.config import EnvironmentConfig
    from harbor.models.trial.paths import TrialPaths

    env_all = dict(env)

    class NelSandboxEnvironment:
        def __init__(self) -> None:
            self.session_id = logs_dir.name
            self.environment_name = "nel-sandbox"
            self.trial_paths = TrialPaths(trial_dir=logs_dir)
            self.trial_paths.mkdir()
            self.task_env_config = EnvironmentConfig()
            self.default_user: str | int | None = None
            self.logger = __import__("logging").getLogger("nel.harbor.environment")

        is_mounted = False
        supports_gpus = False
        can_disable_internet = False

        @staticmethod
        def type() -> str:
            return "nel-sandbox"

        async def start(self, force_build: bool = False) -> None:
            return None

        async def stop(self, delete: bool = True) -> None:
            return None

        async def exec(self, command: str, cwd: str | None = None,
                       env: dict[str, str] | None = None, timeout_sec: float | None = None,
                       user: str | int | None = None, **_: Any) -> Any:
            # `user`: commands run as the sandbox's own user (nel's sandbox has one).
            merged = {**env_all, **(env or {})}
            r = await bridge.call("exec", command=command, cwd=cwd, env=merged or None,
                                  timeout_sec=float(timeout_sec or cmd_timeout))
            return ExecResult(stdout=r.get("stdout") or None, stderr=r.get("stderr") or None,
                              return_code=int(r["return_code"]))

        async def is_dir(self, path: str, user: str | int | None = None) -> bool:
            return (await self.exec(f"test -d {shlex.quote(path)}", timeout_sec=30)).return_code == 0

        async def is_file(self, path: str, user: str | int | None = None) -> bool:
            return (await self.exec(f"test -f {shlex.quote(path)}", timeout_sec=30)).return_code == 0

        async def upload_file(self, source_path: Path | str, target_path: str) -> None:
            parent = str(Path(target_path).parent)
            await self.exec(f"mkdir -p {shlex.quote(parent)}", timeout_sec=30)
            await bridge.call("upload", src=str(Path(source_path).resolve()), dst=target_path)

        async def download_file(self, source_path: str, target_path: Path | str) -> None:
            Path(target_path).parent.mkdir(parents=True, exist_ok=True)
            await bridge.call("download", src=source_path, dst=str(Path(target_path).resolve()))

        async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w:gz") as tar:
                for child in sorted(Path(source_dir).iterdir()):
                    tar.add(str(child), arcname=child.name)
            with tempfile.NamedTemporaryFile(suffix=".tar.gz", delete=False) as f:
                f.write(buf.getvalue())
            remote = f"/tmp/.nel-upload-{Path(f.name).stem}.tar.gz"
            try:
                await bridge.call("upload", src=f.name, dst=remote)
                q = shlex.quote(target_dir)
                r = await self.exec(f"mkdir -p {q} && tar xzf {remote} -C {q}; rc=$?; "
                                    f"rm -f {remote}; exit $rc", timeout_sec=300)
                if r.return_code != 0:
                    raise RuntimeError(f"upload_dir {target_dir}: {r.stderr or r.stdout}")
            finally:
                Path(f.name).unlink(missing_ok=True)

        async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
            dst = Path(target_dir)
            dst.mkdir(parents=True, exist_ok=True)
            remote = f"/tmp/.nel-download-{dst.name or 'dir'}.tar.gz"
            r = await self.exec(f"tar czf {remote} -C {shlex.quote(source_dir)} .", timeout_sec=300)
            if r.return_code != 0:
                raise RuntimeError(f"download_dir {source_dir}: {r.stderr or r.stdout}")
            with tempfile.TemporaryDirectory() as tmp:
                local = Path(tmp) / "dir.tar.gz"
                await bridge.call("download", src=remote, dst=str(local))
                with tarfile.open(local, "r:gz") as tar:
                    tar.extractall(dst, filter="data")
            await self.exec(f"rm -f {remote}", timeout_sec=30)

    return NelSandboxEnvironment()


def create_agent(job: dict[str, Any], logs_dir: Path) -> Any:
    """The Harbor agent the job names (a registered name, or `module:Class`)."""
    from harbor.agents.factory import AgentFactory

    kwargs = dict(job.get("agent_kwargs") or {})
    kwargs.setdefault("api_base", job["api_base"])
    kwargs.setdefault("model_info", {"max_input_tokens": 262144, "max_output_tokens": 262144,
                                     "input_cost_per_token": 0.0, "output_cost_per_token": 0.0})
    llm_kwargs = kwargs.setdefault("llm_kwargs", {})
    if isinstance(llm_kwargs, dict):
        llm_kwargs.setdefault("api_key", job["api_key"])
    name = str(job["agent"])
    if ":" in name:
        return AgentFactory.create_agent_from_import_path(
            name, logs_dir=logs_dir, model_name=job["model_name"], **kwargs)
    return AgentFactory.create_agent_from_name(name, logs_dir=logs_dir,
                                               model_name=job["model_name"], **kwargs)


async def drive(job: dict[str, Any]) -> dict[str, Any]:
    """Set the agent up in the sandbox and run it on the instruction, within `run_timeout`."""
    from harbor.models.agent.context import AgentContext

    logs_dir = Path(job["logs_dir"])
    agent_dir = logs_dir / "agent"
    agent_dir.mkdir(parents=True, exist_ok=True)
    bridge = BridgeClient(job["socket"])
    await bridge.connect()
    context = AgentContext()
    out: dict[str, Any] = {"timed_out": False, "error": None, "error_type": None,
                           "phase": "setup"}
    try:
        env = make_environment(bridge, logs_dir, cmd_timeout=float(job["cmd_timeout"]),
                               env=dict(job.get("env") or {}))
        agent = create_agent(job, agent_dir)
        out["agent_version"] = getattr(agent, "version", lambda: None)()
        await agent.setup(env)
        out["phase"] = "run"
        try:
            async with asyncio.timeout(float(job["run_timeout"])):
                await agent.run(job["instruction"], env, context)
            out["phase"] = "done"
        except TimeoutError:
            out["timed_out"] = True
    except Exception as exc:  # the agent's own failure: reported, not raised
        out["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        out["error_type"] = type(exc).__name__
        out["traceback"] = traceback.format_exc()[-4000:]
    finally:
        await bridge.close()
    out["context"] = context.model_dump(mode="json", exclude={"rollout_details"})
    return out


def check_agent(name: str) -> str | None:
    """Why Harbor cannot make agent `name` (None: it can), without running it."""
    if ":" in name:
        import importlib

        module, _, cls = name.partition(":")
        try:
            getattr(importlib.import_module(module), cls)
        except (ImportError, AttributeError) as exc:
            return f"cannot import the agent {name!r} in Harbor's venv: {exc}"
        return None
    from harbor.models.agent.name import AgentName

    known = [a.value for a in AgentName]
    if name not in known:
        return f"Harbor {_harbor_version()} has no agent {name!r} (it has: {', '.join(known)})"
    return None


def _harbor_version() -> str:
    from importlib.metadata import version

    return version("harbor")


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[1] == "--check":
        why = check_agent(argv[2])
        print(why or f"harbor {_harbor_version()}")
        return 3 if why else 0
    if len(argv) != 2:
        print("usage: drive_agent.py JOB.json | --check AGENT", file=sys.stderr)
        return 2
    job = json.loads(Path(argv[1]).read_text())
    result = asyncio.run(drive(job))
    path = Path(job["logs_dir"]) / "result.json"
    path.write_text(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
