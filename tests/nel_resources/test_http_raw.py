"""The raw HTTP client's connection limit (`_Slots`) and its pool on a real server."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import orjson
import pytest

from nel_resources.http_raw import RawHTTPPool, _Slots


def test_slots_bound_and_serve_waiters_in_order() -> None:
    async def go() -> list[str]:
        slots = _Slots(2)
        order: list[str] = []

        async def user(name: str, hold: asyncio.Event) -> None:
            await slots.acquire()
            order.append(name)
            await hold.wait()
            slots.release()

        holds = {n: asyncio.Event() for n in "abcd"}
        tasks = [asyncio.ensure_future(user(n, holds[n])) for n in "abcd"]
        await asyncio.sleep(0.01)
        assert order == ["a", "b"]  # two slots: c and d wait
        assert not slots.take()
        holds["a"].set()
        await asyncio.sleep(0.01)
        assert order == ["a", "b", "c"]  # the freed slot went to the first waiter
        for h in holds.values():
            h.set()
        await asyncio.gather(*tasks)
        assert slots.take() and slots.take() and not slots.take()  # both slots are back
        return order

    assert asyncio.run(go()) == ["a", "b", "c", "d"]


def test_a_cancelled_waiter_passes_its_slot_on() -> None:
    async def go() -> None:
        slots = _Slots(1)
        await slots.acquire()
        waiting = asyncio.ensure_future(slots.acquire())
        behind = asyncio.ensure_future(slots.acquire())
        await asyncio.sleep(0)
        slots.release()  # handed to `waiting`...
        waiting.cancel()  # ...which is cancelled before it runs: `behind` must get it
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await asyncio.wait_for(behind, 1.0)
        assert not slots.take()  # `behind` holds the only slot
        slots.release()
        assert slots.take()

    asyncio.run(go())


def test_pool_keeps_to_its_limit_on_a_real_server(reference_server, server_stats) -> None:
    url = reference_server(default_content="#### 7", delay_ms=20)
    parts = urlsplit(url)

    async def go() -> list[int]:
        pool = RawHTTPPool(parts.hostname, parts.port, limit=3)
        body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "q"}]})
        try:
            res = await asyncio.gather(*(
                pool.request("POST", parts.path + "/chat/completions",
                             b"Content-Type: application/json\r\n", body) for _ in range(12)))
            assert len(pool._idle) <= 3  # never more connections than slots
            return [r.status for r in res]
        finally:
            await pool.close()

    assert asyncio.run(go()) == [200] * 12
    assert server_stats(url)["by_endpoint"]["/v1/chat/completions"] == 12
