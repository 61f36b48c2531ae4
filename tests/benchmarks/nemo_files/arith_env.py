"""An `EvalEnvironment` subclass shaped like NeMo Evaluator's API-reference example.

No `name`, no `__init__` parameters (so no `protocol`), rows in `self._dataset`.
"""

from nemo_evaluator.environments import EvalEnvironment, SeedResult, VerifyResult, register


@register("nemo_style_arith")
class ArithBenchmark(EvalEnvironment):
    def __init__(self):
        super().__init__()
        self._dataset = [{"a": a, "b": b} for a, b in [(2, 3), (10, 7), (6, 6), (40, 2), (9, 0)]]

    def __len__(self) -> int:
        return len(self._dataset)

    async def seed(self, idx: int) -> SeedResult:
        row = self._dataset[idx]
        return SeedResult(prompt=f"Compute {row['a']} plus {row['b']}. Reply with the number only.",
                          expected_answer=str(row["a"] + row["b"]), metadata={"pair": idx})

    async def verify(self, response: str, expected: str, **metadata) -> VerifyResult:
        got = response.strip().rstrip(".")
        return VerifyResult(reward=1.0 if got == expected else 0.0, extracted_answer=got,
                            scoring_details={"method": "strict_number"})


@register("nemo_style_echo")
class EchoBenchmark(EvalEnvironment):
    """The BYOB tutorial's form: no `__len__` (the base class counts `_dataset`)."""

    def __init__(self):
        super().__init__()
        self._dataset = [{"prompt": "Say yes.", "answer": "yes"}, {"prompt": "Say no.", "answer": "no"}]

    async def seed(self, idx: int) -> SeedResult:
        row = self._dataset[idx]
        return SeedResult(prompt=row["prompt"], expected_answer=row["answer"])

    async def verify(self, response: str, expected: str, **meta) -> VerifyResult:
        correct = response.strip() == expected.strip()
        return VerifyResult(reward=1.0 if correct else 0.0)
