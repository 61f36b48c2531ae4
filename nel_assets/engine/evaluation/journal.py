"""Crash-safe shard journal: finished samples appended as JSON lines.

Two durability levels, on purpose:

* **Process death (SIGKILL, OOM kill, a crash of nel):** every finished row is handed to the
  kernel with write(2) the moment it is appended, before its worker sends anything else (no
  fsync). The page cache survives the death of the process, so a rerun never requests a
  sample whose row was produced before the kill; only requests still in flight (at most the
  run's concurrency) and samples still being scored by an awaited step (a judge call) are
  asked again. Batching the write to the end of the loop turn left a gap, seen in the SIGKILL
  test under load: a slot freed by an answered request was reused by another worker before
  the answered row reached the OS.
* **Machine crash / power loss:** fsync is grouped, at most every `interval` seconds, in a
  worker thread so the event loop never waits on the disk. Such a crash loses at most the
  rows written since the last fsync (the last `interval`, ~100 ms, of finished samples).

A write or fsync that fails (a full disk, an I/O error) is recorded, not swallowed:
`error` is set at once, the loop stops taking new work, and `raise_if_failed` turns it into
one line saying what happened and how many samples are kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from benchmarks.errors import NelError

# One row per line; orjson escapes newlines inside strings, so each line ends at its own.
_LINE = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE


class JournalWriteError(NelError):
    """The journal could not be written (disk full, I/O error): the run must stop."""


class Journal:
    """Append-only JSONL journal of finished sample rows for one shard."""

    def __init__(self, path: Path, *, interval: float = 0.1) -> None:
        self.path = path
        self.interval = interval
        self.error: OSError | None = None
        #: Called once when a write or fsync fails: the loop cancels its requests in flight
        #: and those waiting for a slot (their answers could not be kept).
        self.on_error: Callable[[], None] | None = None
        self.n_lines = 0  # complete lines in the file (handed to the OS)
        self._pending: list[bytes] = []
        self._fd: int | None = None
        self._unsynced = False
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @staticmethod
    def replay(path: Path) -> list[dict[str, Any]]:
        """Rows already journaled (a torn last line from a crash is ignored)."""
        if not path.exists():
            return []
        rows = []
        with open(path, "rb") as f:
            for line in f:
                if not line.endswith(b"\n"):
                    break  # torn write at the moment of the crash
                try:
                    rows.append(orjson.loads(line))
                except orjson.JSONDecodeError:
                    break
        return rows

    def open(self) -> None:
        """Open for appending, truncating any torn tail first."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            data = self.path.read_bytes()
            cut = data.rfind(b"\n") + 1
            if cut != len(data):
                with open(self.path, "r+b") as f:
                    f.truncate(cut)
            self.n_lines = data.count(b"\n", 0, cut)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def append(self, row: dict[str, Any]) -> None:
        """Hand one finished row to the OS now (one write(2); fsync comes later, grouped)."""
        if self.error is not None:
            return  # the journal is broken: the loop is stopping, nothing more is kept
        line = orjson.dumps(row, option=_LINE)
        if self._fd is None or self._pending:  # not open yet: keep it queued, in order
            self._pending.append(line)
            self._write_pending()
        else:
            self._write(line)

    def _write_pending(self) -> None:
        """One write(2) of the queued rows (no fsync: the page cache survives a kill)."""
        if not self._pending or self._fd is None or self.error is not None:
            return
        chunk, self._pending = b"".join(self._pending), []
        self._write(chunk)

    def _write(self, chunk: bytes) -> None:
        """Hand `chunk` (whole lines) to the OS, counting the lines that made it."""
        assert self._fd is not None
        written = 0
        try:
            written = os.write(self._fd, chunk)
            if written < len(chunk):  # a short write (a full disk): the rest, or its error
                view = memoryview(chunk)
                while written < len(chunk):
                    written += os.write(self._fd, view[written:])
        except OSError as exc:
            self._fail(exc)
        # Only complete lines count; a torn tail is cut off by the next open().
        self.n_lines += chunk.count(b"\n", 0, written)
        self._unsynced = True

    def _fsync(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    async def sync(self) -> None:
        """fsync what was written since the last sync, off the event loop."""
        self._write_pending()
        if not self._unsynced or self._fd is None or self.error is not None:
            return
        self._unsynced = False
        try:
            await asyncio.to_thread(self._fsync)
        except OSError as exc:
            self._fail(exc)

    def _fail(self, exc: OSError) -> None:
        if self.error is None:
            self.error = exc
            if self.on_error is not None:
                self.on_error()

    async def flush(self) -> None:
        """Write and fsync everything queued (what `close` does before closing)."""
        await self.sync()

    async def _run(self) -> None:
        while not self._closed and self.error is None:
            await asyncio.sleep(self.interval)
            await self.sync()

    def start(self) -> None:
        """Open the file and start the periodic group fsync."""
        self.open()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        """Stop the flusher, write and fsync what is left. Never raises: see `error`."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.sync()
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def raise_if_failed(self) -> None:
        """Raise a one-line `JournalWriteError` if a write or fsync failed."""
        exc = self.error
        if exc is None:
            return
        reason = exc.strerror or str(exc)
        code = f" ({exc.errno})" if exc.errno else ""
        hint = "free some space, then rerun to continue" if exc.errno in (
            errno.ENOSPC, errno.EDQUOT) else "rerun to continue"
        raise JournalWriteError(f"cannot write the journal {self.path}: {reason}{code}; "
                                f"{self.n_lines} samples kept, {hint}")

    def discard(self) -> None:
        """Delete the journal once its rows are safely in Parquet."""
        self.path.unlink(missing_ok=True)
