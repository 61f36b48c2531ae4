"""MMLU (Hendrycks et al., 2021): 57 subjects, 14,042 test questions, 4 options.

Source: the authors' data.tar (`test/<subject>_test.csv`, `dev/<subject>_dev.csv`, no header:
question, A, B, C, D, answer). The hub copy `cais/mmlu` (config `all`) holds the same rows.
By default (`prompt_set: nemo`) both endpoints get NeMo Evaluator 0.3.0's prompt; under
`prompt_set: nel` the completions prompt is the authors' (optionally 5-shot from `dev`, per
subject) and the chat prompt asks for an `Answer: X` line.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from benchmarks._dataset_env import DatasetEnvironment, lettered_options
from benchmarks._types import SeedResult, VerifyResult
from benchmarks.datasets import HubFile, data_root, find_local, load_file, resolve_file
from benchmarks.errors import DataMissingError
from benchmarks.loglik_items import LoglikChoices
from benchmarks.sources import Source, SourceFile

HUB_TEST = HubFile("cais/mmlu", "all/test-00000-of-00001.parquet")
HUB_DEV = HubFile("cais/mmlu", "all/dev-00000-of-00001.parquet")
LETTERS = "ABCD"

CHAT_TEMPLATE = (
    "Answer the following multiple choice question about {subject}. Think step by step, "
    "then finish with a line of the form \"Answer: X\" where X is one of A, B, C or D.\n\n"
    "{question}\n\n{options}"
)
COMPLETION_HEADER = "The following are multiple choice questions (with answers) about {subject}.\n\n"
# NeMo Evaluator 0.3.0's prompt (`nemo_evaluator/benchmarks/mmlu.py`), the default
# `prompt_set: nemo`: the same text on chat and completions endpoints, zero-shot.
NEMO_TEMPLATE = (
    "Answer the following multiple choice question. The last line of your response "
    "should be of the following format: 'Answer: $LETTER' (without quotes) where "
    "LETTER is one of ABCD. Think step by step before answering.\n\n"
    "{Question}\n\nA) {A}\nB) {B}\nC) {C}\nD) {D}"
)

# Hendrycks' four super-categories, used as coarse categories next to the subject.
_STEM = {
    "abstract_algebra", "anatomy", "astronomy", "college_biology", "college_chemistry",
    "college_computer_science", "college_mathematics", "college_physics", "computer_security",
    "conceptual_physics", "electrical_engineering", "elementary_mathematics",
    "high_school_biology", "high_school_chemistry", "high_school_computer_science",
    "high_school_mathematics", "high_school_physics", "high_school_statistics",
    "machine_learning",
}
_HUMANITIES = {
    "formal_logic", "high_school_european_history", "high_school_us_history",
    "high_school_world_history", "international_law", "jurisprudence", "logical_fallacies",
    "moral_disputes", "moral_scenarios", "philosophy", "prehistory", "professional_law",
    "world_religions",
}
_SOCIAL = {
    "econometrics", "high_school_geography", "high_school_government_and_politics",
    "high_school_macroeconomics", "high_school_microeconomics", "high_school_psychology",
    "human_sexuality", "professional_psychology", "public_relations", "security_studies",
    "sociology", "us_foreign_policy",
}


def supercategory(subject: str) -> str:
    """STEM / humanities / social sciences / other, as in the MMLU paper."""
    if subject in _STEM:
        return "stem"
    if subject in _HUMANITIES:
        return "humanities"
    if subject in _SOCIAL:
        return "social_sciences"
    return "other"


def _read_split_dir(folder: Path, split: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for f in sorted(folder.glob(f"*_{split}.csv")):
        subject = f.name[: -len(f"_{split}.csv")]
        with open(f, encoding="utf-8", newline="") as fh:
            for rec in csv.reader(fh):
                if len(rec) != 6:
                    raise DataMissingError(f"{f}: expected 6 columns, got {len(rec)}")
                rows.append({"subject": subject, "question": rec[0],
                             "choices": rec[1:5], "answer": rec[5].strip()})
    return rows


def _load_split(split: str) -> list[dict[str, Any]]:
    local = find_local("mmlu", split)
    if local is not None and local.is_dir():
        rows = _read_split_dir(local, split)
        if rows:
            return rows
    try:
        path = resolve_file("mmlu", f"{split}/", HUB_TEST if split == "test" else HUB_DEV)
    except DataMissingError:
        where = (data_root() or Path("$NEL_DATA_DIR")) / "mmlu" / split
        raise DataMissingError(
            f"mmlu: {split} CSVs not found; put the authors' {split}/<subject>_{split}.csv files "
            f"in {where} (or run `nel data pull mmlu` on a connected machine)"
        ) from None
    return [
        {"subject": r["subject"], "question": r["question"], "choices": list(r["choices"]),
         "answer": LETTERS[int(r["answer"])]}
        for r in load_file(path)
    ]


# Where the data comes from (`nel data`, `nel list`).
SOURCE = Source(
    "mmlu",
    (SourceFile("test/"), SourceFile("dev/", required=False)),
    14042, "Hendrycks et al. data.tar (people.eecs.berkeley.edu/~hendrycks/data.tar)",
    "cais/mmlu", "main", "MIT",
    notes="57 subjects; test/<subject>_test.csv, dev/<subject>_dev.csv (no header)",
    extra={"url": "https://people.eecs.berkeley.edu/~hendrycks/data.tar"},
)


class MMLU(LoglikChoices, DatasetEnvironment):
    """MMLU test set; categories are subjects, with the super-category in metadata."""

    name = "mmlu"
    scorer_family = "multiple-choice"  # the type `nel list` shows
    source = SOURCE
    version = "1"
    loglik_options_column = "choices"

    def __init__(self, *, protocol: str = "chat", num_fewshot: int | None = None,
                 subjects: list[str] | None = None, prompt_set: str | None = None) -> None:
        super().__init__(protocol=protocol, num_fewshot=num_fewshot, prompt_set=prompt_set)
        rows = _load_split("test")
        if subjects:
            wanted = set(subjects)
            rows = [r for r in rows if r["subject"] in wanted]
        self.rows = rows
        self._dev: dict[str, list[dict[str, Any]]] = {}
        if self.num_fewshot:
            for r in _load_split("dev"):
                self._dev.setdefault(r["subject"], []).append(r)
        self._finish_init()

    def fingerprint(self) -> str:
        if self.nemo_prompts:
            return f"{super().fingerprint()}:{NEMO_TEMPLATE}"
        return f"{super().fingerprint()}:{CHAT_TEMPLATE}:{COMPLETION_HEADER}"

    def loglik_header(self, row: dict[str, Any]) -> str:
        """lm-eval's MMLU description: the subject, spelled out."""
        subject = row["subject"].replace("_", " ")
        return f"The following are questions (with answers) about {subject}.\n\n"

    def build_seed(self, row: dict[str, Any], idx: int) -> SeedResult:
        subject = row["subject"]
        pretty = subject.replace("_", " ")
        meta = {"idx": idx, "category": subject, "supercategory": supercategory(subject)}
        if self.nemo_prompts:
            a, b, c, d = row["choices"]
            prompt = NEMO_TEMPLATE.format(Question=row["question"], A=a, B=b, C=c, D=d)
            return SeedResult(prompt, row["answer"], meta)
        shots = self._dev.get(subject, [])[: self.num_fewshot]
        if self.protocol == "chat":
            prompt = CHAT_TEMPLATE.format(subject=pretty, question=row["question"],
                                          options=lettered_options(row["choices"], ")"))
            messages = None
            if shots:
                messages = []
                for s in shots:
                    messages.append({"role": "user", "content": CHAT_TEMPLATE.format(
                        subject=pretty, question=s["question"], options=lettered_options(s["choices"], ")"))})
                    messages.append({"role": "assistant", "content": f"Answer: {s['answer']}"})
                messages.append({"role": "user", "content": prompt})
            return SeedResult(prompt, row["answer"], meta, messages)
        body = COMPLETION_HEADER.format(subject=pretty)
        for s in [*shots, None]:
            r = s or row
            body += f"{r['question']}\n{lettered_options(r['choices'], '.')}\nAnswer:"
            body += f" {s['answer']}\n\n" if s else ""
        return SeedResult(body, row["answer"], meta)

    async def verify(self, response: str, expected: str, **metadata: Any) -> VerifyResult:
        from benchmarks.scoring import multichoice_regex

        return multichoice_regex(response, expected, letters=LETTERS,
                                 reasoning=metadata.get("reasoning"),
                                 options=self.option_texts(metadata, expected, "choices"))
