"""The `loglikelihood` solver: score a benchmark by the served model's log-probabilities.

`solver: {type: loglikelihood, config: {metric: acc, style: texts}}` on a multiple-choice
benchmark (mmlu, mmlu_pro, gpqa) scores each option as the continuation of the question, one
echo + logprobs request per option (`nel_resources.model_client.logprobs`), and rewards the
item with `metric` (`acc`, `acc_norm` or `acc_bytes`; all three are kept in the row's
`scoring_details["metrics"]`, so the bundle reports each). On `perplexity` it scores each
document whole; the reward is `2 ** -bits_per_byte`, and the row keeps the log-likelihood,
bytes and words the bundle's corpus perplexities are summed from.

Only completions endpoints that echo prompt log-probabilities can do this (llama.cpp's
server, vLLM, SGLang): `check_loglikelihood` refuses a chat service in the config check, `prepare`
refuses a server without echoed logprobs with one probe request, both before any item.
"""

from __future__ import annotations

import asyncio
import math
from typing import TYPE_CHECKING, Any

from benchmarks._types import SeedResult
from benchmarks.errors import NelError
from benchmarks.scoring.loglik import MultipleChoice, RollingText, argmax, mcq_metrics
from nel_assets.engine.solvers.base import SolveContext, SolveResult

# The config checks live in a light module: `nel eval run` runs them before it knows
# whether any shard is stale, and an unchanged rerun imports no solver.
from nel_assets.engine.solvers.loglikelihood_check import settings as _settings
from nel_resources.model_client import ModelClient, ModelError
from nel_resources.model_client.logprobs import (
    check_logprobs,
    loglikelihood,
    rolling_loglikelihood,
)

if TYPE_CHECKING:
    from nel_assets.engine.solvers.factory import SolverInputs
    from nel_resources.config import SolverConfig


class LoglikelihoodSolver:
    """Scores each item by log-likelihood; the reward is computed here (trusted by the loop)."""

    def __init__(self, client: ModelClient, env: Any, *, metric: str = "acc",
                 style: str = "texts") -> None:
        if not hasattr(env, "loglik_item"):
            raise NelError(f"benchmark {getattr(env, 'name', env)!r} has no log-likelihood "
                           "form (mmlu, mmlu_pro, gpqa and perplexity have)")
        self.client = client
        self.env = env
        self.metric = metric
        self.style = style

    async def prepare(self) -> None:
        """One probe request: a server without echoed prompt logprobs stops the run here."""
        await check_logprobs(self.client, f"the service at {self.client.base_url}")

    async def solve(self, task: SeedResult, ctx: SolveContext | None = None) -> SolveResult:
        """Score one item (its dataset index is `ctx.problem_idx`)."""
        idx = ctx.problem_idx if ctx is not None else int(task.metadata["idx"])
        item = self.env.loglik_item(idx, self.style)
        try:
            if isinstance(item, RollingText):
                return await self._rolling(item)
            return await self._choices(item)
        except ModelError as exc:
            return SolveResult("", error=str(exc)[:1000], failure_category=exc.category)

    async def _choices(self, item: MultipleChoice) -> SolveResult:
        results = await asyncio.gather(*(
            loglikelihood(self.client, item.context, item.delimiter + choice)
            for choice in item.choices))
        lls = [r.logprob for r in results]
        metrics = mcq_metrics(lls, item.choices, item.gold)
        pick = argmax(lls)
        return SolveResult(
            response=item.labels[pick],
            trajectory=[{"role": "user", "content": item.context},
                        {"role": "assistant", "content": item.delimiter + item.choices[pick]}],
            steps=_steps(item.context, item.delimiter + item.choices[pick]),
            reward=metrics[self.metric],
            scoring_details={
                "method": f"loglikelihood_{self.style}", "metrics": metrics,
                "primary": self.metric, "expected": item.labels[item.gold],
                "choice": item.labels[pick], "logprobs": lls,
                "is_greedy": [r.is_greedy for r in results],
                "n_tokens": [r.n_tokens for r in results]},
            turns=len(results))

    async def _rolling(self, item: RollingText) -> SolveResult:
        from benchmarks.scoring.loglik import count_words

        r = await rolling_loglikelihood(self.client, item.text)
        bpb = -r.logprob / r.n_bytes / math.log(2)
        return SolveResult(
            response="", reward=2.0 ** -bpb,
            scoring_details={
                "method": "loglikelihood_rolling", "primary": "byte_likelihood",
                # Summed by the bundle into the corpus metrics (`scoring.perplexity`).
                "metrics": {"loglik": r.logprob, "n_bytes": float(r.n_bytes),
                            "n_words": float(count_words(item.text))},
                "bits_per_byte": bpb, "n_tokens": r.n_tokens},
            steps=_steps(item.text[:200], f"log-likelihood {r.logprob:.4f} over "
                         f"{r.n_tokens} tokens"),
            turns=1)


def _steps(scored: str, answer: str) -> list[dict[str, Any]]:
    """The sample's trajectory: what was scored, and what the scores picked."""
    return [{"source": "user", "message": scored}, {"source": "agent", "message": answer}]


def build(cfg: SolverConfig, inp: SolverInputs) -> LoglikelihoodSolver:
    """The solver of a `solver: {type: loglikelihood, config: {...}}` block."""
    env = inp.env
    metric, style = _settings(cfg.config, f"benchmark {getattr(env, 'name', '?')!r}")
    if inp.client.protocol != "completions":
        # Checked with the config already (`check_loglikelihood`); kept for callers that skip it.
        raise NelError(f"log-likelihood scoring needs a completions service, not "
                       f"{inp.client.protocol}")
    return LoglikelihoodSolver(inp.client, env, metric=metric, style=style)
