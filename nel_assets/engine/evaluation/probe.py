"""A quick model probe: the first N problems of a benchmark, one request each, scored.

What `nel validate --model-url URL --model-id ID` runs (NeMo Evaluator's `validate`): no
store, no journal, no Dagster; a sanity check that the endpoint answers and the scorer reads
its answers, before a full run.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from benchmarks import EvalEnvironment
from nel_assets.engine.evaluation.loop import build_request
from nel_resources.model_client import ModelClient, ModelError

__all__ = ["probe"]


#: Opens one started sandbox (stopped on exit) for a benchmark that runs model code.
SandboxOpener = Callable[[], contextlib.AbstractAsyncContextManager[Any]]


async def _one(env: EvalEnvironment, client: ModelClient, idx: int,
               system_prompt: str | None, sandbox: SandboxOpener | None) -> dict[str, Any]:
    seed = await env.seed(idx)
    messages, prompt, _system = build_request(seed, client.protocol, system_prompt)
    row: dict[str, Any] = {"problem_idx": idx, "expected_answer": seed.expected_answer,
                           "reward": 0.0, "extracted_answer": None, "latency_ms": 0.0,
                           "tokens": 0, "error": None}
    try:
        resp = await client.generate(messages, prompt)
    except ModelError as exc:  # a failed request scores 0 and says why (as a run records it)
        row["error"] = str(exc)
        return row
    if sandbox is None:
        verdict = await env.verify(resp.content, seed.expected_answer, **seed.metadata)
    else:
        async with sandbox() as sb:
            verdict = await env.verify(resp.content, seed.expected_answer, sandbox=sb, **seed.metadata)
    row.update(reward=float(verdict.reward), extracted_answer=verdict.extracted_answer,
               latency_ms=resp.latency_ms,
               tokens=int(resp.prompt_tokens or 0) + int(resp.completion_tokens or 0))
    return row


async def probe(env: EvalEnvironment, client: ModelClient, n: int, *,
                system_prompt: str | None = None,
                sandbox: SandboxOpener | None = None) -> list[dict[str, Any]]:
    """Ask the model the first ``n`` problems (concurrently) and score each answer.

    ``sandbox`` opens a started sandbox per answer for a benchmark whose ``verify`` runs
    the model's code (``nel validate --sandbox``).

    Returns:
        One row per problem, in index order: ``problem_idx``, ``expected_answer``,
        ``extracted_answer``, ``reward``, ``latency_ms``, ``tokens`` (prompt + completion) and
        ``error`` (None, or why the request failed).
    """
    async with client:
        return list(await asyncio.gather(*(_one(env, client, i, system_prompt, sandbox) for i in range(n))))
