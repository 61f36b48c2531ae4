"""Ctrl-C and SIGTERM stop an evaluation loop wherever they land, with the exception the
handler in place raises (Dagster's interrupt inside a step, KeyboardInterrupt outside)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from benchmarks.errors import NelError
from nel_assets.engine.evaluation.interrupts import run_interruptibly


class Interrupted(BaseException):
    """Stands for Dagster's DagsterExecutionInterruptedError (a BaseException)."""


def _raise(_signum: int, _frame: object) -> None:
    raise Interrupted


@pytest.fixture(autouse=True, params=["uvloop", "asyncio"])
def event_loop_choice(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test on both loops a shard can run on (`NEL_EVENT_LOOP`)."""
    monkeypatch.setenv("NEL_EVENT_LOOP", request.param)
    return str(request.param)


@pytest.fixture
def handlers() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in saved.items():
            signal.signal(s, h)


async def _signal_from_a_callback(signum: int, cleaned: list[str]) -> str:
    """Send `signum` from inside a plain loop callback (as a transport's data_received would
    be running when it lands), then wait; returns "completed" if nothing stopped it."""
    asyncio.get_running_loop().call_soon(os.kill, os.getpid(), signum)
    try:
        await asyncio.sleep(0.5)
        return "completed"
    finally:
        cleaned.append("finally")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_landing_in_a_callback_is_not_lost(handlers: None, signum: int) -> None:
    signal.signal(signum, _raise)
    # The failure this guards against: plain asyncio.run logs the handler's exception as
    # "Exception in callback" and the loop runs on to the end.
    cleaned: list[str] = []
    assert asyncio.run(_signal_from_a_callback(signum, cleaned)) == "completed"
    signal.signal(signum, _raise)
    cleaned.clear()
    with pytest.raises(Interrupted):
        run_interruptibly(_signal_from_a_callback(signum, cleaned))
    assert cleaned == ["finally"]  # the task was cancelled: its cleanup ran first
    assert signal.getsignal(signum) is _raise  # the handler in place is back


def test_ctrl_c_outside_dagster_is_a_keyboard_interrupt(handlers: None) -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    cleaned: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        run_interruptibly(_signal_from_a_callback(signal.SIGINT, cleaned))
    assert cleaned == ["finally"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_handler_that_only_notes_the_signal_still_stops_the_loop(handlers: None) -> None:
    noted: list[int] = []
    signal.signal(signal.SIGTERM, lambda s, f: noted.append(s))
    with pytest.raises(KeyboardInterrupt):
        run_interruptibly(_signal_from_a_callback(signal.SIGTERM, []))
    assert noted == [signal.SIGTERM]


def test_without_a_signal_the_result_comes_back(handlers: None) -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    # The handler in place before is restored, whatever it was: an ignored SIGINT when the
    # suite was started as a script's background job, Python's default otherwise.
    before = signal.getsignal(signal.SIGINT)
    assert run_interruptibly(answer()) == 42
    assert signal.getsignal(signal.SIGINT) is before


def test_an_ignored_signal_stays_ignored(handlers: None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

    async def ignored() -> str:
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.sleep(0.05)
        return "ran on"

    assert run_interruptibly(ignored()) == "ran on"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN


async def _blocked(seconds: float, cleaned: list[str]) -> str:
    """A loop blocked in synchronous code (a scorer that sleeps): no callback runs meanwhile."""
    try:
        time.sleep(seconds)
        return "completed"
    finally:
        cleaned.append("finally")


def _signal_later(signum: int, *, times: int = 1, after: float = 0.3) -> threading.Thread:
    def send() -> None:
        for _ in range(times):
            time.sleep(after)
            os.kill(os.getpid(), signum)

    t = threading.Thread(target=send, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_loop_blocked_in_synchronous_code_is_interrupted_where_it_is(handlers: None, signum: int) -> None:
    # Before: the signal waited for the loop, which sat in time.sleep until the end (a
    # SIGTERM from SLURM's time limit left such a task running for its whole hour).
    signal.signal(signum, _raise)
    cleaned: list[str] = []
    sender = _signal_later(signum)
    with pytest.raises(Interrupted):
        run_interruptibly(_blocked(30, cleaned))
    sender.join()
    assert cleaned == ["finally"]  # raised inside the blocked code: its cleanup ran
    assert signal.getsignal(signum) is _raise


def test_a_second_signal_does_not_wait_for_the_grace_period(handlers: None,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from nel_assets.engine.evaluation import interrupts

    monkeypatch.setattr(interrupts, "GRACE_S", 600.0)  # the watchdog alone would never act here
    signal.signal(signal.SIGINT, signal.default_int_handler)
    cleaned: list[str] = []
    sender = _signal_later(signal.SIGINT, times=2)
    with pytest.raises(KeyboardInterrupt):
        run_interruptibly(_blocked(30, cleaned))
    sender.join()
    assert cleaned == ["finally"]


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_a_shard_runs_on_the_chosen_loop(event_loop_choice: str) -> None:
    expected = "uvloop" if event_loop_choice == "uvloop" else "asyncio.unix_events"
    assert run_interruptibly(_loop_module()) == expected
    # off the main thread too (no signal handling there)
    out: list[str] = []
    t = threading.Thread(target=lambda: out.append(run_interruptibly(_loop_module())))
    t.start()
    t.join()
    assert out == [expected]


def test_an_unknown_loop_name_says_what_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEL_EVENT_LOOP", "tokio")
    with pytest.raises(NelError, match="NEL_EVENT_LOOP must be uvloop or asyncio, not 'tokio'"):
        run_interruptibly(_loop_module())
