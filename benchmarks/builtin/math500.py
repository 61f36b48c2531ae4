"""MATH-500 (Lightman et al., 2023): the 500-problem MATH test subset of "Let's Verify Step
by Step".

Source: github openai/prm800k `prm800k/math_splits/test.jsonl` (rows problem, solution,
answer, subject, level, unique_id; sha256 35dc4108…6132), the same rows as the hub's
`HuggingFaceH4/MATH-500`. nel reads `math500/test.jsonl`. Scored by symbolic equivalence of
the final answer (`math_match`: `\\boxed{}`, LaTeX, sympy with a timeout).
"""

from __future__ import annotations

from typing import Any

from benchmarks._dataset_env import DatasetEnvironment
from benchmarks._types import SeedResult, VerifyResult
from benchmarks.datasets import HubFile, load_file, resolve_file
from benchmarks.sources import GH_RAW, Source, SourceFile

HUB_TEST = HubFile("HuggingFaceH4/MATH-500", "test.jsonl")

CHAT_TEMPLATE = (
    "Solve the following math problem. Show your reasoning, and put the final answer, "
    "simplified, inside \\boxed{{}}.\n\n{problem}"
)
# Minerva-style completion prompt: the model continues the solution and is expected to
# state "The final answer is $...$" (math_match also reads \boxed{}).
COMPLETION_TEMPLATE = "Problem:\n{problem}\n\nSolution:"
# NeMo Evaluator 0.3.0's prompt (`nemo_evaluator/benchmarks/math500.py`), the default
# `prompt_set: nemo`, on chat and completions endpoints alike. `math_match` reads the
# `Answer: ...` line it asks for (0.3.0's own scorer compares that line as a string).
NEMO_TEMPLATE = (
    "Solve the following math problem step by step. The last line of your response "
    "should be of the form Answer: $ANSWER (without quotes) where $ANSWER is the answer "
    "to the problem.\n\n{problem}"
)


# Where the data comes from (`nel data`, `nel list`).
SOURCE = Source(
    "math500",
    (SourceFile("test.jsonl",
                "35dc41080a3680858b27fa7e0533d2d547825316fc5dafe5d316f4ccc5a06132",
                f"{GH_RAW}/openai/prm800k/main/prm800k/math_splits/test.jsonl"),),
    500, "openai/prm800k prm800k/math_splits/test.jsonl (Lightman et al., 2023)",
    "HuggingFaceH4/MATH-500", "main", "MIT",
)


class MATH500(DatasetEnvironment):
    """MATH-500; category is the MATH subject, difficulty the level (1-5)."""

    name = "math500"
    scorer_family = "math-equivalence"  # the type `nel list` shows
    source = SOURCE
    version = "1"

    def __init__(self, *, protocol: str = "chat", num_fewshot: int | None = None,
                 timeout: float = 5.0, prompt_set: str | None = None) -> None:
        super().__init__(protocol=protocol, num_fewshot=num_fewshot, prompt_set=prompt_set)
        self.rows = load_file(resolve_file("math500", "test.jsonl", HUB_TEST))
        self.timeout = timeout
        self._finish_init()

    def fingerprint(self) -> str:
        if self.nemo_prompts:
            return f"{super().fingerprint()}:{NEMO_TEMPLATE}"
        return f"{super().fingerprint()}:{CHAT_TEMPLATE}:{COMPLETION_TEMPLATE}"

    def build_seed(self, row: dict[str, Any], idx: int) -> SeedResult:
        meta = {"idx": idx, "category": row["subject"], "subject": row["subject"],
                "difficulty": int(row["level"]), "unique_id": row.get("unique_id")}
        tpl = CHAT_TEMPLATE if self.protocol == "chat" else COMPLETION_TEMPLATE
        if self.nemo_prompts:
            tpl = NEMO_TEMPLATE
        return SeedResult(tpl.format(problem=row["problem"]), row["answer"], meta)

    def gold_response(self, seed: SeedResult) -> str:
        if self.nemo_prompts:  # the form NeMo Evaluator's prompt asks for
            return f"Working through the algebra carefully.\nAnswer: {seed.expected_answer}"
        return ("Working through the algebra carefully gives the result.\n\n"
                f"The final answer is $\\boxed{{{seed.expected_answer}}}$.")

    def golds_equivalent(self, a: SeedResult, b: SeedResult) -> bool:
        """Whether two items' gold answers are the same mathematical answer."""
        from benchmarks.scoring import math_equiv

        return math_equiv(a.expected_answer, b.expected_answer, timeout=self.timeout)

    async def verify(self, response: str, expected: str, **metadata: Any) -> VerifyResult:
        from benchmarks.scoring import math_match

        return math_match(response, expected, reasoning=metadata.get("reasoning"),
                          timeout=self.timeout)
