"""PinchBench task files (`tasks/task_*.md`) read into seeds.

Each task is a Markdown file: YAML front matter (`id`, `name`, `category`, `grading_type`,
`timeout_seconds`, `workspace_files`, ...) then `## ` sections, of which `Prompt` is what
the agent is asked, and `Grading Criteria` / `Automated Checks` are how it is graded.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import yaml

from benchmarks._types import EvalEnvironment, SeedResult, VerifyResult
from benchmarks.errors import DataMissingError, NelError

_SECTION = re.compile(r"^## +(.+?)\s*$", re.MULTILINE)


def parse_task(path: Path) -> dict[str, Any]:
    """Front matter and `## ` sections of one task file.

    Raises:
        NelError: one line when the front matter is missing or does not parse, or there is
            no `## Prompt` section.
    """
    text = path.read_text(encoding="utf-8")
    if not text.startswith("---"):
        raise NelError(f"{path}: no YAML front matter (the file must start with `---`)")
    _, front, body = [*text.split("---", 2), "", ""][:3]
    try:
        meta = yaml.safe_load(front) or {}
    except yaml.YAMLError as exc:
        raise NelError(f"{path}: front matter does not parse: {str(exc).splitlines()[0]}") from None
    if not isinstance(meta, dict):
        raise NelError(f"{path}: front matter is not a mapping")
    parts = _SECTION.split(body)
    sections = {parts[i].strip(): parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)}
    if "Prompt" not in sections:
        raise NelError(f"{path}: no `## Prompt` section")
    return {"meta": meta, "sections": sections}


class PinchBenchTasks(EvalEnvironment):
    """PinchBench from a local checkout (the folder holding `tasks/task_*.md`)."""

    version = "2.0.0"
    needs_sandbox = True

    def __init__(self, root: Path, *, num_examples: int | None = None) -> None:
        super().__init__()
        tasks_dir = root / "tasks"
        files = sorted(tasks_dir.glob("task_*.md")) if tasks_dir.is_dir() else []
        if not files:
            raise DataMissingError(f"pinchbench: no tasks/task_*.md under {root}")
        self.tasks = [parse_task(p) | {"file": p.name} for p in files[:num_examples]]
        self._data_hash = hashlib.sha256(b"".join(p.read_bytes() for p in files)).hexdigest()[:16]

    def __len__(self) -> int:
        return len(self.tasks)

    def fingerprint(self) -> str:
        return f"{super().fingerprint()}:{self._data_hash}"

    async def seed(self, idx: int) -> SeedResult:
        t = self.tasks[idx]
        m, s = t["meta"], t["sections"]
        meta = {"task_id": m.get("id", t["file"]), "task_name": m.get("name"),
                "category": m.get("category"), "grading_type": m.get("grading_type"),
                "timeout_s": m.get("timeout_seconds"), "workspace_files": m.get("workspace_files"),
                "grading_criteria": s.get("Grading Criteria"),
                "automated_checks": s.get("Automated Checks"),
                "expected_behavior": s.get("Expected Behavior")}
        return SeedResult(s["Prompt"], "", meta)

    async def verify(self, response: str, expected: str, **metadata: Any) -> VerifyResult:
        raise NelError("pinchbench: tasks are graded on the agent's workspace (automated checks "
                       "and an LLM judge on the grading criteria); nel's agent solvers do not run "
                       "it yet")
