"""`ModelResponse`: what one model call produced."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class ModelResponse:
    """What one model call produced (NeMo Evaluator's `ModelResponse` fields included).

    Attributes:
        content: The answer text.
        reasoning_content: Reasoning the server returned separately, if any.
        finish_reason: `stop`, `length`, ...
        prompt_tokens: Input tokens (server-reported).
        completion_tokens: Output tokens (server-reported).
        reasoning_tokens: Reasoning tokens, when the server reports them.
        latency_ms: Time from the first attempt to the answer.
        attempts: Requests it took (retries included).
        model: The model the server says answered.
        raw: The parsed response body (redacted).
        total_tokens: `usage.total_tokens`, or prompt + completion when only those are given.
    """

    content: str
    reasoning_content: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None
    latency_ms: float = 0.0
    attempts: int = 1
    model: str | None = None
    raw: dict[str, Any] | None = field(default=None, repr=False)
    total_tokens: int | None = None
    cached: bool = False

    @property
    def raw_response(self) -> dict[str, Any]:
        """The full response body (NeMo Evaluator's name for `raw`)."""
        return self.raw or {}
