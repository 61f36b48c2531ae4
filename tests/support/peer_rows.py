"""The rows NeMo Evaluator 0.3.0's built-in benchmarks load, built from the local data nel
reads (`NEL_DATA_DIR`): the hub is out of reach here, so `nemo_peer_driver.py` hands each
built-in these rows in place of its loader's (`use_local_rows`), in the form that loader
returns them (hub rows, or what its loader function builds), in nel's item order.
Everything the peer does after loading (its `prepare_row`/`seed_fn`, prompt, solver,
client) is its own code.
"""

from __future__ import annotations

import ast
import csv
import gzip
import io
import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

Row = dict[str, Any]


def _jsonl(path: Path) -> list[Row]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def gsm8k(data: Path) -> list[Row]:
    """`openai/gsm8k` (main, test): question, answer."""
    return _jsonl(data / "gsm8k" / "test.jsonl")


def math500(data: Path) -> list[Row]:
    """`HuggingFaceH4/MATH-500` (test): problem, solution, answer, subject, level, unique_id."""
    return _jsonl(data / "math500" / "test.jsonl")


def humaneval(data: Path) -> list[Row]:
    """`openai/openai_humaneval` (test): task_id, prompt, canonical_solution, test, entry_point."""
    return _jsonl(data / "humaneval" / "HumanEval.jsonl.gz")


def mmlu(data: Path) -> list[Row]:
    """`cais/mmlu` (all, test): question, subject, choices, answer (index), subjects in
    alphabetical order as the hub's `all` config and the authors' files are."""
    rows = []
    for f in sorted((data / "mmlu" / "test").glob("*_test.csv")):
        subject = f.name[: -len("_test.csv")]
        with open(f, encoding="utf-8", newline="") as fh:
            for rec in csv.reader(fh):
                rows.append({"question": rec[0], "subject": subject, "choices": rec[1:5],
                             "answer": "ABCD".index(rec[5].strip())})
    return rows


def mmlu_pro(data: Path) -> list[Row]:
    """`TIGER-Lab/MMLU-Pro` (test): the rows as the hub has them (options with "N/A")."""
    return _jsonl(data / "mmlu_pro" / "test.jsonl")


def gpqa(data: Path) -> list[Row]:
    """`Idavidrein/gpqa` (gpqa_diamond, train): the CSV's rows, decrypted in memory."""
    with zipfile.ZipFile(data / "gpqa" / "gpqa_diamond.zip") as zf:
        name = next(n for n in zf.namelist() if n.endswith("gpqa_diamond.csv"))
        raw = zf.read(name, pwd=b"deserted-untie-orchid").decode("utf-8")
    return list(csv.DictReader(io.StringIO(raw)))


# The order 0.3.0's mgsm loader walks the languages in.
_MGSM_LANGS = ("en", "de", "fr", "es", "ru", "zh", "ja", "th", "te", "bn", "sw")


def mgsm(data: Path) -> list[Row]:
    """What 0.3.0's `_load_mgsm` returns: question, answer, language, language by language."""
    rows = []
    for lang in _MGSM_LANGS:
        for line in (data / "mgsm" / f"mgsm_{lang}.tsv").read_text(encoding="utf-8").splitlines():
            if line.strip():
                q, _, a = line.rpartition("\t")
                rows.append({"question": q.strip(), "answer": a.strip(), "language": lang})
    return rows


def xstest(data: Path) -> list[Row]:
    """What 0.3.0's `_load_xstest` returns: prompt, label, type, id, focus, note."""
    with open(data / "xstest" / "xstest_prompts.csv", encoding="utf-8", newline="") as fh:
        return [{"prompt": r["prompt"], "label": r["label"], "type": r["type"], "id": int(r["id"]),
                 "focus": r.get("focus", ""), "note": r.get("note", "")} for r in csv.DictReader(fh)]


def triviaqa(data: Path) -> list[Row]:
    """`trivia_qa` (rc.nocontext) rows for the questions of nel's default file (MosaicML's
    subset: `Question: ...\\nAnswer:` contexts, answer, aliases)."""
    rows = []
    for r in _jsonl(data / "triviaqa" / "triviaqa_sm_sub.jsonl"):
        q = str(r["context"]).strip().removeprefix("Question:").strip().removesuffix("Answer:").strip()
        rows.append({"question": q, "answer": {"value": str(r["answer"]).strip(),
                                               "aliases": list(r.get("aliases") or []),
                                               "normalized_aliases": []}})
    return rows


def simpleqa(data: Path) -> list[Row]:
    """`basicv8vc/SimpleQA` (test): problem, answer, metadata."""
    with open(data / "simpleqa" / "simple_qa_test_set.csv", encoding="utf-8", newline="") as fh:
        return [{"problem": r["problem"], "answer": r["answer"],
                 "metadata": ast.literal_eval(r["metadata"])} for r in csv.DictReader(fh)]


#: Benchmark name -> rows builder.
PEER_ROWS: dict[str, Callable[[Path], list[Row]]] = {
    "gsm8k": gsm8k, "math500": math500, "humaneval": humaneval, "mmlu": mmlu,
    "mmlu_pro": mmlu_pro, "gpqa": gpqa, "mgsm": mgsm, "xstest": xstest, "triviaqa": triviaqa,
    "simpleqa": simpleqa,
}


def write_peer_rows(name: str, data: Path, out: Path) -> Path:
    """Write `name`'s peer rows as JSONL to `out` and return it."""
    rows = PEER_ROWS[name](data)
    out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return out
