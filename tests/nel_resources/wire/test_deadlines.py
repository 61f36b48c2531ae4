"""`Deadlines`: the shared timeout check behind the model client's per-request timeouts."""

from __future__ import annotations

import asyncio

from nel_resources.wire.deadlines import Deadlines


async def _guarded(deadlines: Deadlines, timeout: float, work: asyncio.Future[str]) -> str:
    entry = deadlines.arm(timeout)
    try:
        return await work
    except asyncio.CancelledError:
        if entry.fired:
            entry.task.uncancel()
            return "timed out"
        raise
    finally:
        deadlines.disarm(entry)


def test_a_passed_deadline_cancels_only_its_own_task() -> None:
    deadlines = Deadlines(tick=0.01)

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        never: asyncio.Future[str] = loop.create_future()
        soon: asyncio.Future[str] = loop.create_future()
        loop.call_soon(soon.set_result, "answered")
        return await asyncio.gather(_guarded(deadlines, 0.05, never),
                                    _guarded(deadlines, 3600, soon))

    assert asyncio.run(main()) == ["timed out", "answered"]
    assert not deadlines._armed and deadlines._handle is None  # nothing left ticking


def test_deadlines_work_on_a_second_event_loop() -> None:
    # A client used by two runs, each with its own loop: the first loop's timer died with it.
    deadlines = Deadlines(tick=0.01)

    async def hang() -> str:
        return await _guarded(deadlines, 0.05, asyncio.get_running_loop().create_future())

    async def quick_then_leave() -> None:
        entry = deadlines.arm(3600)  # armed and left armed: its loop ends with a timer due
        deadlines.disarm(entry)
        deadlines.arm(3600)

    asyncio.run(quick_then_leave())
    assert asyncio.run(hang()) == "timed out"
