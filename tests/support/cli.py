"""Run the real `nel` CLI as a subprocess (its own process group) and read its outputs."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tests.support.realcomponents import REPO_ROOT
from tests.support.signals import default_signals


def nel_env(extra: dict[str, str] | None = None, unset: Sequence[str] = ()) -> dict[str, str]:
    """Environment for a CLI subprocess: repo on the path, no colour, extra vars, `unset` removed."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "NO_COLOR": "1", "COLUMNS": "200"}
    env.pop("DAGSTER_HOME", None)
    env.update(extra or {})
    for name in unset:
        env.pop(name, None)
    return env


def run_nel(*args: str, env: dict[str, str] | None = None, timeout: float = 300,
            cwd: Path | None = None, unset: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    """`nel ARGS...` in a fresh interpreter; returns the completed process.

    `timeout` is a ceiling for a command that hangs: past it the command's whole process
    group (servers it launched included) is killed and the test fails saying which command
    did not finish and what it printed, instead of a bare `TimeoutExpired`.
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", "dagster_project.cli.main", *args], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=nel_env(env, unset), cwd=cwd or REPO_ROOT,
        start_new_session=True, preexec_fn=default_signals,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"`nel {' '.join(args)}` did not finish within {timeout:.0f}s; "
                             f"stdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def start_nel(*args: str, env: dict[str, str] | None = None, log: Path) -> subprocess.Popen[bytes]:
    """Start `nel ARGS...` in the background (own session), output to `log`."""
    fh = open(log, "wb")
    return subprocess.Popen(
        [sys.executable, "-m", "dagster_project.cli.main", *args], stdout=fh, stderr=subprocess.STDOUT,
        env=nel_env(env), cwd=REPO_ROOT, start_new_session=True, preexec_fn=default_signals,
    )


@contextlib.contextmanager
def started_nel(*args: str, out_dir: Path, env: dict[str, str] | None = None
                ) -> Iterator[tuple[subprocess.Popen[bytes], Path, Path]]:
    """`nel ARGS...` running in the background (own session), stdout and stderr in separate
    files under `out_dir`; yields (process, stdout path, stderr path).

    On leaving, a process still running has its whole group killed (servers it launched
    included), so a failing test never leaves a run behind.
    """
    stdout, stderr = out_dir / "stdout", out_dir / "stderr"
    with stdout.open("wb") as so, stderr.open("wb") as se:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dagster_project.cli.main", *args], stdout=so, stderr=se,
            cwd=REPO_ROOT, env=nel_env(env), start_new_session=True, preexec_fn=default_signals)
    try:
        yield proc, stdout, stderr
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def summary_json(proc: subprocess.CompletedProcess[str], status: int = 0) -> dict[str, Any]:
    """The `--json` summary printed by `nel eval run`, which must have exited with `status`
    (0; 1 for a NO-GO gate, see dagster_project.exit_codes)."""
    assert proc.returncode == status, f"nel exited {proc.returncode}, not {status}:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout)
