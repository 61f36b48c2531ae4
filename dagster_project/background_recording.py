"""Dagster's recording of a finished `nel eval run`, done after the command has returned.

When a run's one stale shard and its model's bundle were computed by the head start (before
Dagster is imported), what is left is bookkeeping: import Dagster (~1 s of CPU), open the
instance and record the shard's and the bundle's materializations. None of it changes a
result, a file the user reads or the exit status, all of which are known by then. Done in
the command, it took a core from the evaluation loop while the requests flowed (the import
ran beside it on a 2-core machine) and then added to the time after the last answer. So the
command prints its summary and returns, and a process forked from it records the runs: the
same jobs, the same run ids chosen in advance, the same materializations, data versions and
metadata as when the command records them itself.

What keeps this safe:

* The recording process holds the output directory's run lock (`output_lock`), inherited
  across the fork: the next `nel eval run` on the directory waits for it (silently, it is
  short) instead of running beside it. It also holds `<home>/.nel-recording.lock`, which
  `instance_config.open_instance` waits on, so no nel command reads the instance before the
  run is in it.
* It starts its own session (`setsid`): a Ctrl-C in the terminal after the command returned
  does not cut the recording short. Its output goes to the run log (`<out>/logs/nel-run.log`),
  never to the caller's pipes, so a caller reading the command's output sees it end when the
  command ends.
* Only the plain case is deferred: one benchmark, one model, one stale shard, its bundle
  built, no comparison, the shard and bundle computed without error, and this process free
  to fork (no other thread). Every other run records in the command, as before, and so do
  runs where Dagster is already imported (the nel daemon) or `NEL_RECORD_INLINE=1` is set.

A recording that fails (the instance's disk is full, say) writes its traceback to the run
log; the results, report and exports are complete whatever happens to it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

#: The lock file in a Dagster home that a recording process holds while it records.
RECORDING_LOCK = ".nel-recording.lock"

_recording_here = False  # this process is a recording process (its own lock is not waited on)


def wanted() -> bool:
    """Whether this process may defer its recording: not asked to record inline, Dagster not
    imported yet (a warm process such as the nel daemon records as cheaply in place)."""
    return not os.environ.get("NEL_RECORD_INLINE") and "dagster" not in sys.modules


class RecordLater:
    """A run's Dagster recording, deferred by the runner (`defer`) and started by `detach`
    once the run's summary is complete."""

    def __init__(self) -> None:
        self._record: Callable[[], None] | None = None

    def defer(self, record: Callable[[], None]) -> None:
        """Keep `record` (it imports Dagster and records the runs) for `detach`."""
        self._record = record

    @property
    def pending(self) -> bool:
        """Whether a recording is deferred and not started yet."""
        return self._record is not None

    def detach(self, home: Path, log_path: Path, lock_fd: int | None) -> None:
        """Start the deferred recording in a forked process of its own session and return at
        once; where a fork is not safe (another thread is alive), record here and now.

        Args:
            home: the run's Dagster home (its recording lock is taken here, before the fork).
            log_path: the run log, where the recording process writes.
            lock_fd: the output directory's run lock, which the recording process keeps.
        """
        from nel_assets.engine.evaluation import forked

        record, self._record = self._record, None
        if record is None:
            return
        if not forked.can_fork():
            record()
            return
        home_fd = _take(Path(home) / RECORDING_LOCK)
        if lock_fd is not None:  # marked before the fork: no moment where a next run refuses
            from dagster_project.output_lock import mark_recording

            mark_recording(lock_fd)
        for stream in (sys.stdout, sys.stderr):  # nothing buffered is written twice
            with contextlib.suppress(Exception):
                stream.flush()
        if os.fork() == 0:
            _recorder(record, log_path, lock_fd)  # never returns
        if home_fd is not None:
            os.close(home_fd)  # the child holds it now


def wait_for_recording(home: Path) -> None:
    """Wait until no process records a run into the instance at `home` (at once when none
    does, or when this process is the one recording)."""
    if _recording_here:
        return
    try:
        fd = os.open(Path(home) / RECORDING_LOCK, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return  # never recorded in the background
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
    finally:
        os.close(fd)


def _take(path: Path) -> int | None:
    """An exclusive lock on `path`, created if need be (None when it cannot be: the
    recording then runs without making others wait, as the instance itself serialises)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        return None
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def _recorder(record: Callable[[], None], log_path: Path, lock_fd: int | None) -> None:
    """The recording process: its own session, its output to the run log, the run lock
    marked as a recording's, then `record()`, then `os._exit` (the caller's atexit handlers
    are the caller's)."""
    global _recording_here
    code = 1
    try:
        os.setsid()
        import signal

        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            Path(log_path).parent.mkdir(parents=True, exist_ok=True)
            log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError:
            log = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        if lock_fd is not None:
            from dagster_project.output_lock import mark_recording

            mark_recording(lock_fd)
        _recording_here = True
        record()
        code = 0
    except BaseException:  # the log is the only place left to say it
        with contextlib.suppress(Exception):
            sys.stderr.write("nel: recording the run in Dagster failed:\n" + traceback.format_exc())
            sys.stderr.flush()
    finally:
        os._exit(code)
