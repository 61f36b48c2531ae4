"""Arithmetic: the GPT-3 paper's ten arithmetic tasks (Brown et al., 2020, §3.9.1).

Two- to five-digit addition and subtraction (`2da` ... `5ds`), two-digit multiplication
(`2dm`) and one-digit composite expressions (`1dc`), asked as "Question: What is 48 plus
76?\\nAnswer:". The paper drew 2,000 random problems per task; nel draws them the same way
from a fixed seed, so a run needs no download and every run asks the same items (they are
not the items of the paper's released files). `tasks:` picks a subset, `per_task:` the
number of problems each.

Scored by the first number of the answer: the answer follows "Answer:" directly, and a
model that goes on to write more questions must not be credited with a later number.
"""

from __future__ import annotations

import random
import re
from typing import Any

from benchmarks._dataset_env import DatasetEnvironment
from benchmarks._types import SeedResult, VerifyResult
from benchmarks.errors import BenchmarkConfigError

#: task -> (digits, operator word); `1dc` is handled apart (three one-digit operands).
TASKS: dict[str, tuple[int, str]] = {
    **{f"{d}da": (d, "plus") for d in range(2, 6)},
    **{f"{d}ds": (d, "minus") for d in range(2, 6)},
    "2dm": (2, "times"),
    "1dc": (1, "composite"),
}
CHAT_TEMPLATE = "Answer with the number only.\n\nQuestion: What is {expr}?"
COMPLETION_TEMPLATE = "Question: What is {expr}?\nAnswer:"
_SEED = 1_000_003
# An integer, with an optional sign; thousands separators allowed ("1,024").
_NUMBER = re.compile(r"-?\d{1,3}(?:,\d{3})+(?!\d)|-?\d+")


def _apply(op: str, a: int, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def _problem(task: str, rng: random.Random) -> tuple[str, int]:
    digits, op = TASKS[task]
    if op == "composite":  # (a op b) op c, one digit each, as the paper's 1dc
        a, b, c = (rng.randint(0, 9) for _ in range(3))
        o1, o2 = rng.choice("+-*"), rng.choice("+-*")
        return f"({a}{o1}{b}){o2}{c}", _apply(o2, _apply(o1, a, b), c)
    lo, hi = 10 ** (digits - 1), 10 ** digits - 1
    a, b = rng.randint(lo, hi), rng.randint(lo, hi)
    return f"{a} {op} {b}", _apply({"plus": "+", "minus": "-", "times": "*"}[op], a, b)


def generate(tasks: list[str], per_task: int) -> list[dict[str, Any]]:
    """The problems of `tasks`, `per_task` each, the same on every call."""
    rows = []
    for task in tasks:
        rng = random.Random(f"{_SEED}:{task}")
        for _ in range(per_task):
            expr, value = _problem(task, rng)
            rows.append({"task": task, "expr": expr, "answer": str(value)})
    return rows


def first_number_match(response: str, expected: str) -> VerifyResult:
    """Correct when the first integer of `response` equals `expected` (commas ignored)."""
    m = _NUMBER.search(response or "")
    got = m.group(0).replace(",", "") if m else None
    ok = got is not None and int(got) == int(expected)
    return VerifyResult(reward=1.0 if ok else 0.0, extracted_answer=got,
                        scoring_details={"method": "first_number"})


class Arithmetic(DatasetEnvironment):
    """GPT-3's arithmetic tasks, generated from a fixed seed, scored by the first number."""

    name = "arithmetic"
    scorer_family = "numeric"  # the type `nel list` shows
    version = "1"

    def __init__(self, *, protocol: str = "chat", num_fewshot: int | None = None,
                 tasks: list[str] | None = None, per_task: int = 200) -> None:
        super().__init__(protocol=protocol, num_fewshot=num_fewshot)
        unknown = sorted(set(tasks or ()) - set(TASKS))
        if unknown:
            raise BenchmarkConfigError(f"arithmetic: unknown task(s) {', '.join(unknown)}; the "
                                       f"tasks are {', '.join(TASKS)}")
        if not isinstance(per_task, int) or not 1 <= per_task <= 100_000:
            raise BenchmarkConfigError(f"arithmetic: per_task must be an integer from 1 to "
                                       f"100000, got {per_task!r}")
        self.tasks = list(tasks or TASKS)
        self.per_task = per_task
        self.rows = generate(self.tasks, per_task)
        self._finish_init()

    def fingerprint(self) -> str:
        return (f"{super().fingerprint()}:{CHAT_TEMPLATE}:{COMPLETION_TEMPLATE}:"
                f"{','.join(self.tasks)}:{self.per_task}")

    def build_seed(self, row: dict[str, Any], idx: int) -> SeedResult:
        template = CHAT_TEMPLATE if self.protocol == "chat" else COMPLETION_TEMPLATE
        return SeedResult(template.format(expr=row["expr"]), row["answer"],
                          {"idx": idx, "category": row["task"]})

    async def verify(self, response: str, expected: str, **metadata: Any) -> VerifyResult:
        return first_number_match(response, expected)
