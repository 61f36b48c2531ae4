"""Core types of the benchmark API: what an environment seeds and how it verifies.

This module imports nothing heavy (no Dagster, no numpy) so that benchmark authors and
`nel serve` start fast.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class SeedResult:
    """One problem, ready to send to a model.

    Attributes:
        prompt: The user prompt (chat) or the full completion prompt.
        expected_answer: The gold answer in the form the scorer compares against.
        metadata: Free-form item metadata (category, subject, cluster id, ...).
        messages: Full chat messages when the benchmark builds them itself (few-shot
            turns); when given they take precedence over `prompt` for chat endpoints.
        system: A benchmark-specific system prompt (a user system prompt is prepended).
        sandbox_spec: What a code sandbox needs for this item, if any.
        images: Images shown with the prompt (file paths or `data:` URLs); the chat solvers
            send them as `image_url` content parts after the prompt text.
    """

    prompt: str
    expected_answer: str
    metadata: dict[str, Any] = field(default_factory=dict)
    messages: list[dict[str, Any]] | None = None
    system: str | None = None
    sandbox_spec: dict[str, Any] | None = None
    images: list[str] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form used by `nel serve` and the gym client."""
        return {
            "prompt": self.prompt,
            "expected_answer": self.expected_answer,
            "metadata": self.metadata,
            "messages": self.messages,
            "system": self.system,
            "sandbox_spec": self.sandbox_spec,
            # only when there are images: seed hashes of text benchmarks stay as they were
            **({"images": self.images} if self.images else {}),
        }


@dataclass(slots=True)
class VerifyResult:
    """The verdict on one response.

    Attributes:
        reward: Score in [0, 1] (most scorers give 0 or 1).
        extracted_answer: What the scorer took as the model's answer (None if none found).
        scoring_details: How the verdict was reached: at least `method` (the rule that
            extracted the answer) and, where relevant, `source` (content / reasoning).
        metadata: Extra per-item values (e.g. judge verdicts) carried into the results.
    """

    reward: float
    extracted_answer: str | None = None
    scoring_details: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form used by `nel serve` and the gym client."""
        return {
            "reward": self.reward,
            "extracted_answer": self.extracted_answer,
            "scoring_details": self.scoring_details,
            "metadata": self.metadata,
        }


class EvalEnvironment(ABC):
    """A benchmark: a fixed, indexable set of problems and a way to verify answers.

    Subclasses implement `seed` and `verify`, and either `__len__` or, as in NeMo Evaluator,
    keep their rows in `self._dataset` (set up by `super().__init__()`), which the default
    `__len__` counts. `seed(idx)` must be deterministic for a given dataset and version.
    `name` and `version` identify results; bump `version` whenever the prompt or the scorer
    changes, so stored results become stale.
    """

    name: str = "unnamed"
    version: str = "1"

    def __init__(self) -> None:
        # NeMo Evaluator's base class takes no arguments and starts an empty row list;
        # environments written for it call `super().__init__()` and fill `_dataset`.
        self._dataset: list[dict[str, Any]] = []

    @property
    def dataset(self) -> list[dict[str, Any]]:
        """The rows behind the problems, for environments that keep them in `_dataset`."""
        return getattr(self, "_dataset", [])

    @dataset.setter
    def dataset(self, value: list[dict[str, Any]]) -> None:
        self._dataset = value

    async def dataset_size(self) -> int:
        """Number of problems (NeMo Evaluator's async spelling of `len(env)`)."""
        return len(self)

    @abstractmethod
    async def seed(self, idx: int) -> SeedResult:
        """Return problem `idx` (0 <= idx < len(self))."""

    @abstractmethod
    async def verify(self, response: str, expected: str, **metadata: Any) -> VerifyResult:
        """Score `response` against `expected`; `metadata` is the item's seed metadata
        plus `reasoning` (the model's reasoning text, when it gave one separately)."""

    def __len__(self) -> int:
        """Number of problems: the length of `_dataset` unless a subclass says otherwise."""
        rows = getattr(self, "_dataset", None)
        if rows is None:
            # Neither `__len__` nor `_dataset`: say so instead of evaluating zero problems.
            raise TypeError(f"{type(self).__qualname__} defines neither __len__ nor a _dataset "
                            "list (call super().__init__() and fill self._dataset)")
        return len(rows)

    def fingerprint(self) -> str:
        """A string that changes whenever results would change (prompt, scorer, version).

        Subclasses with settings (few-shot count, prompt template) extend it.
        """
        return f"{type(self).__module__}.{type(self).__qualname__}:{self.name}:{self.version}"

    def data_fingerprint(self) -> str:
        """Content hash of the underlying data; '' when unknown (the loader sets it)."""
        return getattr(self, "_data_hash", "")

    def gold_response(self, seed: SeedResult) -> str:
        """How a model that knows the answer would state it (used by `nel validate`).

        Benchmarks whose scorer expects a particular form (a boxed expression, a letter)
        override this so the gold self-consistency check is meaningful.
        """
        return f"The answer is {seed.expected_answer}.\nAnswer: {seed.expected_answer}"

    async def close(self) -> None:
        """Release resources (HTTP sessions for remote environments)."""
