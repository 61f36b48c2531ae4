"""Unified diffs, read and applied in pure Python (no `git` or `patch` needed in the image).

An agent that works outside the task's sandbox (a NeMo Gym agent, a model driving Gym's
tools) hands its work back as a patch: Gym's SWE agents reply with `model_patch`, and a
model answers with a diff. `find_patch` takes the patch out of an answer; `parse_patch`
reads it into per-file hunks; `apply_hunks` applies one file's hunks to its text. A hunk
is placed where its header says, else at the nearest line where its context matches
(`git apply` and `patch` allow the same offset); a hunk that matches nowhere is an error,
never a silent partial edit. Every step is linear in the patch and file sizes, bounded by
the number of hunks times the file's lines for the offset search.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from benchmarks.errors import NelError

__all__ = ["FilePatch", "PatchError", "apply_hunks", "find_patch", "parse_patch"]

_FENCE = re.compile(r"```(?:diff|patch)[^\n]*\n(.*?)```", re.DOTALL)
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_NO_NEWLINE = "\\ No newline at end of file"
DEV_NULL = "/dev/null"


class PatchError(NelError):
    """A patch that does not parse or does not apply (one line naming the file)."""


@dataclass
class Hunk:
    """One `@@` hunk: where it starts in the old file and its lines with their prefix."""

    old_start: int
    lines: list[str] = field(default_factory=list)  # ' ctx', '-old', '+new'
    no_newline_old: bool = False
    no_newline_new: bool = False

    @property
    def old(self) -> list[str]:
        return [ln[1:] for ln in self.lines if ln[:1] in (" ", "-")]

    @property
    def new(self) -> list[str]:
        return [ln[1:] for ln in self.lines if ln[:1] in (" ", "+")]


@dataclass
class FilePatch:
    """One file's change: its old and new paths (`/dev/null` for a created or deleted file)."""

    old_path: str
    new_path: str
    hunks: list[Hunk] = field(default_factory=list)

    @property
    def path(self) -> str:
        """The file the change writes (or deletes)."""
        return self.old_path if self.new_path == DEV_NULL else self.new_path

    @property
    def created(self) -> bool:
        return self.old_path == DEV_NULL

    @property
    def deleted(self) -> bool:
        return self.new_path == DEV_NULL


def find_patch(text: str) -> str | None:
    """The unified diff in an answer: its last ```diff (or ```patch) block, else everything
    from its first `diff --git` / `--- ` line followed by `+++ `; None when it holds none."""
    blocks = [b for b in _FENCE.findall(text) if "+++ " in b]
    if blocks:
        return blocks[-1]
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith("diff --git ") or (
                line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")):
            return "".join(lines[i:])
    return None


def _path(raw: str) -> str:
    name = raw.split("\t", 1)[0].strip()
    if name != DEV_NULL and (name.startswith("a/") or name.startswith("b/")):
        name = name[2:]
    return name


def parse_patch(patch: str) -> list[FilePatch]:
    """The files of a unified diff (git's or plain), each with its hunks.

    Raises:
        PatchError: the text holds no file change, or a hunk is cut short.
    """
    files: list[FilePatch] = []
    lines = patch.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            fp = FilePatch(_path(line[4:]), _path(lines[i + 1][4:]))
            files.append(fp)
            i += 2
            continue
        m = _HUNK.match(line)
        if m and files:
            old_n = int(m.group(2) if m.group(2) is not None else 1)
            new_n = int(m.group(4) if m.group(4) is not None else 1)
            hunk = Hunk(int(m.group(1)))
            i += 1
            seen_old = seen_new = 0
            while i < len(lines) and (seen_old < old_n or seen_new < new_n):
                body = lines[i]
                if body == _NO_NEWLINE:
                    i += 1
                    continue
                kind = body[:1] or " "  # an empty line is a context line whose space was eaten
                if kind not in (" ", "-", "+"):
                    break
                hunk.lines.append(kind + body[1:])
                seen_old += kind in (" ", "-")
                seen_new += kind in (" ", "+")
                i += 1
            if seen_old != old_n or seen_new != new_n:
                raise PatchError(f"patch for {files[-1].path}: a hunk at line {hunk.old_start} is "
                                 f"cut short ({seen_old}/{old_n} old, {seen_new}/{new_n} new lines)")
            if i < len(lines) and lines[i] == _NO_NEWLINE:  # after the hunk's last line
                last = hunk.lines[-1][:1]
                hunk.no_newline_new = last in (" ", "+")
                hunk.no_newline_old = last in (" ", "-")
                i += 1
            files[-1].hunks.append(hunk)
            continue
        i += 1
    if not files:
        raise PatchError("the patch holds no file change (no `--- a/…` / `+++ b/…` lines)")
    return files


def _matches(lines: list[str], at: int, old: list[str]) -> bool:
    return at >= 0 and at + len(old) <= len(lines) and lines[at:at + len(old)] == old


def apply_hunks(text: str, fp: FilePatch) -> str:
    """`text` (the file's current content; '' for a new file) with `fp`'s hunks applied.

    Raises:
        PatchError: a hunk's old lines are found nowhere at or after the previous hunk.
    """
    lines = text.splitlines()
    ends_newline = text.endswith("\n") or not text
    out: list[str] = []
    pos = 0  # lines of `lines` already copied or replaced
    for hunk in fp.hunks:
        old, want = hunk.old, max(hunk.old_start - 1, 0)
        if not old:  # pure insertion: at the header's place
            at = min(max(want, pos), len(lines))
        else:
            at = next((c for d in range(len(lines) + 1)
                       for c in (want - d, want + d) if c >= pos and _matches(lines, c, old)), -1)
            if at < 0:
                raise PatchError(f"patch for {fp.path}: the hunk at line {hunk.old_start} does "
                                 "not match the file")
        out.extend(lines[pos:at])
        out.extend(hunk.new)
        pos = at + len(old)
        if pos >= len(lines):
            if hunk.no_newline_new:
                ends_newline = False
            elif hunk.new:
                ends_newline = True
    out.extend(lines[pos:])
    if not out:
        return ""
    return "\n".join(out) + ("\n" if ends_newline else "")
