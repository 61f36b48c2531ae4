"""SimpleQA (Wei et al., 2024): 4,326 short fact-seeking questions with one indisputable
answer, graded by an LLM judge as correct, incorrect or not attempted.

Source: openai/simple-evals `simple_qa_test_set.csv` (columns `metadata` (a Python dict
literal with topic, answer_type, urls), `problem`, `answer`); the hub mirror is
`basicv8vc/SimpleQA`. nel reads `simpleqa/simple_qa_test_set.csv`.

This benchmark REQUIRES a `type: judge` metric (judge kind `simpleqa`, see
`benchmarks.judges`): the reward is 1 for CORRECT, else 0, and the per-sample grade lands in
`scoring_details["judge"]`. The authors' headline numbers (accuracy, attempted rate,
accuracy given attempted, and their F-score, the harmonic mean of the first and third) come
from `benchmarks.judges.simpleqa_metrics` over the grades. Category = topic.
"""

from __future__ import annotations

import ast
from typing import Any

from benchmarks._dataset_env import DatasetEnvironment
from benchmarks._types import SeedResult, VerifyResult
from benchmarks.datasets import load_file, resolve_file
from benchmarks.sources import OPENAI_BLOB, Source, SourceFile

CHAT_TEMPLATE = "{question}"
# A bare question is SimpleQA's chat prompt; completions need an answer cue.
COMPLETION_TEMPLATE = "Question: {question}\nAnswer:"


def _meta(raw: str) -> dict[str, Any]:
    try:
        val = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return {}
    return val if isinstance(val, dict) else {}


# Where the data comes from (`nel data`, `nel list`).
SOURCE = Source(
    "simpleqa",
    (SourceFile("simple_qa_test_set.csv",
                "feee3f7e7db3617e94e8fcf1977b756ec420ef8568f4e0fcbbe0e92e9d5fc032",
                f"{OPENAI_BLOB}/simple_qa_test_set.csv"),),
    4326, "openai/simple-evals simple_qa_test_set.csv (Wei et al., 2024)",
    "basicv8vc/SimpleQA", "main", "MIT", judge=True,
)


class SimpleQA(DatasetEnvironment):
    """SimpleQA; needs a judge (`requires_judge`)."""

    name = "simpleqa"
    scorer_family = "judge"  # the type `nel list` shows
    source = SOURCE
    version = "1"
    judge_kind = "simpleqa"
    requires_judge = True

    def __init__(self, *, protocol: str = "chat", num_fewshot: int | None = None,
                 prompt_set: str | None = None) -> None:
        super().__init__(protocol=protocol, num_fewshot=num_fewshot, prompt_set=prompt_set)
        rows = []
        for r in load_file(resolve_file("simpleqa", "simple_qa_test_set.csv")):
            m = _meta(r["metadata"])
            rows.append({"question": r["problem"], "answer": r["answer"],
                         "topic": m.get("topic"), "answer_type": m.get("answer_type")})
        self.rows = rows
        self._finish_init()

    def fingerprint(self) -> str:
        return f"{super().fingerprint()}:{CHAT_TEMPLATE}:{COMPLETION_TEMPLATE}:judge={self.judge_kind}"

    def build_seed(self, row: dict[str, Any], idx: int) -> SeedResult:
        meta = {"idx": idx, "category": row["topic"], "answer_type": row["answer_type"],
                "question": row["question"]}
        # NeMo Evaluator sends the bare question to both endpoints (`prompt_set: nemo`).
        chat = self.protocol == "chat" or self.nemo_prompts
        tpl = CHAT_TEMPLATE if chat else COMPLETION_TEMPLATE
        return SeedResult(tpl.format(question=row["question"]), row["answer"], meta)

    def gold_response(self, seed: SeedResult) -> str:
        return seed.expected_answer

    async def verify(self, response: str, expected: str, **metadata: Any) -> VerifyResult:
        # A provisional verdict: the judge decides. Without a judge nel refuses to run.
        text = (response or "").strip()
        return VerifyResult(0.0, text or None, {"method": "judge_pending" if text else "none",
                                                "source": "content"})
