"""`forked.ForkedCall`: a call run in a forked child (the bundle built while the `nel`
process imports Dagster), its result, its error, a child that dies, and the caller's exit
waiting for it. Real forks, real pipes, real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from benchmarks.errors import NelError
from nel_assets.engine.evaluation.forked import ForkedCall, can_fork
from nel_assets.engine.evaluation.head_start import HeadStartOutcomes
from tests.support.realcomponents import REPO_ROOT

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork: Linux only")


def _write_and_return(path: str, text: str) -> dict[str, object]:
    Path(path).write_text(text)
    return {"pid": os.getpid(), "text": text, "path": Path(path)}


def _fail(message: str) -> None:
    raise NelError(message)


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def test_the_call_runs_in_another_process_and_its_result_comes_back(tmp_path: Path) -> None:
    call = ForkedCall("writing", _write_and_return, str(tmp_path / "f"), text="hello")
    got = call.result()
    assert got["pid"] != os.getpid() and got["text"] == "hello" and got["path"] == tmp_path / "f"
    assert (tmp_path / "f").read_text() == "hello"
    assert call.result() is got  # collected once, kept


def test_its_exception_is_raised_by_result_and_not_by_wait() -> None:
    call = ForkedCall("failing", _fail, "no shard results to bundle yet")
    call.wait()
    with pytest.raises(NelError, match="no shard results to bundle yet"):
        call.result()


def test_a_child_killed_before_it_answered_is_an_error_naming_it() -> None:
    call = ForkedCall("building the bundle of b/m", _die)
    with pytest.raises(NelError, match=r"building the bundle of b/m ended without a result \(signal 9\)"):
        call.result()


def test_a_kept_later_is_taken_by_its_run_and_a_discarded_one_is_waited_for(tmp_path: Path) -> None:
    outcomes = HeadStartOutcomes()
    outcomes.keep_bundle("b", "m", "run-1", later=ForkedCall("x", _write_and_return, str(tmp_path / "a"), "A"))
    assert outcomes.take_bundle("b", "m", "run-1")["text"] == "A"
    assert outcomes.take_bundle("b", "m", "run-1") is None  # once
    outcomes.keep_bundle("b", "m", "run-2", later=ForkedCall("x", _fail, "boom"))
    with pytest.raises(NelError, match="boom"):
        outcomes.take_bundle("b", "m", "run-2")
    outcomes.keep_bundle("b", "m", "run-3", later=ForkedCall("x", _write_and_return, str(tmp_path / "c"), "C"))
    outcomes.discard("run-3")  # waits: the file is complete on return
    assert (tmp_path / "c").read_text() == "C"


def test_the_callers_exit_waits_for_a_child_nobody_collected(tmp_path: Path) -> None:
    # The child writes its file half a second after the caller has returned from main;
    # the caller's interpreter must not end before it (the files are complete when `nel`
    # has exited).
    done = tmp_path / "done"
    code = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from nel_assets.engine.evaluation.forked import ForkedCall
        def slow():
            time.sleep(0.5)
            Path({str(done)!r}).write_text("complete")
        ForkedCall("slow", slow)
        print("returned", flush=True)
    """)
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT,
                       env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, timeout=60)
    assert p.returncode == 0 and p.stdout == "returned\n", p.stderr  # printed once, not twice
    assert done.read_text() == "complete" and time.monotonic() - t0 >= 0.5


def test_no_fork_while_another_thread_runs() -> None:
    import threading

    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert not can_fork()
    finally:
        stop.set()
        t.join()
