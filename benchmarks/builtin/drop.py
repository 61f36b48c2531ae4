"""DROP (Dua et al., 2019): discrete reasoning over Wikipedia passages, dev set (9,536
questions over 588 passages).

Source: allennlp's `drop_dataset.zip` -> `drop_dataset_dev.json` (hub: `ucinlp/drop`), read
in its original schema::

    {passage_id: {"passage": str,
                  "qa_pairs": [{"question": str, "query_id": str,
                                "answer": {"number": str, "date": {"day", "month", "year"},
                                           "spans": [str]},
                                "validated_answers": [<answer>, ...]}]}}

Each answer is exactly one of a number, a date or a list of spans; the question's gold is
the original answer plus every validated answer (the best one counts). Scored by DROP's
multi-span F1 with number normalisation (`fuzzy_match`, reward = F1); the prompt asks for
several spans separated by semicolons. Questions on one passage share cluster = passage id.
"""

from __future__ import annotations

import json
from typing import Any

from benchmarks._dataset_env import DatasetEnvironment
from benchmarks._types import SeedResult, VerifyResult
from benchmarks.datasets import resolve_file
from benchmarks.errors import NelError
from benchmarks.sources import Source, SourceFile

SPAN_SEP = ";"

CHAT_TEMPLATE = (
    "Read the passage and answer the question. Reasoning is allowed, but finish with a line "
    "\"Answer: ...\" holding only the answer: a number, a date, or text copied from the "
    "passage. If the question has several answers, separate them with semicolons.\n\n"
    "Passage: {passage}\n\nQuestion: {question}"
)
COMPLETION_TEMPLATE = "Passage: {passage}\nQuestion: {question}\nAnswer:"


def answer_spans(answer: dict[str, Any]) -> list[str]:
    """One DROP answer object as a list of spans ([] when it is empty)."""
    num = str(answer.get("number") or "").strip()
    if num:
        return [num]
    spans = [str(s).strip() for s in answer.get("spans") or [] if str(s).strip()]
    if spans:
        return spans
    date = answer.get("date") or {}
    parts = [str(date.get(k) or "").strip() for k in ("day", "month", "year")]
    text = " ".join(p for p in parts if p)
    return [text] if text else []


def answer_type(answer: dict[str, Any]) -> str:
    """number / date / span / spans (DROP's answer-type breakdown)."""
    if str(answer.get("number") or "").strip():
        return "number"
    spans = [s for s in answer.get("spans") or [] if str(s).strip()]
    if spans:
        return "span" if len(spans) == 1 else "spans"
    return "date"


def load_drop(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Flatten the original dev-set JSON to one row per question (in file order)."""
    if not isinstance(data, dict):
        raise NelError("drop: expected the original drop_dataset_dev.json (an object keyed "
                       "by passage id)")
    rows = []
    for pid, block in data.items():
        for qa in block["qa_pairs"]:
            golds: list[list[str]] = []
            for ans in [qa["answer"], *(qa.get("validated_answers") or [])]:
                spans = answer_spans(ans)
                if spans and spans not in golds:
                    golds.append(spans)
            if not golds:
                continue  # a handful of upstream questions have no usable answer
            rows.append({"passage_id": pid, "passage": block["passage"],
                         "question": qa["question"], "query_id": qa.get("query_id"),
                         "golds": golds, "answer_type": answer_type(qa["answer"])})
    return rows


# Where the data comes from (`nel data`, `nel list`).
SOURCE = Source(
    "drop",
    (SourceFile("drop_dataset_dev.json"),),
    9536, "DROP dev set (Dua et al., 2019), drop_dataset/drop_dataset_dev.json inside "
    "allennlp's drop_dataset.zip",
    "ucinlp/drop", "main", "CC-BY-SA-4.0",
    extra={"url": "https://s3-us-west-2.amazonaws.com/allennlp/datasets/drop/drop_dataset.zip"},
)


class DROP(DatasetEnvironment):
    """DROP dev; category = answer type, cluster = passage id, reward = F1."""

    name = "drop"
    scorer_family = "f1"  # the type `nel list` shows
    source = SOURCE
    version = "1"

    def __init__(self, *, protocol: str = "chat", num_fewshot: int | None = None,
                 file: str = "drop_dataset_dev.json") -> None:
        super().__init__(protocol=protocol, num_fewshot=num_fewshot)
        path = resolve_file("drop", file)
        with open(path, encoding="utf-8") as f:
            self.rows = load_drop(json.load(f))
        self._finish_init()

    def fingerprint(self) -> str:
        return f"{super().fingerprint()}:{CHAT_TEMPLATE}:{COMPLETION_TEMPLATE}:sep={SPAN_SEP}"

    def build_seed(self, row: dict[str, Any], idx: int) -> SeedResult:
        meta = {"idx": idx, "category": row["answer_type"], "cluster": row["passage_id"],
                "query_id": row["query_id"]}
        tpl = CHAT_TEMPLATE if self.protocol == "chat" else COMPLETION_TEMPLATE
        prompt = tpl.format(passage=row["passage"], question=row["question"])
        return SeedResult(prompt, json.dumps(row["golds"], ensure_ascii=False), meta)

    def gold_response(self, seed: SeedResult) -> str:
        first = json.loads(seed.expected_answer)[0]
        return f"Looking at the passage again.\nAnswer: {f'{SPAN_SEP} '.join(first)}"

    def golds_equivalent(self, a: SeedResult, b: SeedResult) -> bool:
        """Whether two items' golds share a normalised token (F1 would then be partial)."""
        from benchmarks.scoring import normalize_span

        def toks(s: SeedResult) -> set[str]:
            return {t for g in json.loads(s.expected_answer) for sp in g
                    for t in normalize_span(sp).split()}

        return bool(toks(a) & toks(b))

    async def verify(self, response: str, expected: str, **metadata: Any) -> VerifyResult:
        from benchmarks.scoring import fuzzy_match

        golds = json.loads(expected)
        return fuzzy_match(response, golds, span_sep=SPAN_SEP,
                           reasoning=metadata.get("reasoning"))
