"""The `simple` solver: one request per problem, as `ChatSolver` / `CompletionSolver`.

`run_evaluation` drives these through nel's shard loop (`loop.run_shard`: retries,
adaptive concurrency, reasoning split, failure categories); `solve` is the same request
for one problem, for code that calls a solver directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from benchmarks._types import SeedResult
from benchmarks.errors import NelError
from nel_assets.engine.loop import build_request
from nel_resources.model_client import ModelClient, ModelResponse


@dataclass(slots=True)
class SolveResult:
    """A solver's answer to one problem.

    Attributes:
        response: The answer text.
        model_response: The model call behind it.
        trajectory: The conversation, ending with the answer.
        reward: A reward the solver computed itself (None: the environment verifies).
        scoring_details: Details of that reward.
        error: Set when the solver failed and returned no answer.
    """

    response: str
    model_response: ModelResponse | None = None
    trajectory: list[dict[str, Any]] = field(default_factory=list)
    reward: float | None = None
    scoring_details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


@runtime_checkable
class Solver(Protocol):
    """Turns one seeded problem into an answer."""

    async def solve(self, task: SeedResult) -> SolveResult:
        """Answer one problem."""
        ...


class _SimpleSolver:
    protocols: tuple[str, ...] = ()

    def __init__(self, client: ModelClient, system_prompt: str | None = None) -> None:
        if not isinstance(client, ModelClient):
            raise NelError(f"{type(self).__name__} needs nel's ModelClient, not "
                           f"{type(client).__name__}")
        if client.protocol not in self.protocols:
            raise NelError(f"{type(self).__name__} needs a client speaking "
                           f"{' or '.join(self.protocols)}, not {client.protocol}")
        self.client = client
        self.system_prompt = system_prompt

    async def solve(self, task: SeedResult) -> SolveResult:
        """One request for `task`, built the way the evaluation loop builds it."""
        messages, prompt, _ = build_request(task, self.client.protocol, self.system_prompt)
        resp = await self.client.generate(messages, prompt)
        sent = messages if messages is not None else [{"role": "user", "content": prompt}]
        return SolveResult(response=resp.content, model_response=resp,
                           trajectory=[*sent, {"role": "assistant", "content": resp.content}])

    async def close(self) -> None:
        """Close the client's connections."""
        await self.client.close()


class ChatSolver(_SimpleSolver):
    """One chat request per problem; `system_prompt` goes before the benchmark's own."""

    protocols = ("chat_completions", "responses")


class CompletionSolver(_SimpleSolver):
    """One completions request per problem (system prompt, then the prompt text)."""

    protocols = ("completions",)
