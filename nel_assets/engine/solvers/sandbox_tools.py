"""`sandbox_tools: true`: `bash`, `file_read`, `file_write` and `str_replace_editor` run in
the sample's sandbox.

The tool names and parameters are NeMo Evaluator 0.3.0's (its `SandboxToolBackend`), so a
model prompted for one sees the same tools in the other. Commands run through the sandbox
interface (`Sandbox.exec`); files move with `upload` / `download`, never through a shell
command line, so content needs no quoting. Each sample's `bash` keeps its working directory
between calls (a `cd` sticks), as a terminal would.

One difference from 0.3.0 on purpose: 0.3.0 appends `; echo <cwd marker>` to the command,
so its exit code is always the echo's 0 and a failing command looks like a success. Here
the command's own exit status is kept and recorded.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path, PurePosixPath
from typing import Any

from nel_assets.engine.solvers.base import SolveContext, ToolOutcome

#: Output a command may write before the sandbox stops it (the model sees a capped view).
EXEC_OUTPUT_LIMIT = 1 << 20
_CWD_MARK = "__NEL_TOOL_CWD__="

_STR = {"type": "string"}
TOOL_SPECS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "bash",
        "description": "Run a shell command in the sandbox and return its output and exit code.",
        "parameters": {"type": "object", "properties": {
            "command": {**_STR, "description": "The command line to run."}},
            "required": ["command"]}}},
    {"type": "function", "function": {
        "name": "file_read",
        "description": "Return the contents of a file in the sandbox.",
        "parameters": {"type": "object", "properties": {
            "path": {**_STR, "description": "Path of the file (absolute, or relative to the workdir)."}},
            "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "file_write",
        "description": "Create or overwrite a file in the sandbox with the given content.",
        "parameters": {"type": "object", "properties": {
            "path": {**_STR, "description": "Path of the file (absolute, or relative to the workdir)."},
            "content": {**_STR, "description": "The whole new content of the file."}},
            "required": ["path", "content"]}}},
    {"type": "function", "function": {
        "name": "str_replace_editor",
        "description": ("Edit a file: `view` shows it with line numbers (optionally a "
                        "[start, end] range), `create` writes `new_str` as a new file, "
                        "`str_replace` replaces the one occurrence of `old_str` by `new_str`."),
        "parameters": {"type": "object", "properties": {
            "command": {**_STR, "enum": ["view", "create", "str_replace"],
                        "description": "What to do."},
            "path": {**_STR, "description": "Path of the file."},
            "old_str": {**_STR, "description": "Text to replace; must occur exactly once."},
            "new_str": {**_STR, "description": "Replacement text, or the new file's content."},
            "view_range": {"type": "array", "items": {"type": "integer"},
                           "description": "[first line, last line] to show (1-based)."}},
            "required": ["command", "path"]}}},
]
TOOL_NAMES = frozenset(t["function"]["name"] for t in TOOL_SPECS)


class _ToolFailed(Exception):
    """A tool call the model got wrong (missing argument, no such file): it sees the text."""


class SandboxTools:
    """The sandbox tool source (a `ToolSource`) for every sample of a shard.

    Args:
        timeout: Seconds one command may run before the sandbox stops it.
    """

    name = "sandbox_tools"

    def __init__(self, *, timeout: float = 180.0) -> None:
        self.timeout = timeout
        self._cwd: dict[str, str] = {}  # sample id -> bash working directory

    async def specs(self, ctx: SolveContext) -> list[dict[str, Any]]:
        """The four tools (none when the sample has no sandbox)."""
        return [dict(t) for t in TOOL_SPECS] if ctx.sandbox is not None else []

    async def call(self, name: str, arguments: dict[str, Any], ctx: SolveContext) -> ToolOutcome:
        """Run one tool in `ctx.sandbox`; every failure comes back as an outcome."""
        t0 = time.perf_counter()
        try:
            if ctx.sandbox is None:
                raise _ToolFailed("this sample has no sandbox to run tools in")
            if name == "bash":
                out = await self._bash(arguments, ctx)
            elif name == "file_read":
                out = ToolOutcome(await self._read(ctx, _arg(arguments, "path")))
            elif name == "file_write":
                out = await self._write(ctx, _arg(arguments, "path"), _arg(arguments, "content", True))
            elif name == "str_replace_editor":
                out = await self._editor(arguments, ctx)
            else:
                raise _ToolFailed(f"unknown sandbox tool {name!r}")
        except _ToolFailed as exc:
            out = ToolOutcome(f"Error: {exc}", error=str(exc))
        except Exception as exc:  # the sandbox itself failed: the model sees it, the row keeps it
            msg = f"{type(exc).__name__}: {exc}"
            out = ToolOutcome(f"Error: {msg}", error=msg)
        out.latency_ms = (time.perf_counter() - t0) * 1000.0
        return out

    def end_sample(self, ctx: SolveContext) -> None:
        """Forget the sample's working directory."""
        self._cwd.pop(ctx.sample_id, None)

    # -- bash ----------------------------------------------------------------------------
    async def _bash(self, args: dict[str, Any], ctx: SolveContext) -> ToolOutcome:
        command = _arg(args, "command")
        sb = ctx.sandbox
        cwd = self._cwd.get(ctx.sample_id) or sb.spec.workdir
        # The command's exit status is kept; the working directory is printed after it.
        script = f"{command}\n__nel_rc=$?\nprintf '\\n%s%s\\n' '{_CWD_MARK}' \"$(pwd)\"\nexit $__nel_rc\n"
        res = await sb.exec(["bash", "-c", script], timeout_sec=self.timeout, cwd=cwd,
                            output_limit=EXEC_OUTPUT_LIMIT)
        stdout = res.stdout or ""
        pos = stdout.rfind("\n" + _CWD_MARK)
        if pos >= 0:
            new_cwd = stdout[pos + 1 + len(_CWD_MARK):].strip()
            if new_cwd:
                self._cwd[ctx.sample_id] = new_cwd
            stdout = stdout[:pos]
        parts = [stdout.rstrip("\n")] if stdout.strip() else []
        if res.stderr:
            parts.append(f"STDERR:\n{res.stderr.rstrip()}")
        text = "\n".join(parts) or "(no output)"
        error = None
        if res.stopped == "timeout":
            error = f"timed out after {self.timeout:g}s"
            text = f"[command timed out after {self.timeout:g}s and was stopped]\n{text}"
        elif res.stopped is not None:
            error = f"stopped by the sandbox ({res.stopped})"
            text = f"[command stopped by the sandbox: {res.stopped}]\n{text}"
        elif res.return_code != 0:
            error = f"exit code {res.return_code}"
            text = f"[exit code {res.return_code}]\n{text}"
        return ToolOutcome(text, exit_code=res.return_code, error=error,
                           truncated=res.truncated)

    # -- files ---------------------------------------------------------------------------
    def _path(self, ctx: SolveContext, path: str) -> str:
        # Relative paths are relative to bash's working directory, as for the commands.
        if PurePosixPath(path).is_absolute():
            return path
        return str(PurePosixPath(self._cwd.get(ctx.sample_id) or ctx.sandbox.spec.workdir) / path)

    async def _read(self, ctx: SolveContext, path: str) -> str:
        fd, tmp = tempfile.mkstemp(prefix="nel-tool-", suffix=".read")
        os.close(fd)
        try:
            try:
                await ctx.sandbox.download(self._path(ctx, path), Path(tmp))
            except Exception as exc:
                raise _ToolFailed(f"cannot read {path}: {exc}") from None
            return Path(tmp).read_text(errors="replace")
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    async def _write(self, ctx: SolveContext, path: str, content: str) -> ToolOutcome:
        fd, tmp = tempfile.mkstemp(prefix="nel-tool-", suffix=".write")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(content.encode())
            try:
                await ctx.sandbox.upload(Path(tmp), self._path(ctx, path))
            except Exception as exc:
                raise _ToolFailed(f"cannot write {path}: {exc}") from None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return ToolOutcome(f"Wrote {len(content)} characters to {path}.")

    async def _editor(self, args: dict[str, Any], ctx: SolveContext) -> ToolOutcome:
        command, path = _arg(args, "command"), _arg(args, "path")
        if command == "view":
            lines = (await self._read(ctx, path)).splitlines()
            start, end = 1, len(lines)
            rng = args.get("view_range")
            if isinstance(rng, list) and len(rng) == 2 and all(isinstance(x, int) for x in rng):
                start, end = max(1, rng[0]), min(len(lines), rng[1])
            return ToolOutcome("\n".join(f"{i:6d}\t{lines[i - 1]}" for i in range(start, end + 1)))
        if command == "create":
            return await self._write(ctx, path, _arg(args, "new_str", True))
        if command == "str_replace":
            old, new = _arg(args, "old_str"), _arg(args, "new_str", True)
            text = await self._read(ctx, path)
            n = text.count(old)
            if n != 1:
                raise _ToolFailed(f"old_str occurs {n} times in {path}; it must occur exactly once")
            await self._write(ctx, path, text.replace(old, new, 1))
            return ToolOutcome(f"Replaced 1 occurrence in {path}.")
        raise _ToolFailed(f"unknown str_replace_editor command {command!r} "
                          "(use view, create or str_replace)")


def _arg(args: dict[str, Any], key: str, empty_ok: bool = False) -> str:
    value = args.get(key)
    if not isinstance(value, str) or (not value and not empty_ok):
        raise _ToolFailed(f"argument {key!r} is required (a string)")
    return value
