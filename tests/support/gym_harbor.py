"""Harbor tasks for the Gym agentic tests (`gym_delegation` and Gym-tools `tool_calling` on
agent benchmarks), and the answers the shared Gym stack's policy model gives them.

Each task asks for one file under /app; its tests/test.sh compares it with the expected text.
The agent never works in the task's sandbox: its work comes back as a patch (a diff in its
answer) that nel applies there before the tests run. The task.toml [metadata] carries the
Gym counter server's `initial_count` / `expected_count`, so Gym's own reward (the counter
unchanged: expected == initial) differs from the tests' verdict on every task.
"""

from __future__ import annotations

from typing import Any


def diff_creating(path: str, text: str) -> str:
    """A git-style unified diff that creates `path` (relative to the workdir) holding `text`."""
    lines = text.splitlines()
    body = "".join(f"+{ln}\n" for ln in lines)
    return (f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n"
            f"+++ b/{path}\n@@ -0,0 +1,{len(lines)} @@\n{body}")


#: name -> task (tests/support/harbor_tasks.write_task_set's fields).
TASKS: dict[str, dict[str, Any]] = {
    "a-fix": {"instruction": "Task gym-fix: write the word ok into /app/result.txt.",
              "file": "result.txt", "expected": "ok\n",
              "metadata": {"initial_count": 1, "expected_count": 2}},
    "b-wrong": {"instruction": "Task gym-wrong: write the word yes into /app/result.txt.",
                "file": "result.txt", "expected": "yes\n",
                "metadata": {"initial_count": 3, "expected_count": 4}},
    "c-silent": {"instruction": "Task gym-silent: write the word done into /app/result.txt.",
                 "file": "result.txt", "expected": "done\n",
                 "metadata": {"initial_count": 5, "expected_count": 5}},
}
#: The answers' diffs: right for a-fix, wrong content for b-wrong, none for c-silent.
PATCHES = {"a-fix": diff_creating("result.txt", "ok"), "b-wrong": diff_creating("result.txt", "no")}
#: What the tests give each task (the patch's effect) and what Gym's counter gives it.
TEST_REWARDS = {"a-fix": 1.0, "b-wrong": 0.0, "c-silent": 0.0}
GYM_REWARDS = {"a-fix": 0.0, "b-wrong": 0.0, "c-silent": 1.0}


def policy_rows() -> list[dict[str, str]]:
    """The shared Gym policy model's answers to these tasks (Gym's agent drives it)."""
    return [{"match": f"Task gym-{name[2:]}:",
             "content": f"Here is my change.\n```diff\n{PATCHES[name]}```\n"}
            for name in TASKS if name in PATCHES]
