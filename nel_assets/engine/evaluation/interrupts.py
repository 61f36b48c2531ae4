"""Run an evaluation loop so that Ctrl-C and SIGTERM always stop it.

A Python signal handler runs wherever the main thread happens to be. Inside a Dagster step
the SIGINT handler raises Dagster's interrupt (`raise_interrupts_as`), and nel's SIGTERM
handler raises an interrupt too (`run_registry`); when the signal lands while the event loop
runs a plain callback (a transport's `data_received`, a timer), asyncio reports the exception
as "Exception in callback" and carries on: the interrupt is lost, and the shard ran to its
end as if nobody had pressed Ctrl-C (with its model server, which got the same SIGINT, gone).

`run_interruptibly` takes those signals through the event loop instead: the signal asks the
loop to cancel the shard's task at a safe point (its `finally` blocks close the journal), and
once the loop is done the handler that was in place is called from plain code, so the run
stops with the same exception as before, only never lost.

A loop blocked in synchronous code (a scorer that sleeps or computes for minutes) cannot take
the signal. If it has not taken it within `GRACE_S`, or a second signal comes first, the
handler in place is called in the main thread wherever it is, as Python would call it: the
blocking code is interrupted. Without this a SIGTERM (SLURM's time limit, `kill`) left such a
run going, and once SLURM had killed its parent shell it could no longer SIGKILL it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_SIGNALS = (signal.SIGINT, signal.SIGTERM)

#: Seconds the loop gets to take a signal before the handler in place is called where the
#: main thread is (a loop that is not blocked takes it at once).
GRACE_S = 2.0


def loop_factory(choice: str | None = None) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop a shard runs on: uvloop's when installed, unless `choice` (default:
    `NEL_EVENT_LOOP`) is `asyncio`; None means asyncio's own."""
    choice = (choice or os.environ.get("NEL_EVENT_LOOP") or "uvloop").strip().lower()
    if choice not in ("uvloop", "asyncio"):
        from benchmarks.errors import NelError

        raise NelError(f"NEL_EVENT_LOOP must be uvloop or asyncio, not {choice!r}")
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:  # a trimmed install: the loop runs the same on asyncio's
        return None
    return uvloop.new_event_loop


def _run(coro: Coroutine[Any, Any, T], factory: Callable[[], asyncio.AbstractEventLoop] | None
         ) -> T:
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


def run_interruptibly(coro: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(coro)` on the shard's loop (`loop_factory`), with SIGINT and SIGTERM
    (when a Python handler is set for them) delivered through the loop: the task is
    cancelled, then that handler is called. A loop that does not take the signal within
    `GRACE_S` (blocked in synchronous code), or a second signal before it did, gets the
    handler called where it is, interrupting that code."""
    try:
        factory = loop_factory()
    except BaseException:
        coro.close()  # never started: no "was never awaited" warning on top of the error
        raise
    if threading.current_thread() is not threading.main_thread():
        return _run(coro, factory)  # signal handlers belong to the main thread
    previous = {s: signal.getsignal(s) for s in _SIGNALS}
    handled = [s for s, h in previous.items() if callable(h)]
    caught: list[int] = []
    taken = threading.Event()  # the loop has cancelled the task
    main = threading.get_ident()

    def now(signum: int, frame: Any) -> None:
        """The handler in place, called here and now; one that only notes the signal is
        followed by KeyboardInterrupt, as after the loop."""
        previous[signum](signum, frame)  # type: ignore[operator]
        raise KeyboardInterrupt

    def watch(signum: int) -> None:
        if not taken.wait(GRACE_S):  # the loop is blocked: signal the main thread itself
            signal.pthread_kill(main, signum)

    async def guarded() -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None

        def cancel() -> None:
            taken.set()
            task.cancel()

        def on_signal(signum: int, frame: Any) -> None:
            if taken.is_set():
                return  # the task is being cancelled: its cleanup runs, then the handler
            if caught:  # a second signal, or the watchdog's: the loop did not take the first
                now(signum, frame)
            caught.append(signum)
            # Only noted here (this may run inside any callback); the loop cancels the task.
            loop.call_soon_threadsafe(cancel)
            threading.Thread(target=watch, args=(signum,), name="nel-interrupt-watch", daemon=True).start()

        for s in handled:
            signal.signal(s, on_signal)
        try:
            return await coro
        finally:
            for s in handled:
                signal.signal(s, previous[s])

    result: T | None = None
    try:
        result = _run(guarded(), factory)
    except asyncio.CancelledError:
        if not caught:
            raise
    finally:
        taken.set()  # a watchdog still waiting has nothing left to do
        for s, h in previous.items():
            signal.signal(s, h)
    if caught:
        now(caught[0], None)  # raises, as it would have from the handler
    return result  # type: ignore[return-value]
