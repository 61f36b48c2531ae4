"""GPQA diamond (Rein et al., 2023): 198 graduate-level science questions, 4 options.

Source: the authors' `gpqa_diamond.csv` (columns `Question`, `Correct Answer`,
`Incorrect Answer 1..3`, `Record ID`, `High-level domain`, `Subdomain`, `Writer's Difficulty
Estimate`, ...), distributed only inside a password-protected zip because the authors ask
that the items never appear in plain text online. nel reads `gpqa/gpqa_diamond.zip` (or the
authors' `dataset.zip`) with the password and never writes the CSV anywhere.

The correct answer is listed first in the CSV, so the options are shuffled with a seed
derived from the item's `Record ID`: the order is fixed per item, independent of row order,
and the gold letter is spread evenly over A-D.
"""

from __future__ import annotations

import csv
import hashlib
import io
import random
import zipfile
from pathlib import Path
from typing import Any

from benchmarks._dataset_env import DatasetEnvironment, lettered_options
from benchmarks._types import SeedResult, VerifyResult
from benchmarks.datasets import find_local, resolve_file
from benchmarks.errors import DataMissingError
from benchmarks.loglik_items import LoglikChoices
from benchmarks.sources import Source, SourceFile

PASSWORD = b"deserted-untie-orchid"
LETTERS = "ABCD"
MEMBER = "gpqa_diamond.csv"

CHAT_TEMPLATE = (
    "Answer this multiple choice question. Reason it through step by step, and make the "
    "last line of your reply \"Answer: X\", with X one of A, B, C or D.\n\n"
    "{question}\n\n{options}"
)
COMPLETION_TEMPLATE = "Question: {question}\n{options}\nAnswer:"
# NeMo Evaluator 0.3.0's prompt (`nemo_evaluator/benchmarks/gpqa.py`), the default
# `prompt_set: nemo`, on both endpoints, with its option order: one `random.Random(42)`
# shuffling each row's options in turn, in dataset order (`nemo_options`).
NEMO_TEMPLATE = (
    "Answer the following multiple choice question. The last line of your response "
    "should be of the following format: 'Answer: $LETTER' (without quotes) where "
    "LETTER is one of ABCD.\n\n{question}\n\nA) {A}\nB) {B}\nC) {C}\nD) {D}"
)


def read_zip_csv(path: Path, member_suffix: str = MEMBER) -> list[dict[str, str]]:
    """Rows of the CSV member ending in `member_suffix`, decrypted in memory only."""
    try:
        with zipfile.ZipFile(path) as zf:
            names = [n for n in zf.namelist() if n.endswith(member_suffix)]
            if not names:
                raise DataMissingError(f"gpqa: {path} holds no {member_suffix}")
            raw = zf.read(names[0], pwd=PASSWORD)
    except (zipfile.BadZipFile, RuntimeError) as exc:
        raise DataMissingError(f"gpqa: cannot read {path}: {exc}") from None
    return list(csv.DictReader(io.StringIO(raw.decode("utf-8"))))


def shuffled_options(row: dict[str, str]) -> tuple[list[str], str]:
    """The four options in this item's fixed shuffled order, and the gold letter."""
    opts = [row["Correct Answer"], row["Incorrect Answer 1"], row["Incorrect Answer 2"],
            row["Incorrect Answer 3"]]
    opts = [o.strip() for o in opts]
    seed = int.from_bytes(hashlib.sha256(row["Record ID"].encode()).digest()[:8], "big")
    order = list(range(4))
    random.Random(seed).shuffle(order)
    return [opts[i] for i in order], LETTERS[order.index(0)]


def nemo_options(rows: list[dict[str, str]]) -> list[tuple[list[str], str]]:
    """Each row's options and gold letter as NeMo Evaluator 0.3.0 orders them: one
    `random.Random(42)` draws every row's permutation in turn, options unstripped."""
    rng = random.Random(42)
    out = []
    for row in rows:
        choices = [row["Correct Answer"], row["Incorrect Answer 1"], row["Incorrect Answer 2"],
                   row["Incorrect Answer 3"]]
        perm = list(range(4))
        rng.shuffle(perm)
        shuffled = [choices[i] for i in perm]
        out.append((shuffled, LETTERS[shuffled.index(row["Correct Answer"])]))
    return out


# Where the data comes from (`nel data`, `nel list`).
SOURCE = Source(
    "gpqa",
    (SourceFile("gpqa_diamond.zip",
                "161170c5b977761b752657488698b80f4b3dfc2fae6e074b1e930c9bce8a0366"),),
    198, "GPQA diamond (Rein et al., 2023), gpqa_diamond.csv inside a zip with the "
    "authors' password; github idavidrein/gpqa dataset.zip also works",
    "Idavidrein/gpqa", "main", "CC-BY-4.0",
    notes="never stored unzipped (the authors ask that items not appear in plain text)",
    extra={"url": "https://github.com/idavidrein/gpqa/raw/main/dataset.zip"},
)


class GPQA(LoglikChoices, DatasetEnvironment):
    """GPQA diamond; category is the high-level domain, subject the subdomain."""

    name = "gpqa"
    scorer_family = "multiple-choice"  # the type `nel list` shows
    source = SOURCE
    version = "1"

    def __init__(self, *, protocol: str = "chat", num_fewshot: int | None = None,
                 prompt_set: str | None = None) -> None:
        super().__init__(protocol=protocol, num_fewshot=num_fewshot, prompt_set=prompt_set)
        path = find_local("gpqa", "dataset.zip") or resolve_file("gpqa", "gpqa_diamond.zip")
        rows = []
        raw = read_zip_csv(path)
        orders = nemo_options(raw) if self.nemo_prompts else [shuffled_options(r) for r in raw]
        for r, (opts, gold) in zip(raw, orders, strict=True):
            rows.append({"id": r["Record ID"], "question": r["Question"].strip(),
                         "raw_question": r["Question"],
                         "options": opts, "answer": gold, "domain": r["High-level domain"],
                         "subdomain": r["Subdomain"],
                         "difficulty": r.get("Writer's Difficulty Estimate", "")})
        self.rows = rows
        self._finish_init()

    def fingerprint(self) -> str:
        if self.nemo_prompts:
            return f"{super().fingerprint()}:{NEMO_TEMPLATE}:shuffle=Random(42)"
        return f"{super().fingerprint()}:{CHAT_TEMPLATE}:{COMPLETION_TEMPLATE}:shuffle=sha256(id)"

    def build_seed(self, row: dict[str, Any], idx: int) -> SeedResult:
        meta = {"idx": idx, "record_id": row["id"], "category": row["domain"],
                "subject": row["subdomain"], "difficulty": row["difficulty"]}
        if self.nemo_prompts:
            a, b, c, d = row["options"]
            return SeedResult(NEMO_TEMPLATE.format(question=row["raw_question"], A=a, B=b, C=c, D=d),
                              row["answer"], meta)
        if self.protocol == "chat":
            prompt = CHAT_TEMPLATE.format(question=row["question"],
                                          options=lettered_options(row["options"], ")"))
        else:
            prompt = COMPLETION_TEMPLATE.format(question=row["question"],
                                                options=lettered_options(row["options"], "."))
        return SeedResult(prompt, row["answer"], meta)

    def gold_response(self, seed: SeedResult) -> str:
        return f"Weighing the four options, one is consistent with the data.\n\nAnswer: {seed.expected_answer}"

    async def verify(self, response: str, expected: str, **metadata: Any) -> VerifyResult:
        from benchmarks.scoring import multichoice_regex

        return multichoice_regex(response, expected, letters=LETTERS,
                                 reasoning=metadata.get("reasoning"),
                                 options=self.option_texts(metadata, expected, "options"))
