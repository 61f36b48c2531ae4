"""Harbor-format task sets written by tests: each task asks the agent to write one file under
/app, and its tests/test.sh (the verifier) compares that file with tests/expected.txt and
writes 1 or 0 to /logs/verifier/reward.txt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

TOML = ('[metadata]\ncategory = "{category}"\n{extra}\n[agent]\ntimeout_sec = {agent}\n\n'
        '[verifier]\ntimeout_sec = 60.0\n\n[environment]\ndocker_image = "{image}"\n')
# The verifier compares the agent's file with a file of its own tests directory.
TEST_SH = ('#!/bin/bash\nmkdir -p /logs/verifier\n'
           'if cmp -s /tests/expected.txt /app/{file}; then echo 1 > /logs/verifier/reward.txt; '
           'echo PASS; else echo 0 > /logs/verifier/reward.txt; echo FAIL; fi\n')


def write_task_set(root: Path, tasks: dict[str, dict[str, Any]], image: str, *,
                   agent_timeout: float) -> Path:
    """Write `tasks` (name -> `instruction`, `file`, `expected`, optional `agent_timeout`,
    optional `metadata`: more integer keys of task.toml's [metadata]) under `root` in Harbor's
    layout, each naming `image`; returns `root`. A task's category is its name after the
    two-character prefix (`a-greet` -> `greet`)."""
    for name, t in tasks.items():
        d = root / name
        (d / "environment").mkdir(parents=True)
        (d / "tests").mkdir()
        (d / "instruction.md").write_text(t["instruction"] + "\n")
        extra = "".join(f"{k} = {int(v)}\n" for k, v in (t.get("metadata") or {}).items())
        (d / "task.toml").write_text(TOML.format(category=name[2:], image=image, extra=extra,
                                                 agent=t.get("agent_timeout", agent_timeout)))
        (d / "environment" / "Dockerfile").write_text(f"FROM {image}\nWORKDIR /app\n")
        (d / "tests" / "test.sh").write_text(TEST_SH.format(file=t["file"]))
        (d / "tests" / "expected.txt").write_text(t["expected"])
    return root
