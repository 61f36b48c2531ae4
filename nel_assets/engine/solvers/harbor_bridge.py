"""The sample's sandbox, served to a Harbor agent running in another Python.

Harbor needs Python >= 3.12 and runs in a venv of its own (`make peers`), so the `harbor`
solver cannot hand the agent nel's sandbox object. It serves the sandbox on a Unix socket
instead; the agent's driver (`harbor_runtime/drive_agent.py`) turns Harbor's environment
calls into requests, one JSON object a line each way:

- `{"id", "op": "exec", "command", "cwd", "env", "timeout_sec"}` -> `{"id", "stdout",
  "stderr", "return_code", "stopped"}`
- `{"id", "op": "upload", "src": <host path>, "dst": <sandbox path>}` -> `{"id"}`
- `{"id", "op": "download", "src": <sandbox path>, "dst": <host path>}` -> `{"id"}`

Any failure is `{"id", "error": "<text>"}`. Requests are served concurrently (an agent may
poll its terminal while a command runs). Every command is recorded with its latency for the
sample's trajectory (`calls`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["SandboxBridge"]


@dataclass(slots=True)
class BridgeCall:
    """One request the agent made of the sandbox."""

    op: str
    target: str
    return_code: int | None
    latency_ms: float
    error: str | None = None


@dataclass
class SandboxBridge:
    """Serves `sandbox` on the Unix socket `path` until `close()`."""

    sandbox: Any
    path: Path
    calls: list[BridgeCall] = field(default_factory=list)
    _server: asyncio.AbstractServer | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.path),
                                                       limit=1 << 26)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None
        for task in list(self._tasks):
            task.cancel()
        self.path.unlink(missing_ok=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        lock = asyncio.Lock()
        try:
            while line := await reader.readline():
                task = asyncio.create_task(self._answer(line, writer, lock))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass  # the driver went away; its result file says why
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _answer(self, line: bytes, writer: asyncio.StreamWriter, lock: asyncio.Lock) -> None:
        rid: Any = None
        started = time.perf_counter()
        op, target = "?", ""
        try:
            req = json.loads(line)
            rid, op = req.get("id"), str(req.get("op"))
            reply, target, rc = await self._do(op, req)
            self.calls.append(BridgeCall(op, target, rc, (time.perf_counter() - started) * 1e3))
        except Exception as exc:  # the agent sees the failure as its call's error
            reply = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
            self.calls.append(BridgeCall(op, target, None, (time.perf_counter() - started) * 1e3,
                                         reply["error"]))
        data = json.dumps({"id": rid, **reply}).encode() + b"\n"
        async with lock:
            writer.write(data)
            with contextlib.suppress(ConnectionError):
                await writer.drain()

    async def _do(self, op: str, req: dict[str, Any]) -> tuple[dict[str, Any], str, int | None]:
        if op == "exec":
            command = str(req["command"])
            res = await self.sandbox.exec(command, float(req.get("timeout_sec") or 600),
                                          cwd=req.get("cwd"), env=req.get("env"))
            return ({"stdout": res.stdout, "stderr": res.stderr, "return_code": res.return_code,
                     "stopped": res.stopped}, command, res.return_code)
        if op == "upload":
            await self.sandbox.upload(Path(req["src"]), str(req["dst"]))
            return {}, str(req["dst"]), None
        if op == "download":
            await self.sandbox.download(str(req["src"]), Path(req["dst"]))
            return {}, str(req["src"]), None
        raise ValueError(f"unknown op {op!r} (exec, upload, download)")
