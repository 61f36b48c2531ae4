"""The work of an agent that ran outside the task's sandbox, applied in it before the tests.

NeMo Evaluator 0.3.0 runs `gym_delegation` and Gym-tools-only `tool_calling` on Harbor tasks
(SWE-bench, terminal-bench) with the task's tests in a sandbox of its own, while the agent
works elsewhere (Gym's environment, Gym's resources server). The agent's work comes back as
a patch: a Gym SWE agent's `model_patch`, else the diff in the agent's final answer. nel
applies that patch to the task's working directory in the sample's sandbox (the task's
image) and the task's `tests/test.sh` then runs there, as for an agent that worked in it.

The patch is applied by nel (files read and written through the sandbox interface), so the
task image needs neither `git` nor `patch`; every path must stay inside the working
directory, and a patch that does not apply changes nothing (all files are computed first,
then written). What happened is recorded in the sample's scoring details (`agent_patch`).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import tempfile
from pathlib import Path
from typing import Any

from nel_assets.engine.solvers.unified_diff import PatchError, apply_hunks, find_patch, parse_patch

__all__ = ["apply_agent_patch", "is_harbor_task", "patch_of", "patch_task_sandbox"]


def is_harbor_task(metadata: dict[str, Any] | None) -> bool:
    """Whether a seed is a Harbor task (verified by its tests in the sample's sandbox)."""
    meta = metadata or {}
    return bool(meta.get("verifier_command")) and isinstance(meta.get("workdir"), str)


def patch_of(answer: str, reply: dict[str, Any] | None = None) -> tuple[str | None, str]:
    """The agent's patch and where it came from: `model_patch` (a Gym SWE agent's reply
    field), `answer` (a diff in the final answer) or `none`."""
    if reply is not None:
        mp = reply.get("model_patch")
        if isinstance(mp, str) and mp.strip():
            return mp, "model_patch"
    found = find_patch(answer)
    return (found, "answer") if found else (None, "none")


def _inside(workdir: str, rel: str) -> str:
    """`rel`'s absolute path under `workdir`; a path that leaves it is refused."""
    if rel.startswith("/"):
        raise PatchError(f"patch path {rel!r} is absolute (paths are relative to the task's "
                         "working directory)")
    full = posixpath.normpath(posixpath.join(workdir, rel))
    if full != workdir and not full.startswith(workdir.rstrip("/") + "/"):
        raise PatchError(f"patch path {rel!r} leaves the working directory {workdir}")
    return full


async def _read(sandbox: Any, path: str) -> str:
    fd, tmp = tempfile.mkstemp(prefix="nel-patch-")
    os.close(fd)
    try:
        try:
            await sandbox.download(path, Path(tmp))
        except Exception as exc:
            raise PatchError(f"patch: cannot read {path} in the sandbox ({exc})") from None
        return Path(tmp).read_text(encoding="utf-8", errors="surrogateescape")
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


async def _write(sandbox: Any, path: str, text: str) -> None:
    await sandbox.exec(["mkdir", "-p", posixpath.dirname(path)], timeout_sec=30)
    fd, tmp = tempfile.mkstemp(prefix="nel-patch-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8", errors="surrogateescape"))
        await sandbox.upload(Path(tmp), path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


async def apply_agent_patch(sandbox: Any, workdir: str, patch: str | None,
                            source: str) -> dict[str, Any]:
    """Apply `patch` to `workdir` in `sandbox`; returns the `agent_patch` details.

    Never raises for a bad patch: the tests then run on the unchanged workdir (an agent
    whose patch does not apply has not done the task), and the details say why.
    """
    details: dict[str, Any] = {"source": source, "applied": False, "files": []}
    if not patch:
        details["error"] = "the agent returned no patch (no model_patch, no diff in its answer)"
        return details
    try:
        changes: list[tuple[str, str | None]] = []  # (path, new text; None = delete)
        for fp in parse_patch(patch):
            path = _inside(workdir, fp.path)
            old = "" if fp.created else await _read(sandbox, path)
            changes.append((path, None if fp.deleted else apply_hunks(old, fp)))
    except PatchError as exc:
        details["error"] = str(exc)
        return details
    for path, text in changes:
        if text is None:
            await sandbox.exec(["rm", "-f", path], timeout_sec=30)
        else:
            await _write(sandbox, path, text)
        details["files"].append(posixpath.relpath(path, workdir))
    details["applied"] = True
    return details


async def patch_task_sandbox(metadata: dict[str, Any] | None, sandbox: Any, answer: str,
                             reply: dict[str, Any] | None = None
                             ) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """For a Harbor task with a sandbox, apply the agent's patch there.

    Returns:
        None when the seed is no Harbor task or the sample has no sandbox; else the
        `agent_patch` details and the trajectory step that records them.
    """
    if sandbox is None or not is_harbor_task(metadata):
        return None
    assert metadata is not None
    patch, source = patch_of(answer, reply)
    details = await apply_agent_patch(sandbox, metadata["workdir"], patch, source)
    said = (f"agent patch ({source}) applied in the task's sandbox: {', '.join(details['files'])}"
            if details["applied"] else f"agent patch not applied: {details['error']}")
    return details, {"source": "system", "message": said, "extra": {"agent_patch": details}}
