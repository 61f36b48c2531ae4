"""The hang cut: hung attempts end long before the timeout, slow answers are never cut.

Against the reference server (a real HTTP process), on both transports.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from nel_resources.model_client import ModelClient, ModelResponse
from nel_resources.wire.hang_cut import HangCut


@pytest.fixture(params=["raw", "aiohttp"])
def transport(request: pytest.FixtureRequest) -> str:
    return request.param


def _gather(url: str, prompts: list[str], **kw: Any) -> tuple[list[ModelResponse], ModelClient]:
    async def go() -> tuple[list[ModelResponse], ModelClient]:
        async with ModelClient(url, model="m", retry_backoff=0.01, **kw) as c:
            out = await asyncio.gather(*(c.generate([{"role": "user", "content": p}])
                                         for p in prompts))
            return list(out), c
    return asyncio.run(go())


def test_hung_attempts_are_cut_and_retried_long_before_the_timeout(
        reference_server, server_stats, transport: str) -> None:
    """Four first attempts hang; with a 30 s timeout each used to cost 30 s. The cut learns
    from the quick answers and ends them after its 2 s floor; the retries answer."""
    url = reference_server(hang_rate=1.0, fail_attempts=1, fault_match="hang")
    prompts = [f"hang {i}" for i in range(4)] + [f"quick {i}" for i in range(100)]
    t0 = time.perf_counter()
    out, c = _gather(url, prompts, timeout=30.0, max_concurrent=16, transport=transport)
    elapsed = time.perf_counter() - t0
    assert elapsed < 20, f"took {elapsed:.1f}s: the hung attempts waited out the 30 s timeout"
    assert [r.attempts for r in out[:4]] == [2] * 4 and all(r.attempts == 1 for r in out[4:])
    assert all(r.content for r in out)
    assert c.attempts_cut == 4
    st = server_stats(url)
    assert st["faults"] == {"hang": 4}
    assert c.requests_sent == st["by_endpoint"]["/v1/chat/completions"] == 108


def test_a_slow_model_is_never_cut(reference_server, server_stats, transport: str) -> None:
    """Every answer takes 2.5-4 s (past the 2 s floor): the cut learns minutes, cuts nothing."""
    url = reference_server(delay_ms=2500, delay_ms_max=4000)
    out, c = _gather(url, [f"q {i}" for i in range(48)], timeout=60.0, max_concurrent=16,
                     transport=transport)
    assert c.attempts_cut == 0 and all(r.attempts == 1 for r in out)
    assert server_stats(url)["by_endpoint"]["/v1/chat/completions"] == 48


def test_a_model_turning_slow_is_not_cut(reference_server, transport: str) -> None:
    """The cut learnt from instant answers (2 s); then every request takes 3 s at once:
    most attempts in flight are past the cut, so the model is slow, not hung: none is cut."""
    url = reference_server(delay_ms=3000, delay_match="slow")
    prompts = [f"quick {i}" for i in range(64)] + [f"slow {i}" for i in range(16)]
    out, c = _gather(url, prompts, timeout=60.0, max_concurrent=16, transport=transport)
    assert c.attempts_cut == 0 and all(r.attempts == 1 for r in out)


def test_an_answer_arriving_in_pieces_is_not_cut(reference_server, transport: str) -> None:
    """A 4 s answer streamed in ten chunks is making progress: never cut, even with the
    crowd rule off (so only the progress rule can spare it)."""
    url = reference_server(delay_ms=4000, delay_match="stream", trickle=True)
    prompts = [f"quick {i}" for i in range(64)] + ["stream 1", "stream 2"]
    out, c = _gather(url, prompts, timeout=60.0, max_concurrent=16, transport=transport,
                     hang_cut=HangCut(crowd=1.0))
    assert c.attempts_cut == 0 and all(r.attempts == 1 for r in out)
    assert out[-1].content


def test_cut_limit_learns_p99_with_a_floor() -> None:
    hc = HangCut(factor=8.0, floor=2.0, min_samples=32, refresh=0.0)
    for _ in range(31):
        hc.observe(0.01)
    assert hc.limit(0.0) == float("inf")  # too few answers to judge
    hc.observe(0.01)
    assert hc.limit(1.0) == 2.0  # 8 x 10 ms is below the floor
    for i in range(1000):
        hc.observe(20.0 + 40.0 * i / 1000)  # a slow model: 20-60 s
    assert hc.limit(2.0) > 400  # 8 x p99: nothing that model answers is cut
    assert hc.allows(1, 1) and hc.allows(4, 16) and not hc.allows(5, 16)
