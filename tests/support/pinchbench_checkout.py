"""A small PinchBench checkout written by tests, in the real layout (`tasks/task_*.md` with
YAML front matter and `## ` sections, `assets/`, `scripts/lib_grading.py`), with one task of
each grading type. Its `lib_grading._build_judge_prompt` has PinchBench's signature and
lays its inputs out under markers, so a test can see what the judge was given."""

from __future__ import annotations

from pathlib import Path

LIB_GRADING = '''\
def _build_judge_prompt(task, transcript_summary, rubric, workspace_content):
    return ("JUDGE TASK\\n" + task.prompt + "\\n---EXPECTED---\\n" + task.expected_behavior
            + "\\n---RUBRIC---\\n" + rubric + "\\n---TRANSCRIPT---\\n" + transcript_summary
            + "\\n---WORKSPACE---\\n" + workspace_content)
'''

AUTO = '''---
id: task_01_auto
name: Greeting file
category: files
grading_type: automated
timeout_seconds: 60
workspace_files:
  - path: notes.txt
    content: "draft"
---
## Prompt

Task auto: write the word hello into greeting.txt.

## Automated Checks

```python
def grade(transcript, workspace_path):
    from pathlib import Path
    p = Path(workspace_path) / "greeting.txt"
    said = transcript[-1]["message"]["content"][0]["text"]
    return {"file_exists": float(p.exists()),
            "content": float(p.exists() and p.read_text().strip() == "hello"),
            "said_so": float("Wrote" in said)}
```
'''

JUDGE = '''---
id: task_02_judge
name: Summary
category: writing
grading_type: llm_judge
timeout_seconds: 60
workspace_files:
  - source: notes.md
    dest: notes.md
---
## Prompt

Task judge: summarize notes.md into summary.txt.

## Expected Behavior

A short summary in summary.txt.

## LLM Judge Rubric

Score completeness and accuracy from 0 to 1.
'''

HYBRID = '''---
id: task_03_hybrid
name: Report
category: writing
grading_type: hybrid
timeout_seconds: 60
grading_weights:
  automated: 0.25
  llm_judge: 0.75
---
## Prompt

Task hybrid: write a report into out.txt.

## Grading Criteria

The report exists and is clear.

## Automated Checks

```python
def grade(transcript, workspace_path):
    import os
    return {"exists": float(os.path.exists(os.path.join(workspace_path, "out.txt")))}
```
'''

NOTES = "Meeting notes: ship on Friday. Owner: Ana.\n"


def write_checkout(root: Path) -> Path:
    """Write the checkout under `root`; returns `root`."""
    (root / "tasks").mkdir(parents=True)
    (root / "assets").mkdir()
    (root / "scripts").mkdir()
    for name, text in (("task_01_auto.md", AUTO), ("task_02_judge.md", JUDGE),
                       ("task_03_hybrid.md", HYBRID)):
        (root / "tasks" / name).write_text(text)
    (root / "assets" / "notes.md").write_text(NOTES)
    (root / "scripts" / "lib_grading.py").write_text(LIB_GRADING)
    return root
