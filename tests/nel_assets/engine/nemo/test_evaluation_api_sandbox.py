"""`run_evaluation` (NeMo Evaluator's Python API on nel's engine) on a code benchmark:
HumanEval answered by the reference server, each answer run in a real `local` sandbox given
as `sandbox=` or as the config's `sandbox:`; without one the run is refused before any request."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from benchmarks.builtin.humaneval import HumanEval
from benchmarks.errors import NelError
from nel_assets.engine.nemo.evaluation_api import run_evaluation
from nel_assets.engine.solvers import ChatSolver
from nel_resources.model_client import ModelClient

N = 3


def answers(env: HumanEval) -> list[dict[str, str]]:
    """Gold for problems 0 and 1, a wrong function for problem 2."""
    out = []
    for i in range(N):
        row = env.rows[i]
        content = env.gold_response(asyncio.run(env.seed(i)))
        if i == 2:
            content = f"```python\ndef {row['entry_point']}(*args):\n    return 0\n```"
        out.append({"match": row["prompt"].strip()[-200:], "content": content})
    return out


def evaluate(env: HumanEval, url: str, **kwargs: Any) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        client = ModelClient(url, model="ref", max_concurrent=4)
        try:
            return await run_evaluation(env, ChatSolver(client), max_problems=N, **kwargs)
        finally:
            await client.close()

    return asyncio.run(go())


@pytest.mark.parametrize("how", ["argument", "config"])
def test_run_evaluation_scores_humaneval_in_a_local_sandbox(bwrap: None, humaneval: HumanEval, reference_server,
                                                            how: str) -> None:
    url = reference_server(answers=answers(humaneval))
    block = {"type": "local", "concurrency": 2}
    kwargs: dict[str, Any] = {"sandbox": block} if how == "argument" else {"config": {"sandbox": block}}
    bundle = evaluate(humaneval, url, **kwargs)
    rewards = bundle["_table"].sort_by("problem_idx").column("reward").to_pylist()
    assert rewards == [1.0, 1.0, 0.0]
    assert bundle["score"]["n_samples"] == N


def test_run_evaluation_without_a_sandbox_is_refused_before_any_request(
        humaneval: HumanEval, reference_server, server_stats) -> None:
    url = reference_server(answers=answers(humaneval))
    with pytest.raises(NelError, match=r"needs a sandbox: pass sandbox=\{'type': 'local'\}"):
        evaluate(humaneval, url)
    with pytest.raises(NelError, match=r"sandbox `type`"):
        evaluate(humaneval, url, sandbox_manager={"type": "vm"})
    assert server_stats(url)["total_requests"] == 0
