"""One run per output directory at a time: an exclusive `flock` held for the whole run.

The drills: two `nel eval run` started together on one output directory each sent every
request (10,552 requests for 5,276 samples: neither saw the other's journal in time), and
one of them failed. A run now takes `<out>/.nel-run.lock` before it writes anything; a
second run refuses in one line naming the holder's pid, or with `--wait` waits for it and
then finds the first run's results stored (and sends no request for them).

`flock` belongs to the open file: the lock goes when the run's process ends however it
ends (crash, SIGKILL), so there is never a stale lock to clear. The file is opened
close-on-exec, so servers the run starts do not inherit it. Under the nel daemon each run
is a forked child that takes the lock itself; the daemon never opens it.

A run whose Dagster recording goes on after the command returned (background_recording)
leaves the lock to its recording process, which marks it as a recording's: a run that finds
that waits for it, whatever `--wait` says (the run is over; only its record is being written).
"""

from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path

from benchmarks.errors import NelError

LOCK_NAME = ".nel-run.lock"


class OutputBusyError(NelError):
    """Another run holds the output directory."""


class OutputLock:
    """The exclusive lock on an output directory, taken by `acquire(out)`.

    Args:
        wait: Wait for the run holding it to end instead of refusing.
    """

    def __init__(self, *, wait: bool = False) -> None:
        self.wait = wait
        self.path: Path | None = None
        self._fd: int | None = None

    def acquire(self, out: Path) -> None:
        """Take the lock on `out` (an existing directory), or refuse (OutputBusyError) /
        wait when another run holds it."""
        self.path = out / LOCK_NAME
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise NelError(f"cannot create the run lock {self.path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            if _recording(fd):  # the previous run is over; its record is being written
                _wait(fd)
            elif not self.wait:
                os.close(fd)
                raise _busy(out, holder) from None
            else:
                print(f"waiting for the nel run (pid {holder}) using {out} to end ...",
                      file=sys.stderr, flush=True)
                _wait(fd)
        # Who holds it, for the next run's message (read without the lock: advisory only).
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def fileno(self) -> int | None:
        """The lock's file descriptor while held (a forked recording process keeps it)."""
        return self._fd

    def release(self) -> None:
        """Let the next run in (closing the file drops the lock)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None



def check_output_free(out: Path, how_to_wait: str = "") -> None:
    """Refuse (OutputBusyError) when a run holds `out` now: `--background` checks before it
    starts its child, which would otherwise overwrite the running run's pid file and log
    before refusing where nobody reads it."""
    try:
        fd = os.open(out / LOCK_NAME, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return  # no lock file: no run has used the directory
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        if not _recording(fd):
            raise _busy(out, _holder(fd), how_to_wait) from None
        fcntl.flock(fd, fcntl.LOCK_SH)  # a finished run's recording: short, wait for it
    finally:
        os.close(fd)


def mark_recording(fd: int) -> None:
    """Say in the held lock `fd` that its holder (this process) is a finished run's Dagster
    recording (background_recording), so the next run waits for it instead of refusing."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} recording\n".encode(), 0)


def _wait(fd: int) -> None:
    """Block until the lock on `fd` is ours; the file is closed if the wait is interrupted."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise


def _busy(out: Path, holder: str, how_to_wait: str = "") -> OutputBusyError:
    how = how_to_wait or "re-run with --wait to start as soon as it does"
    return OutputBusyError(f"the output directory {out} is in use by another nel run (pid "
                           f"{holder}); wait for it to end ({how}) or use another -o")


def _holder(fd: int) -> str:
    """The pid the holding run wrote ("unknown" while it has not written it yet)."""
    pid = _text(fd).split(" ", 1)[0]
    return pid if pid.isdigit() else "unknown"


def _recording(fd: int) -> bool:
    """Whether the holder is a finished run's recording process (`mark_recording`)."""
    return _text(fd).endswith(" recording")


def _text(fd: int) -> str:
    try:
        return os.pread(fd, 64, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""


__all__ = ["LOCK_NAME", "OutputBusyError", "OutputLock", "check_output_free", "mark_recording"]
