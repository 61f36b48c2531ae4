"""NeMo Skills' prepared data, generated for tests from NEL_DATA_DIR's files (never committed).

Each writer turns nel's copy of a benchmark into the rows Skills' `prepare.py` writes for it
(read in NVIDIA-NeMo/Skills: `nemo_skills/dataset/<name>/prepare.py` and
`nemo_skills/dataset/utils.py:get_mcq_fields`), at `<dir>/<name>/<split>.jsonl`.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any


def _rows(path: Path, n: int) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    out = []
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                out.append(json.loads(line))
            if len(out) == n:
                break
    return out


def _write(root: Path, name: str, split: str, rows: list[dict[str, Any]]) -> Path:
    path = root / name / f"{split}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def mcq_fields(question: str, options: list[str]) -> dict[str, Any]:
    """A multiple-choice row's prompt fields as Skills builds them: `problem` is the question,
    a blank line and the `A) option` lines; each letter is also a field."""
    letters = {chr(ord("A") + i): str(o) for i, o in enumerate(options)}
    text = "\n".join(f"{k}) {v}" for k, v in letters.items())
    return {"problem": f"{question.strip(chr(10))}\n\n{text}", "options": text, **letters}


def write_mmlu_pro(data_dir: Path, root: Path, n: int) -> Path:
    """`<root>/mmlu-pro/test.jsonl` from the first `n` rows of `<data_dir>/mmlu_pro/test.jsonl`."""
    rows = []
    for r in _rows(data_dir / "mmlu_pro" / "test.jsonl", n):
        cat = r["category"].replace(" ", "_")
        rows.append({"expected_answer": r["answer"], "examples_type": f"mmlu_pro_few_shot_{cat}",
                     "subset_for_metrics": cat, **mcq_fields(r["question"], r["options"])})
    return _write(root, "mmlu-pro", "test", rows)


def write_math500(data_dir: Path, root: Path, n: int) -> Path:
    """`<root>/math-500/test.jsonl`: prm800k's rows with `answer` -> `expected_answer` and
    `solution` -> `reference_solution`."""
    rows = []
    for r in _rows(data_dir / "math500" / "test.jsonl", n):
        r = dict(r)
        r["expected_answer"] = r.pop("answer")
        r["reference_solution"] = r.pop("solution")
        rows.append(r)
    return _write(root, "math-500", "test", rows)


def write_human_eval(data_dir: Path, root: Path, n: int) -> Path:
    """`<root>/human-eval/test.jsonl`: HumanEval's rows plus `question`, the prompt with its
    four-space indents as tabs (evalplus's extra `base_input`/`plus_input` are dropped by
    Skills anyway)."""
    rows = [{**r, "question": r["prompt"].replace("    ", "\t")}
            for r in _rows(data_dir / "humaneval" / "HumanEval.jsonl.gz", n)]
    return _write(root, "human-eval", "test", rows)
