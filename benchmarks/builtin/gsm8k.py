"""GSM8K: grade-school math word problems (Cobbe et al., 2021), the 1,319-item test set.

Source: github openai/grade-school-math `grade_school_math/data/test.jsonl` (MIT); the
same rows are on the hub as `openai/gsm8k` (config `main`). Gold answers end in `#### N`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

from benchmarks._dataset_env import DatasetEnvironment
from benchmarks._types import SeedResult, VerifyResult
from benchmarks.datasets import HubFile, load_file, resolve_file
from benchmarks.sources import GH_RAW, Source, SourceFile

HUB_TEST = HubFile("openai/gsm8k", "main/test-00000-of-00001.parquet")
HUB_TRAIN = HubFile("openai/gsm8k", "main/train-00000-of-00001.parquet")

CHAT_TEMPLATE = (
    "Solve this math word problem. Reason step by step, then give the final numeric "
    "answer on its own last line in the form \"#### <number>\".\n\n{question}"
)
# Completions follow the few-shot convention of the GSM8K paper: Question/Answer pairs
# whose answers end in "#### N".
COMPLETION_TEMPLATE = "Question: {question}\nAnswer:"
# NeMo Evaluator 0.3.0's prompt (`nemo_evaluator/benchmarks/gsm8k.py`), the default
# `prompt_set: nemo`: the same text on chat and completions endpoints, zero-shot.
NEMO_TEMPLATE = (
    "Solve the following math problem step by step. "
    "Put your final numerical answer after 'The answer is'.\n\n"
    "Problem: {question}"
)

_GOLD = re.compile(r"####\s*(.+?)\s*$", re.S)


def gold_answer(answer_field: str) -> str:
    """The final number of a GSM8K answer field (text after `####`, commas removed)."""
    m = _GOLD.search(answer_field)
    return (m.group(1) if m else answer_field).replace(",", "").strip()


# Where the data comes from (`nel data`, `nel list`).
SOURCE = Source(
    "gsm8k",
    (
        SourceFile("test.jsonl",
                   "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14",
                   f"{GH_RAW}/openai/grade-school-math/3101c7d5/grade_school_math/data/test.jsonl"),
        SourceFile("train.jsonl",
                   "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465",
                   f"{GH_RAW}/openai/grade-school-math/3101c7d5/grade_school_math/data/train.jsonl",
                   required=False),
    ),
    1319, "github openai/grade-school-math @ 3101c7d5", "openai/gsm8k", "main", "MIT",
)


class GSM8K(DatasetEnvironment):
    """GSM8K test set with numeric scoring (`#### N`, `\\boxed{}`, last-number fallback)."""

    name = "gsm8k"
    scorer_family = "numeric"  # the type `nel list` shows
    source = SOURCE
    version = "1"

    def __init__(self, *, protocol: str = "chat", num_fewshot: int | None = None,
                 split: str = "test", prompt_set: str | None = None) -> None:
        super().__init__(protocol=protocol, num_fewshot=num_fewshot, prompt_set=prompt_set)
        path = resolve_file("gsm8k", f"{split}.jsonl", HUB_TEST if split == "test" else HUB_TRAIN)
        self.rows = load_file(path)
        self._shots: list[dict[str, Any]] = []
        if self.num_fewshot:
            train = load_file(resolve_file("gsm8k", "train.jsonl", HUB_TRAIN))
            self._shots = train[: self.num_fewshot]
        self._finish_init()

    def fingerprint(self) -> str:
        if self.nemo_prompts:
            return f"{super().fingerprint()}:{NEMO_TEMPLATE}"
        return f"{super().fingerprint()}:{CHAT_TEMPLATE}:{COMPLETION_TEMPLATE}"

    def build_seed(self, row: dict[str, Any], idx: int) -> SeedResult:
        q = row["question"]
        meta = {"idx": idx}
        if self.nemo_prompts:
            return SeedResult(NEMO_TEMPLATE.format(question=q), gold_answer(row["answer"]), meta)
        if self.protocol == "chat":
            messages = None
            if self._shots:
                messages = []
                for s in self._shots:
                    messages.append({"role": "user", "content": CHAT_TEMPLATE.format(question=s["question"])})
                    messages.append({"role": "assistant", "content": s["answer"]})
                messages.append({"role": "user", "content": CHAT_TEMPLATE.format(question=q)})
            return SeedResult(CHAT_TEMPLATE.format(question=q), gold_answer(row["answer"]), meta, messages)
        shots = "".join(
            COMPLETION_TEMPLATE.format(question=s["question"]) + " " + s["answer"] + "\n\n"
            for s in self._shots
        )
        return SeedResult(shots + COMPLETION_TEMPLATE.format(question=q), gold_answer(row["answer"]), meta)

    async def verify(self, response: str, expected: str, **metadata: Any) -> VerifyResult:
        return _numeric_match()(response, expected, reasoning=metadata.get("reasoning"))


@functools.cache
def _numeric_match() -> Callable[..., VerifyResult]:
    """The scorer, imported on first use (listing benchmarks never loads it) and then kept:
    an import statement in `verify` ran the import machinery once per sample."""
    from benchmarks.scoring import numeric_match

    return numeric_match
