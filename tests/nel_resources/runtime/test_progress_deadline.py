"""A start-up wait tells a slow start on a loaded machine from a hung one (issue 34, item 16).

A fixed 20 s deadline on the reference server's start failed a CI run under load although
the server was progressing. The wait now fails early only when the process group has used no
CPU for `stall` seconds; a busy start is waited for up to the ceiling."""

from __future__ import annotations

import sys
import time

import pytest

from nel_resources.runtime.processes import (
    HealthCheckError,
    ManagedProcess,
    ProgressDeadline,
    free_port,
    group_cpu_seconds,
)

#: Burns CPU for BUSY_S seconds (as an import-heavy start under load does), then serves /.
SLOW_BUSY_START = """
import http.server, sys, time
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    sum(range(1000))
http.server.test(HandlerClass=http.server.SimpleHTTPRequestHandler, port=int(sys.argv[1]),
                 bind="127.0.0.1")
"""
BUSY_S = 4.0
STALL_S = 1.5


def test_a_busy_start_longer_than_the_stall_is_waited_for(tmp_path) -> None:
    port = free_port()
    with ManagedProcess([sys.executable, "-c", SLOW_BUSY_START, str(port), str(BUSY_S)],
                        cwd=tmp_path, name="busy-start") as proc:
        started = time.monotonic()
        proc.wait_healthy(f"http://127.0.0.1:{port}/", timeout=300, stall=STALL_S)
        # It did take longer than the stall allowance: a plain deadline of STALL_S would fail.
        assert time.monotonic() - started > STALL_S


def test_the_same_start_fails_a_wall_deadline_of_the_stall_length(tmp_path) -> None:
    """The control: without progress tracking, the same start breaks the same allowance."""
    port = free_port()
    with ManagedProcess([sys.executable, "-c", SLOW_BUSY_START, str(port), str(BUSY_S)],
                        cwd=tmp_path, name="busy-start") as proc, pytest.raises(HealthCheckError):
        proc.wait_healthy(f"http://127.0.0.1:{port}/", timeout=STALL_S)


def test_a_hung_start_fails_after_the_stall_not_the_ceiling(tmp_path) -> None:
    with ManagedProcess([sys.executable, "-c", "import time; time.sleep(600)"],
                        name="hung-start") as proc:
        started = time.monotonic()
        with pytest.raises(HealthCheckError, match="no CPU progress"):
            proc.wait_healthy(f"http://127.0.0.1:{free_port()}/", timeout=300, stall=STALL_S)
        # Far from the 300 s ceiling: the interpreter's own start is the only CPU it uses.
        assert time.monotonic() - started < 120


def test_group_cpu_counts_the_whole_group(tmp_path) -> None:
    """A leader that only waits while its child works still shows progress."""
    code = ("import subprocess, sys; subprocess.run([sys.executable, '-c', "
            "'import time\\nend=time.monotonic()+3\\nwhile time.monotonic()<end: pass'])")
    with ManagedProcess([sys.executable, "-c", code], name="parent") as proc:
        deadline = ProgressDeadline(proc.pid, stall=STALL_S, ceiling=60)
        first = group_cpu_seconds(proc.pid)
        while proc.is_running():
            assert not deadline.expired(), deadline.describe()
            time.sleep(0.1)
        assert first is not None


def test_a_plain_deadline_ignores_cpu() -> None:
    deadline = ProgressDeadline(1, stall=0.0, ceiling=0.2, watch=False)
    assert not deadline.expired()
    time.sleep(0.3)
    assert deadline.expired() and "not ready after" in deadline.describe()
