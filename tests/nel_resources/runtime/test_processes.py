"""ManagedProcess: group kill of SIGTERM-ignoring trees, health waits, ports, atexit."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nel_resources.runtime.processes import (
    HealthCheckError,
    ManagedProcess,
    ProcessExitedError,
    free_port,
    pid_alive,
    start_on_free_port,
)
from tests.support.waiting import PROCESS_START_S, wait_for

# A leader and a grandchild that both ignore SIGTERM, like servers started in the background.
STUBBORN_TREE = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
    with open(sys.argv[1] + ".tmp", "w") as fh:
        fh.write(f"{os.getpid()} {child.pid}")
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(600)
    """
)

# The leader exits politely on SIGTERM, but its grandchild ignores it and would outlive it.
POLITE_LEADER_STUBBORN_GRANDCHILD = textwrap.dedent(
    """
    import os, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
    with open(sys.argv[1] + ".tmp", "w") as fh:
        fh.write(f"{os.getpid()} {child.pid}")
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(600)
    """
)


def _wait_for_file(path: Path, timeout: float = PROCESS_START_S) -> str:
    wait_for(path.exists, timeout=timeout, what=f"the child to write {path}", interval=0.01)
    return path.read_text()


def _wait_gone(pid: int, what: str) -> None:
    wait_for(lambda: not pid_alive(pid), timeout=60, what=f"{what} (pid {pid}) to be gone", interval=0.01)


@pytest.fixture
def ignore_sigterm_in_parent() -> Iterator[None]:
    """Reproduce this machine's background shells: SIGTERM ignored, inherited by children."""
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_stop_kills_whole_group_that_ignores_sigterm(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    proc = ManagedProcess(
        [sys.executable, "-c", STUBBORN_TREE, str(pid_file)], log_path=tmp_path / "tree.log"
    ).start()
    leader, grandchild = map(int, _wait_for_file(pid_file).split())
    assert leader == proc.pid
    assert pid_alive(leader) and pid_alive(grandchild)
    assert os.getpgid(grandchild) == proc.pid  # same group: the whole tree is reachable

    started = time.monotonic()
    code = proc.stop(grace=0.5)
    elapsed = time.monotonic() - started

    assert code == -signal.SIGKILL  # SIGTERM was ignored, so escalation was needed
    assert elapsed >= 0.5  # ... and only after the grace period (no upper bound: CI is loaded)
    assert not pid_alive(leader)
    _wait_gone(grandchild, "the grandchild")
    assert proc.stop() == code  # idempotent
    assert (tmp_path / "tree.log").exists()  # the log is kept


def test_stop_kills_grandchild_outliving_polite_leader(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    with ManagedProcess(
        [sys.executable, "-c", POLITE_LEADER_STUBBORN_GRANDCHILD, str(pid_file)]
    ) as proc:
        leader, grandchild = map(int, _wait_for_file(pid_file).split())
        code = proc.stop(grace=0.5)
    assert code == -signal.SIGTERM  # the leader went politely ...
    assert not pid_alive(leader)
    _wait_gone(grandchild, "the straggling grandchild")  # ... and its straggler too


@pytest.mark.usefixtures("ignore_sigterm_in_parent")
def test_child_gets_default_sigterm_even_if_parent_ignores_it(tmp_path: Path) -> None:
    proc = ManagedProcess(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(600)"]
    ).start()
    wait_for(lambda: "up" in proc.log_tail(), timeout=PROCESS_START_S, what="the child to print 'up'",
             interval=0.01)
    # SIGTERM killed it: no SIGKILL escalation was needed (that would read -SIGKILL).
    assert proc.stop(grace=60) == -signal.SIGTERM


def test_wait_healthy_timeout_reports_log_tail(tmp_path: Path) -> None:
    port = free_port()
    script = "import time; print('booting: marker-7731', flush=True); time.sleep(600)"
    with ManagedProcess([sys.executable, "-c", script], log_path=tmp_path / "s.log") as proc:
        wait_for(lambda: "marker" in proc.log_tail(), timeout=PROCESS_START_S,
                 what="the child to print its marker", interval=0.01)
        with pytest.raises(HealthCheckError) as info:
            proc.wait_healthy(f"http://127.0.0.1:{port}/health", timeout=0.5)
    assert isinstance(info.value, TimeoutError)
    assert "marker-7731" in str(info.value)
    assert str(tmp_path / "s.log") in str(info.value)


def test_wait_healthy_fails_fast_when_process_exits(tmp_path: Path) -> None:
    script = "import sys; print('fatal: cannot load model xyz', flush=True); sys.exit(3)"
    # ProcessExitedError, not HealthCheckError: it stopped waiting when the child died.
    with ManagedProcess([sys.executable, "-c", script]) as proc, pytest.raises(ProcessExitedError) as info:
        proc.wait_healthy(f"http://127.0.0.1:{free_port()}/", timeout=PROCESS_START_S)
    assert "cannot load model xyz" in str(info.value)
    assert "status 3" in str(info.value)
    assert proc.returncode == 3


def test_wait_healthy_succeeds_against_http_server(tmp_path: Path) -> None:
    def make(port: int) -> ManagedProcess:
        return ManagedProcess([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                               "--directory", str(tmp_path)])

    # start_on_free_port retries on a fresh port should another worker take this one first
    proc, _ = start_on_free_port(make, lambda p: f"http://127.0.0.1:{p}/", timeout=PROCESS_START_S)
    with proc:
        assert proc.is_running()
    assert not proc.is_running()


def test_wait_healthy_refuses_non_local_targets() -> None:
    with (
        ManagedProcess([sys.executable, "-c", "import time; time.sleep(60)"]) as proc,
        pytest.raises(ValueError, match=r"127\.0\.0\.1"),
    ):
        proc.wait_healthy("http://example.com/health", timeout=1)


def test_free_port_is_bindable() -> None:
    port = free_port()
    assert 1024 <= port <= 65535
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_atexit_kills_what_was_started(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    driver = textwrap.dedent(
        f"""
        import sys
        from nel_resources.runtime.processes import ManagedProcess
        proc = ManagedProcess([sys.executable, "-c", "import time; time.sleep(600)"]).start()
        open({str(pid_file)!r}, "w").write(str(proc.pid))
        # exit without stop(): the atexit hook must clean up
        """
    )
    root = Path(__file__).resolve().parents[3]
    subprocess.run([sys.executable, "-c", driver], cwd=root, check=True, timeout=PROCESS_START_S)
    pid = int(pid_file.read_text())
    _wait_gone(pid, "the child the atexit hook must kill")


def test_stop_before_start_and_empty_argv() -> None:
    assert ManagedProcess([sys.executable, "-c", "pass"]).stop() is None
    with pytest.raises(ValueError):
        ManagedProcess([])
