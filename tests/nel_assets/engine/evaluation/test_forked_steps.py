"""`forked_steps.ForkedSteps`: a generator run in a forked child (the head start's shard and
bundle while `nel eval run` imports Dagster), each step's result as soon as it is yielded,
the error that ended it, a child that dies, signals sent to the caller alone reaching the
child, and a SIGKILL of the caller ending the child. Real forks, pipes, processes, signals."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.errors import NelError
from nel_assets.engine.evaluation.forked_steps import ForkedSteps
from tests.support.realcomponents import REPO_ROOT
from tests.support.waiting import wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork: Linux only")


def _two_steps(gate: str) -> Iterator[dict[str, object]]:
    yield {"pid": os.getpid(), "step": 0}
    # The second step waits for the caller's go: the first result must arrive before it.
    wait_for(lambda: Path(gate).exists() or None, timeout=60, what="the test's go", interval=0.02)
    yield {"pid": os.getpid(), "step": 1}


def _fails_after_one() -> Iterator[int]:
    yield 1
    raise NelError("the second step broke")


def _dies_after_one() -> Iterator[int]:
    yield 1
    os.kill(os.getpid(), signal.SIGKILL)
    yield 2


def test_each_step_comes_back_as_soon_as_it_is_yielded(tmp_path: Path) -> None:
    steps = ForkedSteps("working", ["first", "second"], _two_steps, str(tmp_path / "go"))
    first = steps.step(0).result()  # the child is still blocked before its second step
    assert first["step"] == 0 and first["pid"] == steps.pid != os.getpid()
    (tmp_path / "go").touch()
    assert steps.step(1).result() == {"pid": steps.pid, "step": 1}
    steps.wait()


def test_the_error_that_ended_it_is_raised_for_the_steps_it_did_not_reach() -> None:
    steps = ForkedSteps("working", ["first", "second"], _fails_after_one)
    assert steps.result(0) == 1
    with pytest.raises(NelError, match="the second step broke"):
        steps.result(1)
    steps.step(1).wait()  # waiting never raises


def test_a_child_killed_mid_way_is_an_error_naming_the_missing_step() -> None:
    steps = ForkedSteps("building x", ["its results", "its bundle"], _dies_after_one)
    assert steps.result(0) == 1
    with pytest.raises(NelError, match=r"building x: ended without its bundle \(signal 9\)"):
        steps.result(1)


# A caller in its own process: the test signals it (and only it) and reads what happened.
_CALLER = textwrap.dedent("""
    import os, signal, sys, time
    from pathlib import Path
    from nel_assets.engine.evaluation.forked_steps import ForkedSteps

    out = Path(sys.argv[1])

    def child():
        def on_term(signum, frame):
            (out / "child-got").write_text(str(signum))
            os._exit(0)
        signal.signal(signal.SIGTERM, on_term)
        (out / "child-pid").write_text(str(os.getpid()))
        while True:
            time.sleep(0.05)  # a shard at work: only a signal ends it
        yield None

    def on_term(signum, frame):
        (out / "caller-got").write_text(str(signum))
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    steps = ForkedSteps("a shard", ["its results"], child, forward_steps=1)
    (out / "caller-ready").touch()
    try:
        steps.result(0)
    except KeyboardInterrupt:
        steps.wait()
        (out / "caller-done").touch()
""")


def _caller(tmp_path: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    p = subprocess.Popen([sys.executable, "-c", _CALLER, str(tmp_path)], env=env, start_new_session=True)
    wait_for(lambda: ((tmp_path / "caller-ready").exists() and (tmp_path / "child-pid").exists()) or None,
             timeout=60, what="the caller and its child")
    return p


def test_a_signal_to_the_caller_alone_reaches_the_child_and_the_callers_handler(tmp_path: Path) -> None:
    p = _caller(tmp_path)
    try:
        os.kill(p.pid, signal.SIGTERM)  # as `nel eval stop` does: the pid, not the group
        assert p.wait(timeout=60) == 0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert (tmp_path / "child-got").read_text() == str(int(signal.SIGTERM))
    assert (tmp_path / "caller-got").read_text() == str(int(signal.SIGTERM))
    assert (tmp_path / "caller-done").exists()  # the caller waited for its child


def test_a_sigkill_of_the_caller_ends_the_child(tmp_path: Path) -> None:
    p = _caller(tmp_path)
    child = int((tmp_path / "child-pid").read_text())
    try:
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=60)

        def gone() -> bool | None:
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                return True
            # a zombie until init reaps it: dead all the same
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
            return True if state == "Z" else None

        wait_for(gone, timeout=60, what="the child to die with its caller", interval=0.05)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
