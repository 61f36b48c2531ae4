"""PinchBench task files (`tasks/task_*.md`) read into seeds, graded as NeMo Evaluator 0.3.0
grades them (`pinchbench_grading`).

Each task is a Markdown file: YAML front matter (`id`, `name`, `category`, `grading_type`,
`timeout_seconds`, `workspace_files`, `grading_weights`, ...) then `## ` sections, of which
`Prompt` is what the agent is asked, and `Grading Criteria` / `LLM Judge Rubric` /
`Automated Checks` are how it is graded. A task's `workspace_files` (inline `content`, or a
`source` under the checkout's `assets/`) are written into the sample's sandbox workdir,
which is the agent's workspace; the checks and the judge then read what the agent left there.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import yaml

from benchmarks._types import EvalEnvironment, SeedResult, VerifyResult
from benchmarks.agentic.pinchbench_grading import grade_in_sandbox
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
    """PinchBench from a local checkout (the folder holding `tasks/task_*.md`, `assets/` and,
    for judge-graded tasks, `scripts/lib_grading.py`)."""

    version = "2.0.0"
    needs_sandbox = True
    #: What is graded is the workspace the agent left (and its answer), not only its words.
    answer_is_sandbox_state = True

    def __init__(self, root: Path, *, num_examples: int | None = None) -> None:
        super().__init__()
        self.root = root
        tasks_dir = root / "tasks"
        files = sorted(tasks_dir.glob("task_*.md")) if tasks_dir.is_dir() else []
        if not files:
            raise DataMissingError(f"pinchbench: no tasks/task_*.md under {root}")
        self.tasks = [parse_task(p) | {"file": p.name} for p in files[:num_examples]]
        lib = root / "scripts" / "lib_grading.py"
        self.lib_grading = lib if lib.is_file() else None
        judged = [t["file"] for t in self.tasks
                  if t["meta"].get("grading_type") in ("llm_judge", "hybrid")]
        if judged and self.lib_grading is None:
            raise DataMissingError(f"pinchbench: {lib} is missing (PinchBench's judge prompt, "
                                   f"which {judged[0]} is graded with); use the whole checkout")
        h = hashlib.sha256(b"".join(p.read_bytes() for p in files))
        if self.lib_grading is not None:
            h.update(self.lib_grading.read_bytes())
        self._data_hash = h.hexdigest()[:16]

    def __len__(self) -> int:
        return len(self.tasks)

    def fingerprint(self) -> str:
        return f"{super().fingerprint()}:{self._data_hash}"

    def _workspace(self, t: dict[str, Any]) -> dict[str, str]:
        """The task's `workspace_files` as workdir-relative path -> text."""
        files: dict[str, str] = {}
        for spec in t["meta"].get("workspace_files") or []:
            if not isinstance(spec, dict):
                continue
            if "content" in spec and spec.get("path"):
                files[str(spec["path"])] = str(spec["content"])
            elif spec.get("source") and spec.get("dest"):
                src = self.root / "assets" / str(spec["source"])
                if not src.is_file():
                    raise NelError(f"pinchbench: task {t['file']}: asset {src} is missing")
                files[str(spec["dest"])] = src.read_text(encoding="utf-8", errors="replace")
        return files

    async def seed(self, idx: int) -> SeedResult:
        t = self.tasks[idx]
        m, s = t["meta"], t["sections"]
        meta = {"task_id": m.get("id", t["file"]), "task_name": m.get("name"),
                "category": m.get("category"), "grading_type": m.get("grading_type"),
                "timeout_s": m.get("timeout_seconds"), "workspace_files": m.get("workspace_files"),
                "grading_criteria": s.get("Grading Criteria"),
                "automated_checks": s.get("Automated Checks"),
                "expected_behavior": s.get("Expected Behavior"), "task_file": t["file"]}
        expected = ""
        if not s.get("Automated Checks"):  # what 0.3.0 gives a judge-only task as its target
            parts = [f"Expected behavior:\n{s['Expected Behavior']}" if s.get("Expected Behavior") else "",
                     f"Grading criteria:\n{s['Grading Criteria']}" if s.get("Grading Criteria") else ""]
            expected = "\n\n".join(p for p in parts if p)
        return SeedResult(s["Prompt"], expected, meta, sandbox_spec={"files": self._workspace(t)})

    async def verify(self, response: str, expected: str, *, sandbox: Any = None,
                     **metadata: Any) -> VerifyResult:
        """The task's automated checks, run in the sandbox the agent worked in; for a judge
        or hybrid task, the judge prompt the `pinchbench` judge kind sends."""
        task = next((t for t in self.tasks if t["file"] == metadata.get("task_file")), None)
        if task is None:
            raise NelError(f"pinchbench: no task {metadata.get('task_file')!r} in {self.root}")
        return await grade_in_sandbox(sandbox, task, response, self.lib_grading)
