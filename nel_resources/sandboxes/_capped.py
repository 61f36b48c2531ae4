"""Run one launcher command (`srun`, `apptainer exec`) with a wall-clock timeout and an output cap.

The launcher's own process is not where the program runs (a SLURM step runs under slurmstepd,
an Apptainer container in its own PID namespace), so stopping it is two moves: `stop_remote`
(e.g. `scancel` of the step) kills the program where it runs, then the launcher's process group
is killed here. Output is read as it arrives and kept only up to the cap, so a flood never
fills nel's memory; passing the cap stops the command like a timeout does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Awaitable, Callable, Sequence

from nel_resources.runtime.processes import _restore_default_signals
from nel_resources.sandboxes.base import ExecResult, StopReason

_CHUNK = 1 << 16
#: how long the pipes may stay open after the launcher was killed (a grandchild holding them)
_DRAIN_S = 5.0


class _Capture:
    """One stream, kept up to `limit` bytes; `over` is set when more arrived."""

    def __init__(self, limit: int, over: asyncio.Event) -> None:
        self.buf = bytearray()
        self.limit, self.over, self.truncated = limit, over, False

    async def read(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(_CHUNK):
            room = self.limit - len(self.buf)
            if len(chunk) > room:
                self.buf += chunk[:max(room, 0)]
                self.truncated = True
                self.over.set()
                continue  # keep draining so the writer is not blocked while we stop it
            self.buf += chunk


async def run_capped(argv: Sequence[str], *, timeout_sec: float, output_limit: int,
                     stdin: bytes | None = None, env: dict[str, str] | None = None,
                     cwd: str | None = None,
                     stop_remote: Callable[[], Awaitable[None]] | None = None) -> ExecResult:
    """Run `argv` and return its outcome; never raises for what the program does.

    Raises:
        OSError: the launcher itself could not be started (binary missing).
    """
    t0 = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env, cwd=cwd,
        start_new_session=True, preexec_fn=_restore_default_signals)
    over = asyncio.Event()
    out, err = _Capture(output_limit, over), _Capture(output_limit, over)
    assert proc.stdout is not None and proc.stderr is not None
    readers = [asyncio.ensure_future(out.read(proc.stdout)),
               asyncio.ensure_future(err.read(proc.stderr))]
    if stdin is not None and proc.stdin is not None:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            proc.stdin.write(stdin)
            await proc.stdin.drain()
        proc.stdin.close()
    done_task = asyncio.ensure_future(proc.wait())
    over_task = asyncio.ensure_future(over.wait())
    stopped: StopReason | None = None
    try:
        finished, _ = await asyncio.wait({done_task, over_task}, timeout=timeout_sec,
                                         return_when=asyncio.FIRST_COMPLETED)
        if done_task not in finished:
            stopped = "output_limit" if over.is_set() else "timeout"
            if stop_remote is not None:
                await stop_remote()
            _kill_group(proc.pid)
            await done_task
    finally:
        over_task.cancel()
        if not done_task.done():  # cancelled from outside: leave nothing behind
            _kill_group(proc.pid)
    # The pipes close when every holder exits; a detached grandchild may keep them open.
    _, pending = await asyncio.wait(readers, timeout=_DRAIN_S)
    for r in pending:
        r.cancel()
    return ExecResult(stdout=out.buf.decode("utf-8", "replace"),
                      stderr=err.buf.decode("utf-8", "replace"),
                      return_code=proc.returncode if proc.returncode is not None else -1,
                      stopped=stopped, truncated=out.truncated or err.truncated,
                      duration_s=time.monotonic() - t0)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
