"""`nel serve` scoring in killable worker processes: an overrunning scorer stops consuming.

Real `nel serve` processes serving a BYOB benchmark whose scorer, depending on the response,
loops forever in pure Python (`while True`), allocates without bound, or scores normally.
Each scorer call writes its process id to a file, so the test knows which process scored.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nel_resources.runtime.processes import (
    ManagedProcess,
    pid_alive,
    process_group_members,
    start_on_free_port,
)
from tests.support.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 60.0
LIMIT_S = 1.5  # --verify-timeout of the served benchmark

BYOB = '''
import os
from pathlib import Path
from benchmarks.byob import benchmark, scorer
from benchmarks.scoring import numeric_match

PIDS = Path({pids!r})

@benchmark(name="runaway_scorer", dataset=[{{"q": "1+1", "a": "2"}}], prompt="{{q}}",
           target_field="a")
@scorer
def runaway(inp):
    (PIDS / str(os.getpid())).write_text(inp.response)
    if inp.response == "loop":
        while True:  # pure Python: only killing its process stops it
            pass
    if inp.response == "hog":
        held = []
        while True:
            held.append(bytearray(64 << 20))
    return numeric_match(inp.response, inp.target)
'''


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[tuple[ManagedProcess, int, Path]]:
    pids = tmp_path / "pids"
    pids.mkdir()
    module = tmp_path / "runaway.py"
    module.write_text(BYOB.format(pids=str(pids)))

    def make(port: int) -> ManagedProcess:
        return ManagedProcess(
            [sys.executable, "-m", "dagster_project.cli.main", "serve", "-b", "runaway_scorer",
             "--import", str(module), "--port", str(port), "--verify-timeout", str(LIMIT_S),
             "--scorer-memory-mb", "512"],
            cwd=REPO,
            env={"PYTHONPATH": str(REPO)},
            name="nel-serve",
        )

    proc, port = start_on_free_port(make, lambda p: f"http://127.0.0.1:{p}/health")
    try:
        yield proc, port, pids
    finally:
        proc.stop()


def _verify(port: int, response: str) -> tuple[int, dict[str, Any], float]:
    body = json.dumps({"response": response, "expected_answer": "2"}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/verify", data=body,
                                 headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=WAIT_S) as resp:
            return resp.status, json.loads(resp.read()), time.monotonic() - t0
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read()), time.monotonic() - t0


def _scorer_pid(pids: Path, response: str) -> int:
    found = [int(p.name) for p in pids.iterdir() if p.read_text() == response]
    assert len(found) == 1, found
    return found[0]


def _group_cpu_seconds(pgid: int) -> float:
    """CPU time (user + system) of the live processes in the server's process group."""
    ticks = 0
    for pid in process_group_members(pgid):
        try:
            raw = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            continue
        fields = raw[raw.rfind(b")") + 2:].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def _cpu_growth(pgid: int, window: float = 2.0) -> float:
    """CPU seconds the server's processes burn over `window` s of wall time (a measurement)."""
    before = _group_cpu_seconds(pgid)
    end = time.monotonic() + window
    while time.monotonic() < end:
        time.sleep(0.1)
    return _group_cpu_seconds(pgid) - before


def test_infinite_loop_scorer_is_killed_and_replaced(served) -> None:
    proc, port, pids = served
    status, body, took = _verify(port, "loop")
    assert status == 422, body
    assert body["error"] == "scorer_timeout" and "reward" not in body, body
    assert took < LIMIT_S + 5, f"the 422 took {took:.1f} s for a {LIMIT_S} s limit"

    # Nothing keeps burning: the server's processes sit idle (the old design's abandoned
    # scoring thread kept a core busy here).
    grown = _cpu_growth(proc.pid)
    assert grown < 0.5, f"the server's processes used {grown:.2f} CPU s in 2 s after the 422"
    looping = _scorer_pid(pids, "loop")
    assert looping != proc.pid, "the scorer ran in the server process itself"
    wait_for(lambda: not pid_alive(looping), timeout=WAIT_S, interval=0.02,
             what=f"the looping scorer's process {looping} ending")

    # The next request is scored, by a fresh worker.
    status, body, _ = _verify(port, "The answer is 2")
    assert status == 200 and body["reward"] == 1.0, body
    fresh = _scorer_pid(pids, "The answer is 2")
    assert fresh != looping and pid_alive(fresh)


def test_unbounded_allocation_is_stopped_by_the_memory_cap(served) -> None:
    _, port, pids = served
    status, body, _ = _verify(port, "hog")
    assert status == 422, body
    assert body["error"] in ("scorer_error", "scorer_timeout") and "reward" not in body, body
    if body["error"] == "scorer_error":
        assert "MemoryError" in body["detail"], body
    hog = _scorer_pid(pids, "hog")
    wait_for(lambda: not pid_alive(hog), timeout=WAIT_S, interval=0.02,
             what=f"the allocating scorer's process {hog} ending")
    status, body, _ = _verify(port, "2")
    assert status == 200 and body["reward"] == 1.0, body
    assert _scorer_pid(pids, "2") != hog


def test_scoring_workers_never_outlive_the_server(served) -> None:
    proc, port, pids = served
    status, _, _ = _verify(port, "2")
    assert status == 200
    worker = _scorer_pid(pids, "2")
    assert pid_alive(worker)
    # SIGKILL leaves no chance to clean up: the workers must still go with the server.
    os.kill(proc.pid, signal.SIGKILL)
    wait_for(lambda: not process_group_members(proc.pid), timeout=20, interval=0.02,
             what="every process of the killed server ending")
    assert not pid_alive(worker)


def test_sigterm_during_an_overrun_exits_within_3s_and_stops_the_workers(served) -> None:
    import threading

    proc, port, pids = served
    answers: list[int] = []
    caller = threading.Thread(target=lambda: answers.append(_verify(port, "loop")[0]),
                              daemon=True)
    caller.start()
    wait_for(lambda: any(p.read_text() == "loop" for p in pids.iterdir()), timeout=WAIT_S,
             interval=0.02, what="scoring starting")
    t0 = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)
    wait_for(lambda: not proc.is_running(), timeout=20, interval=0.02,
             what="nel serve exiting after SIGTERM")
    took = time.monotonic() - t0
    assert took < 3.0, f"nel serve took {took:.1f} s to exit after SIGTERM"
    wait_for(lambda: not process_group_members(proc.pid), timeout=20, interval=0.02,
             what="the scoring workers ending")
    caller.join(WAIT_S)
    assert answers in ([], [422], [503]), answers  # never a 500 or a reward


# --------------------------------------------------------------------------- the pool itself
# In-process pools over real worker processes: what the pipelining must keep and what it buys.


class _Scorer:
    """`verify` that loops forever on "loop", dies on "crash", and scores "2" as right;
    with `started`, a loop first creates that file."""

    name = "pool_probe"

    def __init__(self, started: Path | None = None) -> None:
        self.started = started

    async def verify(self, response: str, expected: str, **_: Any) -> Any:
        from benchmarks._types import VerifyResult

        if response == "loop":
            if self.started is not None:
                self.started.touch()
            while True:
                pass
        if response == "crash":
            os._exit(3)
        return VerifyResult(reward=float(response == expected), extracted_answer=response)


def _voluntary_switches(pids: list[int]) -> int:
    """Times these processes went to sleep (each is a wake-up someone paid for)."""
    total = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                total += int(line.split()[1])
    return total


async def _until(cond: Any, what: str) -> None:
    """Wait for `cond()` without blocking the loop (the pool's timers run on it)."""
    import asyncio

    deadline = time.monotonic() + WAIT_S
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"within {WAIT_S:.0f} s: {what} did not happen")
        await asyncio.sleep(0.02)


def test_a_burst_of_requests_wakes_the_workers_a_few_times_not_once_per_request() -> None:
    import asyncio

    from benchmarks.serve_pool import ScoringPool

    pool = ScoringPool(_Scorer(), 2, None)
    burst = 400

    async def run() -> tuple[int, int, list[Any]]:
        # Both workers up (and through their first requests) before counting.
        await asyncio.gather(*(pool.verify("2", "2", {}, 30) for _ in range(8)))
        pids = pool.pids()
        before = _voluntary_switches(pids)
        verdicts = await asyncio.gather(*(pool.verify("2", "2", {}, 30) for _ in range(burst)))
        assert sorted(pool.pids()) == sorted(pids), "a worker was replaced during a clean burst"
        after = _voluntary_switches(pids)
        pool.close()  # on its loop, as the server does at shutdown
        return before, after, verdicts

    try:
        before, after, verdicts = asyncio.run(run())
    finally:
        pool.close()
    assert [v["reward"] for v in verdicts] == [1.0] * burst
    # One request in flight per worker meant one wake-up per request (>= 400 here).
    assert after - before < burst // 4, f"{after - before} wake-ups for {burst} requests"


def test_requests_queued_behind_an_overrun_or_a_crash_are_still_scored_and_overruns_stop(
    tmp_path: Path,
) -> None:
    import asyncio

    from benchmarks.serve_pool import ScoringFailed, ScoringPool, ScoringTimeout

    started = tmp_path / "loop-started"
    # One worker: everything queues behind the culprit.
    pool = ScoringPool(_Scorer(started), 1, None)

    async def burst_behind(culprit: str, limit: float) -> tuple[Any, list[Any], float]:
        t0 = time.monotonic()
        first, *rest = await asyncio.gather(
            pool.verify(culprit, "2", {}, limit),
            *(pool.verify("2", "2", {}, 30) for _ in range(20)),
            return_exceptions=True,
        )
        return first, rest, time.monotonic() - t0

    async def run() -> None:
        await pool.verify("2", "2", {}, 30)
        (worker,) = pool.pids()
        looped, rest, took = await burst_behind("loop", LIMIT_S)
        assert isinstance(looped, ScoringTimeout) and "stopped" in str(looped), looped
        assert [r["reward"] for r in rest] == [1.0] * 20, rest
        assert took < LIMIT_S + 5, f"answered after {took:.1f} s for a {LIMIT_S} s limit"
        assert worker not in pool.pids()
        wait_for(lambda: not pid_alive(worker), timeout=WAIT_S, interval=0.02,
                 what="the overrunning worker ending")

        crashed, rest, _ = await burst_behind("crash", 30)
        assert isinstance(crashed, ScoringFailed) and "died" in str(crashed), crashed
        assert [r["reward"] for r in rest] == [1.0] * 20, rest
        assert len(pool.pids()) == 1

        # A caller that gives up (a cancelled request) still gets its overrun stopped.
        started.unlink()
        abandoned = asyncio.ensure_future(pool.verify("loop", "2", {}, LIMIT_S))
        await _until(started.exists, "the scorer looping")
        (worker,) = pool.pids()
        abandoned.cancel()
        await _until(lambda: not pid_alive(worker), "the abandoned overrun's worker ending")
        pool.close()  # on its loop, as the server does at shutdown

    try:
        asyncio.run(run())
    finally:
        pool.close()


def test_requests_do_not_wait_behind_an_overrun_while_another_worker_is_free(
    tmp_path: Path,
) -> None:
    import asyncio

    from benchmarks.serve_pool import ScoringPool, ScoringTimeout

    started = tmp_path / "loop-started"
    pool = ScoringPool(_Scorer(started), 2, None)

    async def run() -> None:
        await asyncio.gather(*(pool.verify("2", "2", {}, 30) for _ in range(4)))
        culprit = asyncio.ensure_future(pool.verify("loop", "2", {}, 3 * LIMIT_S))
        await _until(started.exists, "the scorer looping")
        t0 = time.monotonic()
        # Waves of requests while one worker is stuck: the free one scores them all, long
        # before the stuck one's limit.
        for _ in range(5):
            verdicts = await asyncio.gather(*(pool.verify("2", "2", {}, 30) for _ in range(20)))
            assert [v["reward"] for v in verdicts] == [1.0] * 20
        took = time.monotonic() - t0
        assert not culprit.done() and took < LIMIT_S, f"100 requests took {took:.1f} s"
        with pytest.raises(ScoringTimeout):
            await culprit
        pool.close()

    try:
        asyncio.run(run())
    finally:
        pool.close()
