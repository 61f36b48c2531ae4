"""`nel eval run --background`: the run goes on in a detached process, as NeMo Evaluator's
local executor does it: `<out>/nel.pid` holds its PID while it runs, `<out>/nel_eval.log`
its output (summary included); the command returns at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.errors import NelError

PID_FILE = "nel.pid"
LOG_FILE = "nel_eval.log"
# Set in the detached process: the PID file it removes when it ends.
_PIDFILE_VAR = "NEL_BACKGROUND_PIDFILE"


def _child_argv(argv: list[str]) -> list[str]:
    """The same command without --background (and without a progress bar: no terminal)."""
    out = [a for a in argv if a != "--background"]
    return out if "--no-progress" in out else [*out, "--no-progress"]


def start_background(cfg: Any, argv: list[str]) -> int:
    """Start `nel eval run` (argv minus --background) detached; print where to look.

    Returns 0 once the process is started (its own exit status is in its log and in
    `<out>/checkpoint.json`).
    """
    from dagster_project.output_lock import check_output_free

    out = Path(cfg.output.dir).expanduser().resolve()
    # Before the running run's pid file and log are overwritten; a background run never
    # waits (its child would have to share them meanwhile).
    check_output_free(out, "`nel eval status -o DIR -w` shows when; --background does not wait")
    try:
        out.mkdir(parents=True, exist_ok=True)
        log = open(out / LOG_FILE, "wb")  # handed to the child, closed below
    except OSError as exc:
        raise NelError(f"cannot write {out / LOG_FILE}: {exc.strerror or exc}") from None
    pid_file = out / PID_FILE
    env = {**os.environ, _PIDFILE_VAR: str(pid_file)}
    try:
        # Its own session: closing this terminal or Ctrl-C here does not stop it.
        proc = subprocess.Popen([sys.executable, "-m", "dagster_project.cli.main", *_child_argv(argv)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=env, cwd=os.getcwd(), start_new_session=True)
    finally:
        log.close()
    pid_file.write_text(str(proc.pid))
    if proc.poll() is not None:  # it ended before the file was written: no stale PID
        pid_file.unlink(missing_ok=True)
    print(f"background evaluation started (PID {proc.pid})")
    print(f"log: {out / LOG_FILE}", flush=True)
    print(f"pid file: {pid_file} (removed when the run ends); results: {out}", flush=True)
    return 0


def finished_in_background() -> None:
    """In the detached process: remove the PID file (only if it still names this process)."""
    path = os.environ.get(_PIDFILE_VAR)
    if not path:
        return
    p = Path(path)
    try:
        if p.read_text().strip() == str(os.getpid()):
            p.unlink()
    except OSError:
        pass  # already removed (e.g. by `nel eval stop`)
