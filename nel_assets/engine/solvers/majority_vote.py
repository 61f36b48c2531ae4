"""The `majority_vote` solver (self-consistency, Wang et al. 2022): ask the model `samples`
times and answer with the response whose final answer most of them gave.

A response's final answer is its last non-empty line with `#### `, `Answer:` and surrounding
markup removed, whitespace folded and lower-cased: the line every built-in prompt asks the
model to end with. Ties go to the answer reached first. The chosen response is verified by
the benchmark as usual; the votes are kept on the result (`scoring_details["votes"]`).
Diversity comes from the service's sampling settings (a temperature above 0).
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from typing import TYPE_CHECKING, Any

from benchmarks._types import SeedResult
from benchmarks.errors import NelError
from nel_assets.engine.evaluation.loop import build_request
from nel_assets.engine.solvers.base import SolveContext, SolveResult
from nel_resources.model_client import ModelClient

if TYPE_CHECKING:
    from nel_assets.engine.solvers.factory import SolverInputs
    from nel_resources.config import SolverConfig

DEFAULT_SAMPLES = 5
_MARKUP = re.compile(r"^(?:#+|\*\*|answer\s*[:：]|final answer\s*[:：])\s*|\*\*$|\.$", re.I)


def final_answer(text: str) -> str:
    """The vote a response casts: its last non-empty line, normalised ("" when empty)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return ""
    last = lines[-1]
    for _ in range(3):  # "**Answer:** 42." -> "42"
        last = _MARKUP.sub("", last).strip()
    return " ".join(last.lower().split())


class MajorityVoteSolver:
    """`samples` requests per problem; the most common final answer wins."""

    def __init__(self, client: ModelClient, *, samples: int = DEFAULT_SAMPLES,
                 system_prompt: str | None = None) -> None:
        if samples < 1:
            raise NelError(f"majority_vote: samples must be at least 1 (got {samples})")
        self.client = client
        self.samples = samples
        self.system_prompt = system_prompt

    async def solve(self, task: SeedResult, ctx: SolveContext | None = None) -> SolveResult:
        """Ask `samples` times (concurrently, within the client's limit) and vote."""
        messages, prompt, _ = build_request(task, self.client.protocol, self.system_prompt)
        replies = await asyncio.gather(*(self.client.generate(messages, prompt)
                                         for _ in range(self.samples)))
        votes = [final_answer(r.content or "") for r in replies]
        counts = Counter(v for v in votes if v)
        winner = max(counts, key=lambda v: (counts[v], -votes.index(v))) if counts else ""
        chosen = replies[votes.index(winner)] if winner else replies[0]
        sent = messages if messages is not None else [{"role": "user", "content": prompt}]
        prompt_tokens = _total(r.prompt_tokens for r in replies)
        completion_tokens = _total(r.completion_tokens for r in replies)
        return SolveResult(
            response=chosen.content, model_response=chosen,
            trajectory=[*sent, {"role": "assistant", "content": chosen.content}],
            scoring_details={"votes": dict(counts), "samples": self.samples, "chosen": winner},
            turns=len(replies), prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)


def _total(values: Any) -> int | None:
    got = [v for v in values if v is not None]
    return sum(got) if got else None


def build(cfg: SolverConfig, inp: SolverInputs) -> MajorityVoteSolver:
    """The solver of a `solver: {type: majority_vote, config: {samples: N}}` block."""
    samples = (cfg.config or {}).get("samples", DEFAULT_SAMPLES)
    if not isinstance(samples, int) or isinstance(samples, bool):
        raise NelError(f"majority_vote: config.samples must be an integer (got {samples!r})")
    return MajorityVoteSolver(inp.client, samples=samples, system_prompt=inp.system_prompt)
