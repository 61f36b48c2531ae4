"""Run one sandboxed child process to its end, a timeout or an output cap, whichever is first.

Output is read incrementally and kept only up to the cap: past it the child is killed (and
what it writes until it dies is read and dropped, so its pipe closes), so a program that
floods stdout costs the cap in memory, never what it wrote.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from nel_resources.sandboxes.base import ExecResult, StopReason
from nel_resources.sandboxes.limits import stop_reason

_CHUNK = 1 << 16
#: After the child is killed its pipes close at once; this bounds the wait if they do not.
_DRAIN_AFTER_KILL_S = 15.0


@dataclass(frozen=True)
class Captured:
    """What one child process did."""

    stdout: bytes
    stderr: bytes
    #: the child's exit status (None if it could not be collected after a kill)
    return_code: int | None
    timed_out: bool = False
    over_cap: bool = False


    def outcome(self) -> tuple[int, StopReason | None]:
        """(exit code, why it was stopped): a timeout or the output cap wins over the code,
        which then reads -1; otherwise the code, and the limit its signal points at."""
        if self.timed_out:
            return -1, "timeout"
        if self.over_cap:
            return -1, "output_limit"
        code = self.return_code if self.return_code is not None else -1
        return code, stop_reason(code, self.stderr)

    def result(self, began: float, code: int, stopped: StopReason | None) -> ExecResult:
        """The sandbox's answer for this child, timed from `began` (time.monotonic)."""
        return ExecResult(self.stdout.decode(errors="replace"), self.stderr.decode(errors="replace"),
                          code, stopped=stopped, truncated=self.over_cap,
                          duration_s=time.monotonic() - began)


class _Capped:
    def __init__(self, limit: int, on_cap: asyncio.Event) -> None:
        self.buf = bytearray()
        self.limit = limit
        self.cut = False
        self._on_cap = on_cap

    async def pump(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(_CHUNK):
            if self.cut:
                continue  # past the cap: drop what comes until the kill closes the pipe
            room = self.limit - len(self.buf)
            if len(chunk) > room:
                self.buf += chunk[:room]
                self.cut = True
                self._on_cap.set()
            else:
                self.buf += chunk


async def _feed(proc: asyncio.subprocess.Process, data: bytes | None) -> None:
    if proc.stdin is None:
        return
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        if data:
            proc.stdin.write(data)
            await proc.stdin.drain()
        proc.stdin.close()


async def capture(proc: asyncio.subprocess.Process, *, stdin: bytes | None, timeout: float,
                  output_limit: int, kill: Callable[[], Awaitable[None]]) -> Captured:
    """Collect `proc`'s output (it must have been started with stdout/stderr pipes).

    `kill` must stop the child and everything it started; it is called on a timeout or
    when stdout or stderr passes `output_limit` bytes.
    """
    assert proc.stdout is not None and proc.stderr is not None
    capped = asyncio.Event()
    out, err = _Capped(output_limit, capped), _Capped(output_limit, capped)
    body = asyncio.ensure_future(asyncio.gather(
        _feed(proc, stdin), out.pump(proc.stdout), err.pump(proc.stderr), proc.wait()))
    cap_wait = asyncio.ensure_future(capped.wait())
    timed_out = False
    try:
        done, _ = await asyncio.wait({body, cap_wait}, timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
        if body not in done:
            timed_out = not capped.is_set()
            await kill()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(body), _DRAIN_AFTER_KILL_S)
    finally:
        cap_wait.cancel()
        if not body.done():
            body.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await body
        elif not body.cancelled():
            body.exception()  # mark retrieved: a closed pipe after a kill is expected
    return Captured(bytes(out.buf), bytes(err.buf), proc.returncode, timed_out=timed_out,
                    over_cap=out.cut or err.cut)
