"""HumanEval on the real data through the `code_sandbox` scorer, in real sandboxes.

Gold self-consistency: every one of the 164 canonical solutions passes, and a broken
variant of each (the same solution with its return value perturbed) fails on an assertion,
in the `local` (bubblewrap) and the `docker` sandbox. One factory per sandbox type for the
module; the problems run concurrently up to the factory's `concurrency`.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from benchmarks import VerifyResult, get_benchmark
from benchmarks.builtin.humaneval import CHAT_TEMPLATE, HumanEval
from benchmarks.errors import NelError
from nel_resources.config import SandboxConfig
from nel_resources.sandboxes.base import SandboxFactory, SandboxSpec, running
from nel_resources.sandboxes.factory import make_factory
from tests.support import require_bwrap
from tests.support.docker_engine import BASE_IMAGE

# The return value of the canonical solution, perturbed: a plausible wrong answer that the
# problem's own tests must catch.
PERTURB = '''

def _nel_perturb(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return value + [None]
    if isinstance(value, tuple):
        return value + (None,)
    return 0 if value is None else None


_nel_original = {ep}


def {ep}(*args, **kwargs):
    return _nel_perturb(_nel_original(*args, **kwargs))
'''


def broken_response(env: HumanEval, idx: int) -> str:
    row = env.rows[idx]
    return ("```python\n" + row["prompt"] + row["canonical_solution"]
            + PERTURB.format(ep=row["entry_point"]) + "```")


@pytest.fixture(scope="module", params=["local", "docker"])
def sandboxes(request: pytest.FixtureRequest) -> Iterator[SandboxFactory]:
    """One factory of each type for the module (closed at the end)."""
    kind: str = request.param
    cfg: dict[str, Any] = {"type": kind, "concurrency": 4}
    if kind == "local":
        require_bwrap()
    if kind == "docker":
        request.getfixturevalue("docker_host")
        cfg["image"] = BASE_IMAGE
    factory = make_factory(SandboxConfig(**cfg))
    yield factory
    asyncio.run(factory.aclose())


def test_loads_the_164_problems_with_nemo_evaluators_prompt(humaneval: HumanEval) -> None:
    assert len(humaneval) == 164
    s = asyncio.run(humaneval.seed(0))
    row = humaneval.rows[0]
    assert s.prompt == CHAT_TEMPLATE.format(prompt=row["prompt"])
    assert s.prompt.startswith("Read the following function signature and docstring, and fully "
                               "implement the function described. Your response should only "
                               "contain the code for this function.\n\n")
    assert s.expected_answer == "has_close_elements"  # NeMo Evaluator's target field
    assert s.metadata["task_id"] == "HumanEval/0" and "def check(candidate)" in s.metadata["test"]
    assert humaneval.needs_sandbox
    # a completions endpoint gets the same prompt, as from NeMo Evaluator (`prompt_set: nemo`),
    # or the bare signature to continue under `prompt_set: nel`
    completions = get_benchmark("humaneval", protocol="completions")
    assert asyncio.run(completions.seed(0)).prompt == s.prompt
    own = get_benchmark("humaneval", protocol="completions", prompt_set="nel")
    assert asyncio.run(own.seed(0)).prompt == row["prompt"]


def test_verify_without_a_sandbox_says_to_configure_one(humaneval: HumanEval) -> None:
    s = asyncio.run(humaneval.seed(0))
    with pytest.raises(NelError, match=r"add `sandbox: \{type: local\}`"):
        asyncio.run(humaneval.verify(humaneval.gold_response(s), s.expected_answer, **s.metadata))


def _score_all(env: HumanEval, factory: SandboxFactory) -> list[tuple[VerifyResult, VerifyResult]]:
    """Gold and broken answers of every problem, scored by `verify` in real sandboxes.

    One sandbox per worker (as many workers as the factory's `concurrency`) runs its share
    of the programs one after another: each program is its own process, and starting and
    wiping a sandbox per program would only add to the time (the eval loop's fresh sandbox
    per sample is covered end to end in tests/dagster_project/test_humaneval_e2e.py).
    """
    results: dict[int, tuple[VerifyResult, VerifyResult]] = {}
    todo = list(range(len(env)))

    async def worker() -> None:
        async with running(factory.create(SandboxSpec())) as sb:
            while todo:
                idx = todo.pop()
                s = await env.seed(idx)
                gold = await env.verify(env.gold_response(s), s.expected_answer, sandbox=sb, **s.metadata)
                bad = await env.verify(broken_response(env, idx), s.expected_answer, sandbox=sb,
                                       **s.metadata)
                results[idx] = (gold, bad)

    async def main() -> None:
        await asyncio.gather(*(worker() for _ in range(factory.concurrency)))

    asyncio.run(main())
    return [results[i] for i in range(len(env))]


def test_gold_self_consistency(humaneval: HumanEval, sandboxes: SandboxFactory) -> None:
    results = _score_all(humaneval, sandboxes)
    gold_fail = [(i, g.scoring_details) for i, (g, _) in enumerate(results) if g.reward != 1.0]
    assert not gold_fail, gold_fail[:5]
    broken_pass = [i for i, (_, b) in enumerate(results) if b.reward != 0.0]
    assert not broken_pass, broken_pass
    assert {g.scoring_details["reason"] for g, _ in results} == {"passed"}
    assert {g.scoring_details["method"] for g, _ in results} == {"fence_entry_point"}
    reasons = Counter(b.scoring_details["reason"] for _, b in results)
    assert reasons == {"assertion": 164}, reasons
    assert all("AssertionError" in b.scoring_details["stderr_tail"] for _, b in results)


@pytest.mark.parametrize(("body", "reason"), [
    ("    return sum(numbers", "syntax_error"),
    # far past the sandbox's memory limit (4 GiB by default)
    ("    hog = bytearray(16 << 30)\n    return hog", "memory"),
    ("    return undefined_name", "exception"),
])
def test_failures_are_recorded_with_their_reason(humaneval: HumanEval, sandboxes: SandboxFactory,
                                                 body: str, reason: str) -> None:
    async def main() -> VerifyResult:
        s = await humaneval.seed(0)
        async with running(sandboxes.create(SandboxSpec())) as sb:
            return await humaneval.verify(body, s.expected_answer, sandbox=sb, **s.metadata)

    v = asyncio.run(main())
    assert v.reward == 0.0 and v.scoring_details["reason"] == reason, v.scoring_details
    assert v.scoring_details["method"] == "body"
