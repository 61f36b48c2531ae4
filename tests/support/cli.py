"""Run the real `nel` CLI as a subprocess (its own process group) and read its outputs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.realcomponents import REPO_ROOT


def nel_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a CLI subprocess: repo on the path, no colour, extra vars."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "NO_COLOR": "1", "COLUMNS": "200"}
    env.pop("DAGSTER_HOME", None)
    env.update(extra or {})
    return env


def run_nel(*args: str, env: dict[str, str] | None = None, timeout: float = 300,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`nel ARGS...` in a fresh interpreter; returns the completed process."""
    return subprocess.run(
        [sys.executable, "-m", "dagster_project.cli.main", *args], capture_output=True,
        text=True, env=nel_env(env), timeout=timeout, cwd=cwd or REPO_ROOT,
        start_new_session=True,
    )


def start_nel(*args: str, env: dict[str, str] | None = None, log: Path) -> subprocess.Popen[bytes]:
    """Start `nel ARGS...` in the background (own session), output to `log`."""
    fh = open(log, "wb")
    return subprocess.Popen(
        [sys.executable, "-m", "dagster_project.cli.main", *args], stdout=fh, stderr=subprocess.STDOUT,
        env=nel_env(env), cwd=REPO_ROOT, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL),
    )


def summary_json(proc: subprocess.CompletedProcess[str], status: int = 0) -> dict[str, Any]:
    """The `--json` summary printed by `nel eval run`, which must have exited with `status`
    (0; 1 for a NO-GO gate, see dagster_project.exit_codes)."""
    assert proc.returncode == status, f"nel exited {proc.returncode}, not {status}:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout)
