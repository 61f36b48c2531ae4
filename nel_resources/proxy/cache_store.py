"""The response cache on disk: one SQLite file (WAL) under `cache_dir`, shared across runs.

Why SQLite: an entry is written in one transaction, so a crash mid-write leaves the old
state (no torn entry), and several processes can read and write the same cache at once.
Reads are a primary-key lookup on the caller's thread (tens of microseconds); writes go to
one writer thread that commits them in groups, so no commit ever runs on the event loop.
"""

from __future__ import annotations

import queue
import sqlite3
import threading
import time
from pathlib import Path

_SCHEMA = ("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, body BLOB NOT NULL, "
           "created_at REAL NOT NULL)")


class CacheStore:
    """Key -> response body bytes, on disk."""

    def __init__(self, cache_dir: Path) -> None:
        cache_dir.mkdir(parents=True, exist_ok=True)
        self.path = cache_dir / "nel_responses.sqlite"
        self._local = threading.local()
        conn = self._conn()
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(_SCHEMA)
        conn.commit()
        self._queue: queue.Queue[tuple[str, bytes] | None] = queue.Queue()
        self._writer: threading.Thread | None = None
        self._error: BaseException | None = None
        # Entries queued but not yet committed: a read must see them (a second repeat of a
        # greedy request right after the first), so they are served from here meanwhile.
        self._pending: dict[str, bytes] = {}

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False)
            # NORMAL in WAL mode: a commit survives a process crash; only a power loss may
            # drop the last commits, never corrupt the file.
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA busy_timeout=30000")
            self._local.conn = conn
        return conn

    def get(self, key: str) -> bytes | None:
        """The stored body, or None."""
        pending = self._pending.get(key)
        if pending is not None:
            return pending
        row = self._conn().execute("SELECT body FROM responses WHERE key = ?", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def put(self, key: str, body: bytes) -> None:
        """Queue an entry for the writer thread."""
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_loop, name="nel-cache-writer",
                                            daemon=True)
            self._writer.start()
        self._pending[key] = body
        self._queue.put((key, body))

    def _write_loop(self) -> None:
        conn = sqlite3.connect(self.path, timeout=30.0)
        conn.execute("PRAGMA synchronous=NORMAL")
        try:
            while True:
                item = self._queue.get()
                batch = [item]
                # Group commit: whatever else is queued goes into the same transaction.
                while True:
                    try:
                        batch.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                rows = [(k, b, time.time()) for it in batch if it is not None for k, b in [it]]
                if rows:
                    try:
                        with conn:
                            conn.executemany("INSERT OR REPLACE INTO responses VALUES (?, ?, ?)", rows)
                    except sqlite3.Error as exc:  # a full disk loses cache entries, not the run
                        self._error = exc
                    for k, b, _ in rows:
                        if self._pending.get(k) is b:
                            self._pending.pop(k, None)
                if None in batch:
                    return
        finally:
            conn.close()

    def flush(self) -> None:
        """Wait until every queued entry is committed, and stop the writer."""
        if self._writer is not None:
            self._queue.put(None)
            self._writer.join()
            self._writer = None

    def close(self) -> None:
        """Flush and close this thread's connection."""
        self.flush()
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    @property
    def error(self) -> BaseException | None:
        """The last write error (a cache that could not write), if any."""
        return self._error
