"""Run an evaluation loop so that Ctrl-C and SIGTERM always stop it.

A Python signal handler runs wherever the main thread happens to be. Inside a Dagster step
the SIGINT handler raises Dagster's interrupt (`raise_interrupts_as`), and nel's SIGTERM
handler raises an interrupt too (`run_registry`); when the signal lands while the event loop
runs a plain callback (a transport's `data_received`, a timer), asyncio reports the exception
as "Exception in callback" and carries on: the interrupt is lost, and the shard ran to its
end as if nobody had pressed Ctrl-C (with its model server, which got the same SIGINT, gone).

`run_interruptibly` takes those signals through the event loop instead: the loop's handler
cancels the shard's task at a safe point (its `finally` blocks close the journal), and once
the loop is done the handler that was in place is called from plain code, so the run stops
with the same exception as before, only never lost.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def run_interruptibly(coro: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(coro)`, with SIGINT and SIGTERM (when a Python handler is set for them)
    delivered through the loop: the task is cancelled, then that handler is called."""
    if threading.current_thread() is not threading.main_thread():
        return asyncio.run(coro)  # signal handlers belong to the main thread
    previous = {s: signal.getsignal(s) for s in _SIGNALS}
    handled = [s for s, h in previous.items() if callable(h)]
    caught: list[signal.Signals] = []

    async def guarded() -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None

        def on_signal(signum: signal.Signals) -> None:
            caught.append(signum)
            task.cancel()

        for s in handled:
            loop.add_signal_handler(s, on_signal, s)
        try:
            return await coro
        finally:
            for s in handled:
                loop.remove_signal_handler(s)

    result: T | None = None
    try:
        result = asyncio.run(guarded())
    except asyncio.CancelledError:
        if not caught:
            raise
    finally:
        for s, h in previous.items():
            signal.signal(s, h)  # remove_signal_handler leaves the defaults, not these
    if caught:
        previous[caught[0]](caught[0], None)  # raises, as it would have from the handler
        raise KeyboardInterrupt  # the handler only noted it: stop as Ctrl-C would
    return result  # type: ignore[return-value]

