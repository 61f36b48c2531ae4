"""Two runs on one output directory: one at a time (a lock), and every model keeps its exports.

Real `nel eval run` processes against a real reference server; requests are counted at the
server."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import REPO_ROOT, nel_env, run_nel, summary_json
from tests.support.cli_output import error_lines
from tests.support.reference import reset_server_stats
from tests.support.waiting import PROCESS_START_S, wait_for

N = 120


def _args(url: str, out: Path, model: str = "m", *extra: str) -> list[str]:
    return ["eval", "run", "--bench", "gsm8k", "-m", str(N), "--model-url", url, "--model-id",
            model, "-o", str(out), "--no-progress", "--max-concurrent", "4", "--json", *extra]


def _popen(args: list[str], data_dir: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "dagster_project.cli.main", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=nel_env({"NEL_DATA_DIR": str(data_dir)}), cwd=REPO_ROOT,
                            start_new_session=True)


def _sent(server_stats, url: str) -> int:
    return server_stats(url)["by_endpoint"].get("/v1/chat/completions", 0)


def test_two_runs_started_together_send_each_request_once(
        tmp_path: Path, reference_server, server_stats, data_dir: Path) -> None:
    """Both start at once: one runs, the other refuses in one line naming the first's pid
    (or, had the first ended already, finds everything stored). Requests == samples."""
    url = reference_server(delay_ms=100)  # ~3 s of requests: the two runs overlap
    out = tmp_path / "out"
    procs = [_popen(_args(url, out), data_dir) for _ in range(2)]
    try:
        results = [(p, *p.communicate(timeout=300)) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert _sent(server_stats, url) == N, "both runs sent the requests"
    codes = sorted(p.returncode for p, _, _ in results)
    assert codes in ([0, 0], [0, 2]), [(p.returncode, e[-2000:]) for p, _, e in results]
    for p, stdout, stderr in results:
        if p.returncode == 2:
            (line,) = error_lines(stdout, stderr)
            winner = next(q for q, _, _ in results if q is not p)
            assert f"in use by another nel run (pid {winner.pid})" in line and "--wait" in line, line
        else:
            assert summary_json(subprocess.CompletedProcess([], 0, stdout, stderr))[
                "results"][0]["n_samples"] == N


def test_a_second_run_refuses_or_waits_while_the_first_runs(
        tmp_path: Path, reference_server, server_stats, data_dir: Path) -> None:
    url = reference_server(delay_ms=100)
    out = tmp_path / "out"
    first = _popen(_args(url, out), data_dir)
    try:
        # The first run holds the lock once its pid is in the lock file.
        def locked() -> bool:
            assert first.poll() is None, "the first run ended without holding a lock"
            lock = out / ".nel-run.lock"
            return lock.exists() and lock.read_text().strip() == str(first.pid)

        wait_for(locked, timeout=PROCESS_START_S, what="the first run's lock", interval=0.05)
        refused = run_nel(*_args(url, out), env={"NEL_DATA_DIR": str(data_dir)})
        assert refused.returncode == 2
        (line,) = error_lines(refused.stdout, refused.stderr)
        assert f"pid {first.pid}" in line, line
        assert first.poll() is None, "the first run ended before the second was refused"
        waited = _popen(_args(url, out, "m", "--wait"), data_dir)
        w_out, w_err = waited.communicate(timeout=300)
        assert first.wait(timeout=300) == 0
    finally:
        if first.poll() is None:
            first.kill()
    assert waited.returncode == 0, w_err[-2000:]
    assert f"waiting for the nel run (pid {first.pid})" in w_err
    # The waiting run found the first run's results stored: no request of its own.
    assert _sent(server_stats, url) == N
    assert summary_json(subprocess.CompletedProcess([], 0, w_out, w_err))["requests_sent"] == 0


@pytest.fixture
def daemon_env(tmp_path: Path, data_dir: Path) -> Iterator[dict[str, str]]:
    """A nel daemon of this checkout (its sockets under tmp_path); yields the environment
    that hands `nel eval run` to it."""
    env = {"NEL_DAEMON_DIR": str(tmp_path / "daemons"), "NEL_DATA_DIR": str(data_dir),
           "NEL_DAEMON": "on"}
    started = run_nel("daemon", "start", env=env)
    assert started.returncode == 0, started.stderr
    try:
        yield env
    finally:
        run_nel("daemon", "stop", "--all", env=env)


def _daemon_served(env: dict[str, str]) -> int:
    st = run_nel("daemon", "status", "--json", env=env)
    (row,) = [r for r in json.loads(st.stdout) if r["current_code"]]
    return int(row["served"])


def test_two_runs_through_the_daemon_lock_in_their_forks(
        tmp_path: Path, reference_server, server_stats, daemon_env: dict[str, str]) -> None:
    """Under the nel daemon each run is a forked child: the lock is the child's, so the two
    runs still exclude each other, and the daemon holds nothing once they end."""
    url = reference_server(delay_ms=100)
    out = tmp_path / "out"
    procs = [subprocess.Popen([sys.executable, "-m", "dagster_project.cli.main", *_args(url, out)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=nel_env(daemon_env), cwd=REPO_ROOT, start_new_session=True)
             for _ in range(2)]
    try:
        results = [(p, *p.communicate(timeout=300)) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert _daemon_served(daemon_env) == 2, "the runs did not go through the daemon"
    assert _sent(server_stats, url) == N
    codes = sorted(p.returncode for p, _, _ in results)
    assert codes in ([0, 0], [0, 2]), [(p.returncode, e[-2000:]) for p, _, e in results]
    for p, stdout, stderr in results:
        if p.returncode == 2:
            (line,) = error_lines(stdout, stderr)
            assert "in use by another nel run (pid " in line, line
    # Both forks are gone: the next run on the directory takes the lock at once.
    again = summary_json(run_nel(*_args(url, out), env=daemon_env))
    assert again["requests_sent"] == 0 and _daemon_served(daemon_env) == 3


def _files(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.iterdir()) if p.is_file() and (p.name.startswith("eval-")
                                                           or p.suffix in (".jsonl", ".json"))
            and not p.name.startswith(".")}


def test_model_b_after_model_a_keeps_a_exports(
        tmp_path: Path, reference_server, server_stats, data_dir: Path) -> None:
    url = reference_server()
    out = tmp_path / "out"
    env = {"NEL_DATA_DIR": str(data_dir)}
    summary_json(run_nel(*_args(url, out, "model-a"), env=env))
    bench = out / "gsm8k"
    a_files = _files(bench)
    assert any(n.startswith("eval-") for n in a_files) and "results.jsonl" in a_files, a_files
    summary_json(run_nel(*_args(url, out, "model-b"), env=env))
    models = bench / "models"
    moved = {p.parent.parent.name: p.parent for p in models.glob("*/gsm8k/results.jsonl")}
    assert set(moved) == {"model-a", "model-b"}, sorted(models.rglob("*"))
    assert _files(moved["model-a"]) == a_files, "model A's exports changed or went missing"
    assert not list(bench.glob("eval-*.json")) and not (bench / "results.jsonl").exists()
    # A's files are complete where they are now: a rerun of A neither asks nor rebuilds.
    reset_server_stats(url)
    again = summary_json(run_nel(*_args(url, out, "model-a"), env=env))
    assert again["requests_sent"] == 0 and _sent(server_stats, url) == 0
    assert _files(moved["model-a"]) == a_files


def test_background_run_refuses_a_busy_directory_before_touching_its_files(
        tmp_path: Path, reference_server, data_dir: Path) -> None:
    """`--background` checks before it starts its child: the running run's pid file and log
    are left alone, and the refusal reaches the terminal."""
    from dagster_project.output_lock import OutputLock

    url = reference_server()
    out = tmp_path / "out"
    out.mkdir()
    (out / "nel_eval.log").write_text("the running run's log\n")
    lock = OutputLock()
    lock.acquire(out)  # this test process plays the running run
    try:
        r = run_nel(*_args(url, out), "--background", env={"NEL_DATA_DIR": str(data_dir)})
    finally:
        lock.release()
    assert r.returncode == 2
    (line,) = error_lines(r.stdout, r.stderr)
    assert f"in use by another nel run (pid {os.getpid()})" in line, line
    assert (out / "nel_eval.log").read_text() == "the running run's log\n"
    assert not (out / "nel.pid").exists()
