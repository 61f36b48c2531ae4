"""`vlmevalkit://NAME`: a VLMEvalKit dataset read from its TSV file in a local directory.

VLMEvalKit keeps each dataset as `<LMUData>/<NAME>.tsv` (columns `index`, `question`, the
options `A`, `B`, ..., `answer`, `image` as base64, optional `hint` and `category`; an
`image` of 64 characters or fewer is the `index` of the row whose image it shares, and a
`['...', '...']` cell holds several images). nel reads that file (nothing downloads), builds
VLMEvalKit's prompt (`Hint:` / `Question:` / `Options:` for multiple choice, the question
alone for yes/no) with the images before the text, and scores as VLMEvalKit does without a
judge (`benchmarks.vlm_scoring`). Other dataset kinds (open VQA, which VLMEvalKit grades
with a judge model) are refused in one line.

The folder is `NEL_VLMEVALKIT_DIR`, else VLMEvalKit's own `LMUData` variable, else
`~/LMUData`.
"""

from __future__ import annotations

import ast
import csv
import hashlib
import os
import string
import sys
from pathlib import Path
from typing import Any

from benchmarks._types import EvalEnvironment, SeedResult, VerifyResult
from benchmarks.errors import BenchmarkConfigError, NelError
from benchmarks.vlm_scoring import verify_mcq, verify_yes_no

SCHEME = "vlmevalkit://"


def vlmevalkit_dir() -> Path:
    """Where VLMEvalKit's TSV files are looked for (`NEL_VLMEVALKIT_DIR`, `LMUData`, `~/LMUData`)."""
    # `LMUData` is VLMEvalKit's own spelling of the variable
    d = os.environ.get("NEL_VLMEVALKIT_DIR") or os.environ.get("LMUData") or "~/LMUData"  # noqa: SIM112
    return Path(d).expanduser()


def tsv_path(name: str, data_dir: Path | None = None) -> Path:
    """The TSV file of dataset `name`."""
    return (data_dir or vlmevalkit_dir()) / f"{name}.tsv"


def missing_file(name: str, data_dir: Path | None = None) -> tuple[str, str] | None:
    """(what is missing, which file to put where), or None when the dataset's TSV is there."""
    path = tsv_path(name, data_dir)
    if path.is_file():
        return None
    return (f"benchmark 'vlmevalkit://{name}' cannot be had here: there is no VLMEvalKit TSV "
            f"file at {path} and nel downloads nothing",
            f"put {name}.tsv there, or set NEL_VLMEVALKIT_DIR (or LMUData) to the folder holding it")


def missing_reason(name: str, data_dir: Path | None = None) -> str | None:
    """One line saying which file to put where, or None when the dataset's TSV is there."""
    missing = missing_file(name, data_dir)
    return None if missing is None else "; ".join(missing)


def local_datasets(data_dir: Path | None = None) -> list[str]:
    """The dataset names whose TSV files are in the folder."""
    d = data_dir or vlmevalkit_dir()
    return sorted(p.stem for p in d.glob("*.tsv")) if d.is_dir() else []


def _read_rows(path: Path) -> list[dict[str, str]]:
    # base64 images make cells far larger than the csv module's default field limit
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh, delimiter="\t")
        rows = [{k: (v or "").strip() if k != "image" else (v or "") for k, v in r.items() if k}
                for r in reader]
    if not rows:
        raise NelError(f"{path}: no rows")
    missing = [c for c in ("index", "question", "answer") if c not in rows[0]]
    if missing:
        raise NelError(f"{path}: VLMEvalKit's TSV needs the column(s) {', '.join(missing)} "
                       "(and `image` with base64 images)")
    return rows


def _images(rows: list[dict[str, str]], path: Path) -> list[list[str]]:
    """Each row's images as data URLs, resolving VLMEvalKit's by-index image references."""
    by_index = {r["index"]: r.get("image", "") for r in rows}
    out = []
    for r in rows:
        cell = r.get("image", "")
        if 0 < len(cell) <= 64:  # the index of the row holding this image
            cell = by_index.get(cell, "")
            if len(cell) <= 64:
                raise NelError(f"{path}: row index {r['index']}: image refers to index "
                               f"{r.get('image')!r}, which holds no image")
        if not cell:
            if r.get("image_path"):
                out.append([str(path.parent / "images" / path.stem / p)
                            for p in _listed(r["image_path"])])
                continue
            raise NelError(f"{path}: row index {r['index']} has no image")
        out.append([f"data:image/jpeg;base64,{b}" if _is_jpeg(b) else f"data:image/png;base64,{b}"
                    for b in _listed(cell)])
    return out


def _listed(cell: str) -> list[str]:
    """VLMEvalKit's `toliststr`: a `['a', 'b']` cell is a list, anything else one item."""
    if cell.startswith("[") and cell.endswith("]"):
        try:
            val = ast.literal_eval(cell)
        except (ValueError, SyntaxError):
            return [cell]
        return [str(v) for v in val] if isinstance(val, list) else [cell]
    return [cell]


def _is_jpeg(b64: str) -> bool:
    return b64.startswith("/9j/")  # base64 of the JPEG magic bytes FF D8 FF


class VLMEvalKitEnvironment(EvalEnvironment):
    """A VLMEvalKit multiple-choice or yes/no dataset from its local TSV file.

    Args:
        dataset_name: VLMEvalKit's dataset name (the TSV file's stem), e.g. `MMBench_DEV_EN`.
        limit: Keep only the first `limit` rows (NeMo Evaluator's argument).
        data_dir: The folder holding the TSV (default: `vlmevalkit_dir()`).
    """

    version = "1"

    def __init__(self, dataset_name: str, limit: int | None = None,
                 data_dir: str | os.PathLike[str] | None = None) -> None:
        super().__init__()
        folder = Path(data_dir).expanduser() if data_dir is not None else None
        reason = missing_reason(dataset_name, folder)
        if reason is not None:
            raise NelError(reason)
        path = tsv_path(dataset_name, folder)
        rows = _read_rows(path)
        if limit is not None:
            rows = rows[:limit]
        self.dataset_name = dataset_name
        self.name = SCHEME + dataset_name
        self.rows = rows
        self.images = _images(rows, path)
        letters = [c for c in string.ascii_uppercase if c in rows[0]]
        self.choices = [{c: r[c] for c in letters if r.get(c)} for r in rows]
        if any(self.choices):
            self.dataset_type = "MCQ"
        elif all(r["answer"].strip().lower() in ("yes", "no") for r in rows):
            self.dataset_type = "Y/N"
        else:
            raise NelError(f"benchmark {self.name!r}: {path} has neither options (A, B, ...) nor "
                           "yes/no answers; open-ended VLMEvalKit datasets (graded by a judge "
                           "model there) are not supported yet in nel")
        h = hashlib.sha256()
        for r in rows:
            h.update(repr(sorted(r.items())).encode())
        self._data_hash = h.hexdigest()[:16]

    def __len__(self) -> int:
        return len(self.rows)

    def fingerprint(self) -> str:
        return f"{super().fingerprint()}:{self.dataset_type}"

    def _prompt(self, row: dict[str, str], choices: dict[str, str]) -> str:
        # VLMEvalKit's ImageMCQDataset.build_prompt / ImageBaseDataset.build_prompt
        if self.dataset_type != "MCQ":
            return row["question"]
        prompt = f"Hint: {row['hint']}\n" if row.get("hint") else ""
        prompt += f"Question: {row['question']}\n"
        if choices:
            prompt += "Options:\n" + "".join(f"{k}. {v}\n" for k, v in choices.items())
            prompt += "Please select the correct answer from the options above. \n"
        return prompt

    async def seed(self, idx: int) -> SeedResult:
        if not 0 <= idx < len(self.rows):
            raise IndexError(f"{self.name}: index {idx} out of range 0..{len(self.rows) - 1}")
        row, choices = self.rows[idx], self.choices[idx]
        category = next((row[k] for k in ("category", "l2-category", "split") if row.get(k)), None)
        meta: dict[str, Any] = {"source": "vlmevalkit", "dataset": self.dataset_name,
                                "dataset_type": self.dataset_type, "index": row["index"],
                                "choices": choices}
        if category:
            meta["category"] = category
        return SeedResult(self._prompt(row, choices), row["answer"].strip(), meta,
                          images=list(self.images[idx]))

    async def verify(self, response: str, expected: str, **metadata: Any) -> VerifyResult:
        if self.dataset_type == "MCQ":
            return verify_mcq(response, expected, metadata.get("choices") or {})
        return verify_yes_no(response, expected)

    def gold_response(self, seed: SeedResult) -> str:
        return seed.expected_answer


def vlmevalkit_factory(uri: str) -> Any:
    """The factory of a `vlmevalkit://NAME` benchmark (its TSV is read when it is made)."""
    name = uri.removeprefix(SCHEME)
    if not name:
        raise NelError("write `vlmevalkit://<dataset>` (a VLMEvalKit dataset name, e.g. "
                       "vlmevalkit://MMBench_DEV_EN)")

    def make(*, num_examples: int | None = None, protocol: str = "chat") -> EvalEnvironment:
        if protocol in ("completions", "completion"):  # refused before any request
            raise BenchmarkConfigError(f"benchmark {uri!r} sends images: use a service with "
                                       "protocol chat_completions or responses")
        return VLMEvalKitEnvironment(name, limit=num_examples)

    return make
