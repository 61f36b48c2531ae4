"""`nel daemon`: runs handed to a warm fork give what in-process runs give.

Real processes throughout: the daemon (`nel daemon start`), `nel eval run` callers, the
reference server, the Dagster instance each run writes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from nel_resources.runtime.processes import pid_alive
from tests.support.cli import nel_env, run_nel, start_nel, summary_json
from tests.support.realcomponents import REPO_ROOT
from tests.support.waiting import wait_for, wait_while_running

CHAT = "/v1/chat/completions"


def _chat_requests(stats: dict) -> int:
    return int(stats["by_endpoint"].get(CHAT, 0))


def _status(env: dict[str, str]) -> list[dict]:
    st = run_nel("daemon", "status", "--json", env=env)
    assert st.returncode == 0, st.stderr
    return json.loads(st.stdout)


def _current(env: dict[str, str]) -> dict:
    rows = [r for r in _status(env) if r["current_code"]]
    assert len(rows) == 1, rows
    return rows[0]


@pytest.fixture
def daemon_env(tmp_path: Path, data_dir: Path) -> Iterator[dict[str, str]]:
    """A nel daemon of this checkout, its sockets in a folder of this test's own; yields
    the environment that makes `nel` find it."""
    env = {"NEL_DAEMON_DIR": str(tmp_path / "daemons"), "NEL_DATA_DIR": str(data_dir),
           "NEL_RUNS_DIR": str(tmp_path / "runs-index")}
    started = run_nel("daemon", "start", env=env)
    assert started.returncode == 0, started.stderr
    assert "nel daemon started (pid" in started.stdout
    pid = _current(env)["pid"]
    try:
        yield env
    finally:
        run_nel("daemon", "stop", "--all", env=env)
        try:
            wait_for(lambda: not pid_alive(pid), timeout=60, what="the daemon to exit")
        except AssertionError:
            os.kill(pid, signal.SIGKILL)
            raise


def _materializations(home: Path) -> list[tuple[str, str | None, str | None, dict]]:
    """(asset, partition, data version, numeric metadata) of every materialization."""
    out = []
    with dg.DagsterInstance.from_config(str(home)) as instance:
        for key in instance.get_asset_keys():
            records = instance.fetch_materializations(key, limit=100).records
            for r in records:
                m = r.asset_materialization
                assert m is not None
                md = {k: v.value for k, v in m.metadata.items()
                      if isinstance(v.value, int | float) and "time" not in k and "_s" not in k
                      and "cpu" not in k and "mb" not in k}
                out.append((key.to_user_string(), m.partition, m.tags.get("dagster/data_version"), md))
    return sorted(out, key=lambda t: (t[0], str(t[1])))


def test_a_run_through_the_daemon_records_what_an_in_process_run_records(
        tmp_path: Path, daemon_env: dict[str, str], reference_server, server_stats) -> None:
    url = reference_server(default_content="Let me think.\n#### 42")
    args = ("eval", "run", "-b", "gsm8k", "-m", "30", "-n", "2", "--model-url", url, "--model-id", "m",
            "--no-progress", "--json")
    caller_dir = tmp_path / "caller"
    caller_dir.mkdir()
    # A relative output directory: it must land under the caller's working directory.
    warm = run_nel(*args, "-o", "out", env=daemon_env, cwd=caller_dir)
    served = _current(daemon_env)
    assert served["served"] == 1 and served["last_run"]["exit"] == 0
    cold = run_nel(*args, "-o", str(tmp_path / "cold"), env={**daemon_env, "NEL_DAEMON": "off"})
    assert _current(daemon_env)["served"] == 1  # NEL_DAEMON=off kept that one in-process

    w, c = summary_json(warm), summary_json(cold)
    assert w["output_dir"] == str(caller_dir / "out")
    assert w["requests_sent"] == c["requests_sent"] == 60
    assert w["results"] == [{**r, "exports": w["results"][0]["exports"]} for r in c["results"]]
    assert w["dagster_runs"] == c["dagster_runs"] == 2
    assert _materializations(caller_dir / "out" / ".dagster") == _materializations(tmp_path / "cold" / ".dagster")
    assert (caller_dir / "out" / "gsm8k" / "results.jsonl").read_bytes().count(b"\n") == 60
    # The run was the daemon's fork, not the caller: its pid is the one the run index holds.
    run_id = json.loads((caller_dir / "out" / "nel_run.json").read_text())["run_id"]
    status = run_nel("eval", "status", "-r", run_id, env=daemon_env).stdout
    assert f"pid: {served['last_run']['pid']}" in [ln.strip() for ln in status.splitlines()], status
    # An unchanged rerun through the daemon sends nothing.
    before = _chat_requests(server_stats(url))
    again = summary_json(run_nel(*args, "-o", "out", env=daemon_env, cwd=caller_dir))
    assert again["shards_run"] == 0 and _chat_requests(server_stats(url)) == before
    assert _current(daemon_env)["served"] == 2


def test_exit_status_and_error_lines_are_those_of_an_in_process_run(
        tmp_path: Path, daemon_env: dict[str, str]) -> None:
    # A usage mistake (exit 2) and a run whose model cannot be reached (every sample fails).
    cases = [("eval", "run", "-b", "no_such_benchmark", "-o", "{out}"),
             ("eval", "run", "-b", "gsm8k", "-m", "2", "--model-url", "http://127.0.0.1:9/v1",
              "--model-id", "m", "--no-progress", "-o", "{out}")]
    for i, case in enumerate(cases):
        warm = run_nel(*(a.format(out=tmp_path / f"w{i}") for a in case), env=daemon_env)
        cold = run_nel(*(a.format(out=tmp_path / f"c{i}") for a in case), env={**daemon_env, "NEL_DAEMON": "off"})
        assert warm.returncode == cold.returncode != 0, (warm.stderr, cold.stderr)
        errors = [ln for ln in warm.stderr.splitlines() if ln.startswith("error:")]
        assert errors and errors == [ln.replace(f"c{i}", f"w{i}") for ln in cold.stderr.splitlines()
                                     if ln.startswith("error:")]
        assert "Traceback" not in warm.stderr
    assert _current(daemon_env)["served"] == 2


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "nel eval stop"])
def test_stopping_the_caller_stops_the_run_and_not_the_daemon(
        tmp_path: Path, daemon_env: dict[str, str], reference_server, server_stats, how: str) -> None:
    url = reference_server(delay_ms=500)
    out, log = tmp_path / "out", tmp_path / "run.log"
    proc = start_nel("eval", "run", "-b", "gsm8k", "-m", "200", "--model-url", url, "--model-id", "m",
                     "-o", str(out), "--no-progress", "--max-concurrent", "1", env=daemon_env, log=log)
    daemon_pid = _current(daemon_env)["pid"]
    try:
        wait_while_running(lambda: _chat_requests(server_stats(url)) >= 2, proc=proc,
                           what="the run's first requests", log=log)
        run_pid = _current(daemon_env)["running"]
        assert len(run_pid) == 1 and run_pid[0] != proc.pid
        if how == "nel eval stop":
            run_id = json.loads((out / "nel_run.json").read_text())["run_id"]
            stop = run_nel("eval", "stop", "-r", run_id, env=daemon_env)
            assert stop.returncode == 0, stop.stderr
        else:
            proc.send_signal(getattr(signal, how))
        assert wait_for(lambda: proc.poll() is not None, timeout=60, what="nel eval run to end")
        assert proc.returncode == 130, log.read_text()[-3000:]
        assert "interrupted" in log.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert wait_for(lambda: not _current(daemon_env)["running"], timeout=60, what="the run to end")
    sent = _chat_requests(server_stats(url))
    assert sent < 200
    assert pid_alive(daemon_pid) and _current(daemon_env)["last_run"]["exit"] == 130


def test_a_caller_killed_outright_takes_its_run_with_it(
        tmp_path: Path, daemon_env: dict[str, str], reference_server, server_stats) -> None:
    url = reference_server(delay_ms=500)
    log = tmp_path / "run.log"
    proc = start_nel("eval", "run", "-b", "gsm8k", "-m", "200", "--model-url", url, "--model-id", "m",
                     "-o", str(tmp_path / "out"), "--no-progress", "--max-concurrent", "1",
                     env=daemon_env, log=log)
    wait_while_running(lambda: _chat_requests(server_stats(url)) >= 2, proc=proc,
                       what="the run's first requests", log=log)
    (run_pid,) = _current(daemon_env)["running"]
    proc.kill()  # SIGKILL: no chance to pass anything on
    proc.wait()
    assert wait_for(lambda: not pid_alive(run_pid), timeout=60, what="the orphaned run to end")
    sent = _chat_requests(server_stats(url))
    assert sent < 200
    # and the daemon still serves
    ok = run_nel("eval", "run", "-b", "gsm8k", "-m", "3", "--model-url", reference_server(), "--model-id", "m",
                 "-o", str(tmp_path / "next"), "--no-progress", "--json", env=daemon_env)
    assert summary_json(ok)["requests_sent"] == 3
    assert _current(daemon_env)["served"] == 2


def test_other_code_finds_no_daemon_and_runs_in_process(tmp_path: Path, daemon_env: dict[str, str],
                                                        reference_server) -> None:
    daemons = Path(daemon_env["NEL_DAEMON_DIR"])
    (sock,) = daemons.glob("*.sock")
    # The socket under another code version's name: this code does not find its daemon.
    other = sock.with_name("0000000000000000.sock")
    sock.rename(other)
    try:
        r = run_nel("eval", "run", "-b", "gsm8k", "-m", "2", "--model-url", reference_server(), "--model-id", "m",
                    "-o", str(tmp_path / "out"), "--no-progress", "--json", env=daemon_env)
        assert summary_json(r)["requests_sent"] == 2
        rows = _status(daemon_env)
        assert [r["current_code"] for r in rows] == [False] and rows[0]["served"] == 0
        assert "other code" in run_nel("daemon", "status", env=daemon_env).stdout
    finally:
        other.rename(sock)
    # A caller whose start-up environment differs (here PYTHONPATH, which the daemon's own
    # interpreter read when it started) is not served either.
    env = {**daemon_env, "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{tmp_path}"}
    r = run_nel("eval", "run", "-b", "gsm8k", "-m", "2", "--model-url", reference_server(), "--model-id", "m",
                "-o", str(tmp_path / "out2"), "--no-progress", "--json", env=env)
    assert summary_json(r)["requests_sent"] == 2
    assert _current(daemon_env)["served"] == 0


def test_the_fingerprint_follows_the_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dagster_project import daemon_paths

    for pkg in daemon_paths.PACKAGES:
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    monkeypatch.setattr(daemon_paths, "REPO", tmp_path)
    first = daemon_paths.fingerprint()
    assert daemon_paths.fingerprint() == first
    mod = tmp_path / "nel_assets" / "scorer.py"
    mod.write_text("X = 1\n")
    second = daemon_paths.fingerprint()
    assert second != first
    os.utime(mod, ns=(1, 1))  # same size, another mtime: an edit
    assert daemon_paths.fingerprint() not in (first, second)


def test_stop_status_and_idle_timeout(tmp_path: Path) -> None:
    # A folder too deep for a socket path (108 bytes): the daemon is reached all the same.
    deep = tmp_path / ("d" * 100)
    env = {"NEL_DAEMON_DIR": str(deep)}
    assert run_nel("daemon", "status", env=env).stdout.strip() == "no nel daemon running"
    assert run_nel("daemon", "start", "--idle-timeout", "0.02", env=env).returncode == 0  # 1.2 s
    again = run_nel("daemon", "start", env=env)
    assert "already running" in again.stdout
    pid = _current(env)["pid"]
    assert wait_for(lambda: not pid_alive(pid), timeout=60, what="the idle daemon to stop by itself")
    assert not list(deep.glob("*.sock"))
    assert run_nel("daemon", "start", env=env).returncode == 0
    pid = _current(env)["pid"]
    stop = run_nel("daemon", "stop", env=env)
    assert "stopping" in stop.stdout
    assert wait_for(lambda: not pid_alive(pid), timeout=60, what="the daemon to stop")
    assert run_nel("daemon", "stop", env=env).stdout.strip() == "no nel daemon running for this code"
    bad = run_nel("daemon", "start", "--idle-timeout", "0", env=env)
    assert bad.returncode == 2 and bad.stderr.startswith("error: --idle-timeout must be a positive")


def test_the_daemon_imports_what_runs_used(tmp_path: Path, daemon_env: dict[str, str], reference_server) -> None:
    before = _current(daemon_env)["modules"]
    r = run_nel("eval", "run", "-b", "gsm8k", "-m", "2", "--model-url", reference_server(), "--model-id", "m",
                "-o", str(tmp_path / "out"), "--no-progress", "--json", env=daemon_env)
    summary_json(r)
    assert wait_for(lambda: _current(daemon_env)["modules"] > before, timeout=60,
                    what="the daemon to import the modules the run reported")


def test_help_stays_free_of_dagster() -> None:
    code = ("import sys; from dagster_project.cli.main import main\n"
            "try: main(['daemon', '--help'])\nexcept SystemExit: pass\n"
            "assert 'dagster' not in sys.modules, 'daemon --help imported dagster'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=nel_env(), cwd=REPO_ROOT)
    assert r.returncode == 0, r.stderr


def test_auto_from_nel_config_starts_a_daemon_for_the_next_runs(tmp_path: Path, reference_server,
                                                                 data_dir: Path) -> None:
    env = {"NEL_DAEMON_DIR": str(tmp_path / "d"), "NEL_USER_CONFIG": str(tmp_path / "config.yaml"),
           "NEL_DATA_DIR": str(data_dir)}
    assert run_nel("config", "set", "daemon", "auto", env=env).returncode == 0
    url = reference_server()
    args = ("eval", "run", "-b", "gsm8k", "-m", "2", "--model-url", url, "--model-id", "m", "--no-progress", "--json")
    first = run_nel(*args, "-o", str(tmp_path / "a"), env=env)
    assert summary_json(first)["requests_sent"] == 2  # in-process: no daemon was running
    try:
        wait_for(lambda: [r for r in _status(env) if r["current_code"]], timeout=120,
                 what="the daemon `auto` started")
        assert _current(env)["served"] == 0
        second = run_nel(*args, "-o", str(tmp_path / "b"), env=env)
        assert summary_json(second)["requests_sent"] == 2
        assert _current(env)["served"] == 1
    finally:
        pid = _current(env)["pid"]
        run_nel("daemon", "stop", "--all", env=env)
        wait_for(lambda: not pid_alive(pid), timeout=60, what="the daemon to stop")


def test_two_daemons_started_together_leave_one(tmp_path: Path) -> None:
    env = nel_env({"NEL_DAEMON_DIR": str(tmp_path / "d")})
    procs = [subprocess.Popen([sys.executable, "-m", "dagster_project.cli.main", "daemon", "start"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO_ROOT)
             for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    rows = _status({"NEL_DAEMON_DIR": str(tmp_path / "d")})
    assert len(rows) == 1 and rows[0]["current_code"]
    pids = {int(o[0].split("pid ")[1].split(",")[0]) for o in outs}
    assert pids == {rows[0]["pid"]}  # both report the daemon that serves
    run_nel("daemon", "stop", "--all", env={"NEL_DAEMON_DIR": str(tmp_path / "d")})
    wait_for(lambda: not pid_alive(rows[0]["pid"]), timeout=60, what="the daemon to stop")


def test_a_bad_nel_daemon_value_is_one_error_line(tmp_path: Path) -> None:
    r = run_nel("eval", "run", "-b", "gsm8k", "-m", "2", "--model-url", "http://127.0.0.1:9/v1", "--model-id", "m",
                "-o", str(tmp_path / "o"), env={"NEL_DAEMON": "maybe"})
    assert r.returncode == 2
    assert r.stderr.strip() == "error: NEL_DAEMON must be on, off or auto, got 'maybe'"


def _in_terminal(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run `nel ARGS` on a pseudo-terminal; returns its exit status and what it printed."""
    import pty

    pid, fd = pty.fork()
    if pid == 0:  # the child: exec nel with the test's environment
        os.chdir(REPO_ROOT)
        os.execve(sys.executable, [sys.executable, "-m", "dagster_project.cli.main", *args], env)
    out = bytearray()
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the terminal's other side closed
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")


def test_a_run_on_a_terminal_prints_as_it_does_in_process(tmp_path: Path, daemon_env: dict[str, str],
                                                          reference_server) -> None:
    url = reference_server()
    args = ["eval", "run", "-b", "gsm8k", "-m", "3", "--model-url", url, "--model-id", "m"]
    code, warm = _in_terminal([*args, "-o", str(tmp_path / "w")], nel_env(daemon_env))
    assert code == 0, warm
    assert _current(daemon_env)["served"] == 1
    code, cold = _in_terminal([*args, "-o", str(tmp_path / "c")], nel_env({**daemon_env, "NEL_DAEMON": "off"}))
    assert code == 0, cold
    assert _current(daemon_env)["served"] == 1
    # Rich saw a terminal in both (a live progress bar redrawn in place), and printed the same
    # results table and summary once the escapes, the timing and the output folder are set aside.
    def plain(text: str, out: str) -> list[str]:
        text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).replace(str(tmp_path / out), "OUT")
        lines = [re.sub(r"\d+\.\d+s\b", "T", ln.rstrip()) for ln in text.split("\r\n")]
        return lines[next(i for i, ln in enumerate(lines) if "nel results" in ln):]

    for text in (warm, cold):
        assert "\x1b[?25l" in text and "\x1b[2Kgsm8k" in text
    assert plain(warm, "w") == plain(cold, "c")
    assert "shards run 1, up to date 0, requests 3, T" in plain(warm, "w")


def test_at_a_terminal_the_first_run_starts_a_daemon_for_the_next(tmp_path: Path, reference_server,
                                                                  data_dir: Path) -> None:
    """NEL_DAEMON unset: `auto` at a terminal outside CI, `on` (start nothing) elsewhere."""
    url = reference_server()
    args = ["eval", "run", "-b", "gsm8k", "-m", "2", "--model-url", url, "--model-id", "m"]
    base = {"NEL_DATA_DIR": str(data_dir), "NEL_RUNS_DIR": str(tmp_path / "runs-index")}
    env = {**base, "NEL_DAEMON_DIR": str(tmp_path / "d")}
    code, first = _in_terminal([*args, "-o", str(tmp_path / "a")], nel_env(env, unset=("CI", "NEL_DAEMON")))
    assert code == 0, first
    assert "nel: starting a nel daemon (pid" in first
    try:
        wait_for(lambda: [r for r in _status(env) if r["current_code"]], timeout=120,
                 what="the daemon the first run started")
        assert _current(env)["served"] == 0  # the first run stayed in-process
        code, second = _in_terminal([*args, "-o", str(tmp_path / "b")], nel_env(env, unset=("CI", "NEL_DAEMON")))
        assert code == 0, second
        assert "starting a nel daemon" not in second
        assert _current(env)["served"] == 1
    finally:
        pid = _current(env)["pid"]
        run_nel("daemon", "stop", "--all", env=env)
        wait_for(lambda: not pid_alive(pid), timeout=60, what="the daemon to stop")

    # Not at a terminal (a script): nothing is started, nothing is printed about it.
    quiet = {**base, "NEL_DAEMON_DIR": str(tmp_path / "d2")}
    r = run_nel(*args, "-o", str(tmp_path / "c"), "--no-progress", "--json", env=quiet, unset=("CI", "NEL_DAEMON"))
    assert summary_json(r)["requests_sent"] == 2
    assert "daemon" not in r.stderr
    # At a terminal in CI: nothing is started either.
    ci = {**base, "NEL_DAEMON_DIR": str(tmp_path / "d3"), "CI": "true"}
    code, out = _in_terminal([*args, "-o", str(tmp_path / "e")], nel_env(ci, unset=("NEL_DAEMON",)))
    assert code == 0, out
    assert "starting a nel daemon" not in out
    for folder in ("d2", "d3"):
        assert not list((tmp_path / folder).glob("*.sock"))


def _daemon_under(sock: Path, setting: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A daemon of this checkout listening at `sock` (another code version's name), started
    as `spawn` starts one, with the given setting key."""
    return subprocess.Popen([sys.executable, "-m", "dagster_project.daemon_server", str(sock), "600", setting],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=nel_env(env),
                            cwd=REPO_ROOT, start_new_session=True)


def test_a_new_daemon_stops_the_daemons_of_older_code(tmp_path: Path) -> None:
    env = {"NEL_DAEMON_DIR": str(tmp_path / "d")}
    (tmp_path / "d").mkdir(mode=0o700)
    key = subprocess.run([sys.executable, "-c", "from dagster_project.daemon_paths import setting_key; "
                          "print(setting_key())"], capture_output=True, text=True, env=nel_env(env),
                         cwd=REPO_ROOT, check=True).stdout.strip()
    # Two daemons of this checkout under other code versions' names (as before an edit):
    # one started in the same setting as `nel daemon start` below, one in another setting
    # (another PYTHONPATH, say), which still serves its own callers.
    stale_sock, other_sock = tmp_path / "d" / "0000000000000000.sock", tmp_path / "d" / "1111111111111111.sock"
    stale = _daemon_under(stale_sock, key, env)
    other = _daemon_under(other_sock, "another-setting", env)
    try:
        wait_for(lambda: stale_sock.exists() and other_sock.exists(), timeout=120,
                 what="the older code's daemons to listen")
        assert [r["current_code"] for r in _status(env)] == [False, False]
        assert run_nel("daemon", "start", env=env).returncode == 0
        assert stale.wait(timeout=60) == 0  # asked to stop by the new one, it ended cleanly
        assert not stale_sock.exists()
        assert other.poll() is None and other_sock.exists()
        rows = _status(env)
        assert sorted(r["current_code"] for r in rows) == [False, True]
        log = next((tmp_path / "d").glob("*.log")).read_text()
        assert f"stopped the daemon of older code at {stale_sock}" in log
        assert str(other_sock) not in log
    finally:
        for p in (stale, other):
            if p.poll() is None:
                p.kill()
                p.wait()
        run_nel("daemon", "stop", "--all", env=env)
