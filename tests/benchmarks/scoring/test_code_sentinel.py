"""A code answer passes only when its tests ran to their end, in real sandboxes (`local`:
bubblewrap; `docker`: the project's engine): an answer that exits 0 before the tests, or
tries to forge the harness's sentinel, scores 0; the right answer still scores 1."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from benchmarks.scoring.code import run_code_tests
from nel_resources.config import SandboxConfig
from nel_resources.sandboxes import SandboxSpec, running
from nel_resources.sandboxes.factory import make_factory
from tests.support import require_bwrap
from tests.support.code_attacks import ATTACKS, attack_answer
from tests.support.docker_engine import BASE_IMAGE

PROMPT = 'def double(x: int) -> int:\n    """Twice x."""\n'
TEST = "def check(candidate):\n    assert candidate(2) == 4\n    assert candidate(-1) == -2\n"
EP = "double"
RIGHT = "```python\ndef double(x):\n    return 2 * x\n```"


@pytest.fixture(params=["local", "docker"])
def block(request: pytest.FixtureRequest) -> dict[str, Any]:
    if request.param == "local":
        require_bwrap()
        return {"type": "local"}
    request.getfixturevalue("docker_host")
    return {"type": "docker", "image": BASE_IMAGE}


def test_only_answers_whose_tests_ran_to_the_end_pass(block: dict[str, Any]) -> None:
    async def go() -> dict[str, tuple[float, str]]:
        factory = make_factory(SandboxConfig(**block, concurrency=1))
        out: dict[str, tuple[float, str]] = {}
        try:
            for name, answer in [("right", RIGHT), *((a, attack_answer(a, EP)) for a in ATTACKS)]:
                async with running(factory.create(SandboxSpec())) as sb:
                    v = await run_code_tests(answer, prompt=PROMPT, test=TEST, entry_point=EP,
                                             sandbox=sb, timeout=30)
                out[name] = (v.reward, v.scoring_details["reason"])
        finally:
            await factory.aclose()
        return out

    got = asyncio.run(go())
    assert got.pop("right") == (1.0, "passed")
    assert {name: reward for name, (reward, _) in got.items()} == dict.fromkeys(ATTACKS, 0.0), got
    # the ones that leave early are told apart from a failed assertion
    assert got["sys_exit"][1] == got["os_exit"][1] == "tests_not_finished", got
    assert got["hunt_descriptors"][1] == got["walk_frames"][1] == "tests_not_finished", got
