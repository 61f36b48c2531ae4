"""The solver contract: what every solver gets for one sample and what it hands back.

A solver turns one seeded problem into an answer. `simple` makes one model call; the agentic
solvers (`tool_calling`, `gym_delegation`, ...) run several turns and call tools. All of them
return a `SolveResult` whose `steps` are the sample's ATIF trajectory steps (the format NeMo
Evaluator writes), so exports, the Parquet store and failure analysis read every solver the
same way.

Tools come from `ToolSource`s (the benchmark's sandbox, a NeMo Gym resource server, ...); a
tool-calling solver routes each call by tool name to the source that declared it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from benchmarks._types import SeedResult
from nel_resources.model_client import ModelResponse


@dataclass(slots=True)
class SolveContext:
    """Per-sample facts a solver may need beyond the seed.

    Attributes:
        sample_id: `"<problem_idx>:<repeat>"`, also the session id tools and the proxy see.
        problem_idx: The problem's index in the dataset.
        repeat: The repeat index (0-based).
        sandbox: The sample's started sandbox (`nel_resources.sandboxes.base.Sandbox`) when the
            benchmark has a sandbox block, else None.
    """

    sample_id: str
    problem_idx: int = 0
    repeat: int = 0
    sandbox: Any = None


@dataclass(slots=True)
class ToolOutcome:
    """What one tool call returned, as the model will see it and as the trajectory keeps it.

    Attributes:
        content: The text given back to the model (already capped to `max_output_chars`).
        exit_code: The process exit code for command-like tools, else None.
        error: Set when the call failed (unknown tool, bad arguments, timeout, non-zero exit
            of a tool that treats it as failure); the model still sees `content`.
        latency_ms: Wall time of the call.
        truncated: True when `content` was cut to the cap (head and tail kept).
    """

    content: str
    exit_code: int | None = None
    error: str | None = None
    latency_ms: float = 0.0
    truncated: bool = False


@runtime_checkable
class ToolSource(Protocol):
    """A set of tools a tool-calling solver offers the model."""

    async def specs(self, ctx: SolveContext) -> list[dict[str, Any]]:
        """OpenAI function-tool specs (`{"type": "function", "function": {...}}`)."""
        ...

    async def call(self, name: str, arguments: dict[str, Any], ctx: SolveContext) -> ToolOutcome:
        """Run one tool call for the sample; failures come back as a ToolOutcome with
        `error` set, never as an exception (the model must see them)."""
        ...


@dataclass(slots=True)
class SolveResult:
    """A solver's answer to one problem.

    Attributes:
        response: The answer text (for `response_mode: sandbox_artifact`, the artifact).
        model_response: The last model call behind it.
        trajectory: The conversation as chat messages, ending with the answer.
        reward: A reward the solver computed itself (None: the environment verifies).
        scoring_details: Details of that reward.
        error: Set when the solver failed and returned no usable answer.
        failure_category: Why it failed, for failure analysis (e.g. `max_turns_exhausted`,
            `tool_error`, `timeout`); None when it did not.
        steps: ATIF steps (`source`, `message`, `tool_calls`, `observation`, `metrics`,
            `extra`), one per system/user message, model turn and tool result.
        turns: Model calls made.
        prompt_tokens: Summed over the turns (None when the server reported none).
        completion_tokens: Summed over the turns.
    """

    response: str
    model_response: ModelResponse | None = None
    trajectory: list[dict[str, Any]] = field(default_factory=list)
    reward: float | None = None
    scoring_details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    failure_category: str | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)
    turns: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


@runtime_checkable
class Solver(Protocol):
    """Turns one seeded problem into an answer."""

    async def solve(self, task: SeedResult, ctx: SolveContext | None = None) -> SolveResult:
        """Answer one problem (`ctx` carries the sample id and its sandbox)."""
        ...
