"""Escape drills: hostile programs in each sandbox type that runs here.

Each drill is contained (the test process and the machine go on; the sandbox answers the
next command), the result says why the program was stopped, and nothing it started is left
running afterwards (checked on the host's /proc by a marker unique to the drill in the
program's argv)."""

from __future__ import annotations

import os
import resource
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from nel_resources.sandboxes import ExecResult, Sandbox, SandboxFactory, SandboxSpec, running
from tests.nel_resources.sandboxes.conftest import DRILL_LIMITS, run
from tests.support.waiting import wait_for


def _procs_with(marker: str) -> list[int]:
    """Host pids whose argv holds `marker` (container processes are visible here too)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(entry.name))
        except OSError:
            continue  # exited while we looked
    return found


def _drill(f: SandboxFactory, program: str | list[str], *, timeout: float = 1,
           marker: str = "", output_limit: int = 1 << 20) -> ExecResult:
    """Run one hostile program, prove the sandbox still answers, stop it, and wait until no
    process carrying `marker` is left (the marker keeps the check to this drill's own)."""
    async def go() -> ExecResult:
        sb: Sandbox
        async with running(f.create(SandboxSpec())) as sb:
            r = await sb.exec(program, timeout_sec=timeout, output_limit=output_limit)
            after = await sb.exec(["echo", "still here"])
            assert after.ok and after.stdout == "still here\n", after
        return r
    result = run(go())
    if marker:
        wait_for(lambda: not _procs_with(marker), timeout=30,
                 what=f"every process of the drill ({marker}) to be gone")
    return result


def _marker() -> str:
    return f"nel-drill-{uuid.uuid4().hex[:12]}"


def test_fork_bomb(shared_factory: SandboxFactory) -> None:
    m = _marker()
    bomb = ("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n")
    r = _drill(shared_factory, ["python3", "-c", bomb, m], marker=m)
    assert r.stopped == "timeout" and not r.ok


def test_shell_fork_bomb(shared_factory: SandboxFactory) -> None:
    m = _marker()
    r = _drill(shared_factory, f"b() {{ b | b & }}; b; : {m}; sleep 30", marker=m)
    # bash forks on until the timeout; dash exits by itself once its own fork hits the limit
    assert r.stopped in ("timeout", "pids"), r
    assert not r.ok


def test_memory_hog(shared_factory: SandboxFactory) -> None:
    r = _drill(shared_factory, ["python3", "-c", "x = bytearray(1 << 30)"])
    assert (r.stopped, r.ok) == ("memory", False)
    grow = "chunks = []\nwhile True:\n    chunks.append(bytearray(8 << 20))\n"
    r = _drill(shared_factory, ["python3", "-c", grow], timeout=30)
    assert r.stopped == "memory", r


def test_infinite_loop_stops_at_cpu_time(shared_factory: SandboxFactory) -> None:
    # generous wall clock: on a busy machine 2 CPU seconds take longer than 2 s
    r = _drill(shared_factory, ["python3", "-c", "while True: pass"], timeout=120)
    assert r.stopped == "cpu_time", r


def test_sleep_past_the_timeout(shared_factory: SandboxFactory) -> None:
    m = _marker()
    r = _drill(shared_factory, ["python3", "-c", "import time; time.sleep(300)", m], timeout=1,
               marker=m)
    assert (r.stopped, r.return_code) == ("timeout", -1)


def test_one_gigabyte_stdout_flood(shared_factory: SandboxFactory) -> None:
    m = _marker()
    flood = ("import sys\nb = b'x' * (1 << 20)\nfor _ in range(1024):\n"
             "    sys.stdout.buffer.write(b)\n")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    r = _drill(shared_factory, ["python3", "-c", flood, m], timeout=60, output_limit=1 << 20,
               marker=m)
    grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert (r.stopped, r.truncated, len(r.stdout)) == ("output_limit", True, 1 << 20)
    assert grown_kb < 200 * 1024, f"the test process grew by {grown_kb} kB"


def test_file_size_limit(shared_factory: SandboxFactory) -> None:
    big = f"open('big', 'wb').write(b'x' * {2 * DRILL_LIMITS.max_file_bytes})"
    r = _drill(shared_factory, ["python3", "-c", big])
    assert r.stopped == "file_size", r


def test_nel_environment_is_invisible(shared_factory: SandboxFactory, fake_secret: str) -> None:
    r = _drill(shared_factory, "env; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done; "
               "cat /proc/1/environ; true")
    assert "PATH=" in r.stdout
    assert fake_secret not in r.stdout + r.stderr and "NEL_FAKE_API_KEY" not in r.stdout


def test_host_files_are_invisible_and_read_only(shared_factory: SandboxFactory, tmp_path: Path) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host-only-" + uuid.uuid4().hex)
    host_tmp = Path("/tmp") / _marker()
    r = _drill(shared_factory,
               f"cat {secret}; ls {tmp_path}; cat /proc/1/root{secret}; "
               f"echo pwned > {tmp_path}/pwned; echo pwned > /usr/pwned-{host_tmp.name}; "
               f"echo pwned > /pwned; echo inside > {host_tmp}; "
               "echo pwned > /proc/sys/kernel/hostname; cat /etc/shadow; true")
    assert secret.read_text() not in r.stdout
    assert not (tmp_path / "pwned").exists()
    assert not Path(f"/usr/pwned-{host_tmp.name}").exists() and not Path("/pwned").exists()
    assert not host_tmp.exists()  # its /tmp is its own
    assert socket.gethostname() != "pwned"


@pytest.fixture
def listener() -> Iterator[tuple[int, list[str]]]:
    """A TCP listener on 127.0.0.1 (as nel's servers are); records every connection."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    srv.settimeout(0.2)
    seen: list[str] = []
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, peer = srv.accept()
            except OSError:
                continue
            seen.append(str(peer))
            conn.close()
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield srv.getsockname()[1], seen
    finally:
        done.set()
        t.join()
        srv.close()


def test_no_network_not_even_nel_s_loopback(shared_factory: SandboxFactory,
                                           listener: tuple[int, list[str]]) -> None:
    port, seen = listener
    probe = ("import socket\nfor host in ('127.0.0.1', '10.0.0.1', '8.8.8.8'):\n"
             "    try:\n"
             f"        socket.create_connection((host, {port}), timeout=1).close()\n"
             "        print('connected', host)\n    except OSError as e:\n"
             "        print('blocked', host, type(e).__name__)\n")
    r = _drill(shared_factory, ["python3", "-c", probe], timeout=30)
    assert r.stdout.count("blocked") == 3 and "connected" not in r.stdout, r
    assert seen == []
    # the listener itself works: a connection from the test process is seen
    socket.create_connection(("127.0.0.1", port), timeout=5).close()
    wait_for(lambda: seen, timeout=10, what="the listener to see the test's own connection")


def test_killing_the_parent_and_everything(shared_factory: SandboxFactory) -> None:
    me = os.getpid()
    r = _drill(shared_factory, ["python3", "-c", "import os; os.kill(os.getppid(), 9)"])
    assert r.stopped is None or r.stopped == "killed", r
    r = _drill(shared_factory, f"kill -9 -1; kill -9 {me}; kill -9 1; kill -TERM 1; kill -HUP 1; "
               "kill -INT 1; kill -USR1 1; echo survived")
    assert os.getpid() == me  # and this test process goes on
    assert "survived" in r.stdout


def test_background_processes_do_not_outlive_the_sandbox(shared_factory: SandboxFactory) -> None:
    m = _marker()
    daemon = (f"setsid -f python3 -c 'import time; time.sleep(300)' {m}; "
              f"nohup python3 -c 'import time; time.sleep(300)' {m} >/dev/null 2>&1 & "
              f"python3 -c 'import os, time\nif os.fork() == 0:\n    os.setsid()\n"
              f"    time.sleep(300)' {m}; echo started")
    r = _drill(shared_factory, daemon, timeout=10, marker=m)
    assert r.ok and r.stdout == "started\n", r
