"""The adaptive in-flight limit: cuts by the share of 429s, grows back per window with no
success needed, serves retries first, and never leaks a slot on cancellation.

Windows are evaluated by calling `_evaluate()` directly (what the window timer does), so
nothing here depends on how fast the machine is."""

from __future__ import annotations

import asyncio

import pytest

from nel_resources.wire.adaptive_limit import AdaptiveLimit


def run(coro):
    return asyncio.run(coro)


async def _fill(limit: AdaptiveLimit, n: int) -> None:
    for _ in range(n):
        await limit.acquire()


def test_cut_is_the_share_of_429s_and_recovery_needs_no_success() -> None:
    async def go() -> list[int]:
        lim = AdaptiveLimit(16, window=3600)
        await _fill(lim, 16)
        lim._peak = 16
        for _ in range(12):
            lim.record(throttled=True)
        for _ in range(4):
            lim.record(throttled=False)
        lim._evaluate()  # 75% refused: keep a quarter of what was in use
        sizes = [lim.limit]
        for _ in range(4):  # windows with no answer at all (say every request hangs)
            lim._evaluate()
            sizes.append(lim.limit)
        lim.close()
        return sizes

    assert run(go()) == [4, 8, 16, 16, 16]


def test_a_few_429s_do_not_cut() -> None:
    async def go() -> tuple[int, int]:
        lim = AdaptiveLimit(64, window=3600)
        for i in range(100):
            lim.record(throttled=i % 20 == 0)  # 5%
        lim._evaluate()
        lim.close()
        return lim.limit, lim.cuts

    assert run(go()) == (64, 0)


def test_all_refused_goes_down_to_one_request_at_a_time() -> None:
    async def go() -> int:
        lim = AdaptiveLimit(8, window=3600)
        lim._peak = 8
        lim.record(throttled=True)
        lim._evaluate()
        lim.close()
        return lim.limit

    assert run(go()) == 1


def test_growth_wakes_waiters_and_retries_go_first() -> None:
    async def go() -> list[str]:
        lim = AdaptiveLimit(2, window=3600)
        lim.limit = 1
        await lim.acquire()
        order: list[str] = []

        async def want(name: str, retry: bool) -> None:
            await lim.acquire(retry=retry)
            order.append(name)

        tasks = [asyncio.create_task(want("fresh", False)), asyncio.create_task(want("retry", True))]
        await asyncio.sleep(0)
        assert order == [] and lim.in_flight == 1
        lim._evaluate()  # a quiet window: limit 1 -> 2, one waiter gets in, retries first
        await asyncio.sleep(0)
        assert order == ["retry"]
        lim.release()
        await asyncio.gather(*tasks)
        lim.close()
        return order

    assert run(go()) == ["retry", "fresh"]


def test_cancelled_waiter_leaks_no_slot() -> None:
    async def go() -> int:
        lim = AdaptiveLimit(1, window=3600)
        await lim.acquire()
        waiter = asyncio.create_task(lim.acquire())
        await asyncio.sleep(0)
        lim.release()  # granted to the waiter...
        waiter.cancel()  # ...which is cancelled before it runs
        with pytest.raises(asyncio.CancelledError):
            await waiter
        return lim.in_flight

    assert run(go()) == 0
