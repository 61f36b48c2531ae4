"""The slot pool behind every factory's `concurrency`: FIFO hand-off, cancellation that
loses no slot, and use from successive event loops (a factory outlives `asyncio.run`)."""

from __future__ import annotations

import asyncio

import pytest

from nel_resources.sandboxes.slots import SlotPool


def test_waiters_get_released_slots_in_order_and_cancel_loses_nothing() -> None:
    pool = SlotPool(1)

    async def go() -> list[str]:
        order: list[str] = []
        first = await pool.acquire()

        async def wait(name: str) -> None:
            slot = await pool.acquire()
            order.append(name)
            pool.release(slot)
        a = asyncio.ensure_future(wait("a"))
        doomed = asyncio.ensure_future(wait("doomed"))
        b = asyncio.ensure_future(wait("b"))
        await asyncio.sleep(0)  # let all three queue up
        doomed.cancel()
        pool.release(first)
        await asyncio.gather(a, b)
        with pytest.raises(asyncio.CancelledError):
            await doomed
        return order
    assert asyncio.run(go()) == ["a", "b"]
    assert pool.in_use == 0


def test_one_pool_serves_successive_event_loops() -> None:
    pool = SlotPool(2)

    async def use() -> set[int]:
        got = {await pool.acquire(), await pool.acquire()}
        for s in got:
            pool.release(s)
        return got
    assert asyncio.run(use()) == {0, 1}
    assert asyncio.run(use()) == {0, 1}
    with pytest.raises(ValueError):
        SlotPool(0)
