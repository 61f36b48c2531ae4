"""TriviaQA (Joshi et al., 2017), closed book: answer a trivia question from memory; any of
the answer's aliases counts.

Sources, both read in their original schema:
- default: MosaicML's gauntlet subset `triviaqa/triviaqa_sm_sub.jsonl` (github
  mosaicml/llm-foundry @ 383efbff; 3,000 questions; rows `{context: "Question: ...\\nAnswer:",
  answer, aliases}`);
- the hub's `mandarjoshi/trivia_qa` config `rc.nocontext` (rows `{question, question_id,
  answer: {value, aliases, normalized_aliases, ...}}`), as JSONL or Parquet, selected with
  `params: {file: <relpath under triviaqa/>}` (validation: 17,944 questions).
Scored by `triviaqa_match`: the answer line (or first line) must equal or contain an alias.
"""

from __future__ import annotations

import json
from typing import Any

from benchmarks._dataset_env import DatasetEnvironment
from benchmarks._types import SeedResult, VerifyResult
from benchmarks.datasets import load_file, resolve_file
from benchmarks.errors import NelError
from benchmarks.sources import GH_RAW, Source, SourceFile

CHAT_TEMPLATE = (
    "Answer this trivia question from your own knowledge. Reply with a line "
    "\"Answer: <answer>\" giving just the answer, as briefly as possible.\n\n"
    "Question: {question}"
)
COMPLETION_TEMPLATE = "Question: {question}\nAnswer:"
# NeMo Evaluator 0.3.0's prompt (`nemo_evaluator/benchmarks/triviaqa.py`), the default
# `prompt_set: nemo`, on both endpoints; `triviaqa_match` reads its one-line answers.
NEMO_TEMPLATE = "Answer with a short factual answer.\n\nQuestion: {question}\nAnswer:"


def normalise_row(row: dict[str, Any]) -> dict[str, Any]:
    """One row of either schema as {question, answer, aliases, id}."""
    if "context" in row:  # MosaicML subset
        q = str(row["context"]).strip()
        q = q.removeprefix("Question:").strip()
        q = q.removesuffix("Answer:").strip()
        answer = str(row["answer"]).strip()
        aliases = [str(a) for a in row.get("aliases") or []]
        rid = None
    elif isinstance(row.get("answer"), dict):  # hub rc.nocontext
        q = str(row["question"]).strip()
        answer = str(row["answer"].get("value") or "").strip()
        aliases = [str(a) for a in row["answer"].get("aliases") or []]
        rid = row.get("question_id")
    else:
        raise NelError(f"triviaqa: unrecognised row schema (keys {sorted(row)}); expected "
                       "{context, answer, aliases} or the hub's rc.nocontext rows")
    # The canonical answer first, then the aliases in their order, without duplicates.
    seen: list[str] = []
    for a in [answer, *aliases]:
        if a and a not in seen:
            seen.append(a)
    return {"question": q, "answer": answer, "aliases": seen, "id": rid}


# Where the data comes from (`nel data`, `nel list`).
SOURCE = Source(
    "triviaqa",
    (SourceFile("triviaqa_sm_sub.jsonl",
                "e3e8222e94cae291d7ab132e59f09c4f51580ed3e23639cf29c2926b4c8284e9",
                f"{GH_RAW}/mosaicml/llm-foundry/383efbff/scripts/eval/local_data/"
                "world_knowledge/triviaqa_sm_sub.jsonl"),),
    3000, "MosaicML gauntlet subset of TriviaQA (github mosaicml/llm-foundry @ 383efbff); "
    "the full rc.nocontext validation split (17,944) loads with params.file",
    "mandarjoshi/trivia_qa", "main", "Apache-2.0",
)


class TriviaQA(DatasetEnvironment):
    """TriviaQA closed-book; the gold is the JSON list of acceptable aliases."""

    name = "triviaqa"
    scorer_family = "alias-match"  # the type `nel list` shows
    source = SOURCE
    version = "1"

    def __init__(self, *, protocol: str = "chat", num_fewshot: int | None = None,
                 file: str = "triviaqa_sm_sub.jsonl", prompt_set: str | None = None) -> None:
        super().__init__(protocol=protocol, num_fewshot=num_fewshot, prompt_set=prompt_set)
        self.rows = [normalise_row(r) for r in load_file(resolve_file("triviaqa", file))]
        self._finish_init()

    def fingerprint(self) -> str:
        if self.nemo_prompts:
            return f"{super().fingerprint()}:{NEMO_TEMPLATE}"
        return f"{super().fingerprint()}:{CHAT_TEMPLATE}:{COMPLETION_TEMPLATE}"

    def build_seed(self, row: dict[str, Any], idx: int) -> SeedResult:
        meta = {"idx": idx, "answer": row["answer"]}
        if row["id"]:
            meta["question_id"] = row["id"]
        tpl = CHAT_TEMPLATE if self.protocol == "chat" else COMPLETION_TEMPLATE
        if self.nemo_prompts:
            tpl = NEMO_TEMPLATE
        return SeedResult(tpl.format(question=row["question"]),
                          json.dumps(row["aliases"], ensure_ascii=False), meta)

    def gold_response(self, seed: SeedResult) -> str:
        from benchmarks.scoring import normalize_text

        # A few canonical answers normalise to nothing (`£`, MosaicML's clipped `(a`);
        # a model would name those in words, as the first usable alias does.
        first = next((a for a in json.loads(seed.expected_answer) if normalize_text(a)),
                     seed.metadata["answer"])
        return f"Answer: {first}"

    def golds_equivalent(self, a: SeedResult, b: SeedResult) -> bool:
        """Whether two items share an acceptable answer (after normalisation)."""
        from benchmarks.scoring import normalize_text

        na = {normalize_text(x) for x in json.loads(a.expected_answer)} - {""}
        nb = {normalize_text(x) for x in json.loads(b.expected_answer)} - {""}
        return bool(na & nb)

    async def verify(self, response: str, expected: str, **metadata: Any) -> VerifyResult:
        from benchmarks.scoring import triviaqa_match

        return triviaqa_match(response, json.loads(expected), reasoning=metadata.get("reasoning"))
