"""Remember which large export files were already checked whole, by their stat.

Every `nel eval run` checks every artifact (`artifacts.jsonl_problem`), and the JSONL exports
grow with the run (40 MB at 10,552 GSM8K samples): reading them all made up a tenth of an
unchanged rerun. A file whose size, mtime and inode are what they were when it last passed
the same check has not been touched since (exports are renamed into place whole, so a
rewrite gives a new inode), and is not read again. Anything else (a torn, truncated, edited
or replaced file, or a different expected line count) is checked in full.

The record is a small JSON file the caller places next to the bundle; losing it, or failing
to write it, only costs the next run a full check.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["RECORD_NAME", "VerifiedFiles", "remember_exports"]

# Next to the bundle (never among the exports, whose directory layout NeMo Evaluator fixes).
RECORD_NAME = ".exports-verified.json"


class VerifiedFiles:
    """The files of one directory that passed a check, keyed by name and stat."""

    def __init__(self, record: Path) -> None:
        self.record = record
        try:
            loaded = json.loads(record.read_bytes())
        except (OSError, ValueError):
            loaded = {}
        self._seen: dict[str, list[int]] = loaded if isinstance(loaded, dict) else {}
        self._changed = False

    def check(self, path: Path, expect: int, problem: Callable[[], str | None]) -> str | None:
        """`problem()` (None when `path` is fine), skipped when `path` passed it before with
        the same `expect` and is unchanged since."""
        try:
            st = path.stat()
        except OSError:
            return problem()  # missing or unreadable: the check says which
        stamp = [st.st_size, st.st_mtime_ns, st.st_ino, expect]
        if self._seen.get(path.name) == stamp:
            return None
        why = problem()
        if why is None:
            self._seen[path.name] = stamp
        else:
            self._seen.pop(path.name, None)
        self._changed = True
        return why

    def remember(self, path: Path, expect: int) -> None:
        """Record `path` as passing the check for `expect` without reading it: for a file
        the caller has just written whole (`expect` lines) and renamed into place, so the
        first rerun after a run does not read back what the run wrote (1.3 GB of JSON
        lines at 1,000,000 samples)."""
        try:
            st = path.stat()
        except OSError:
            return  # not there after all: the next check reports it
        self._seen[path.name] = [st.st_size, st.st_mtime_ns, st.st_ino, expect]
        self._changed = True

    def save(self) -> None:
        """Write the record (atomically) when a check changed it; errors are ignored."""
        if not self._changed:
            return
        tmp = self.record.with_name(f".{self.record.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(self._seen))
            os.replace(tmp, self.record)
        except OSError:  # a full or read-only disk: the next run checks in full
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)


def remember_exports(store: Any, bench: str, model: str, paths: dict[str, Path], n_written: int) -> None:
    """Record the JSONL exports of (bench, model) just written (`paths`, a line per stored
    row, `n_written` rows) as checked, in the record `artifact_problems` reads, for the line
    count it expects: the committed shards' rows, when that is the number written."""
    expect = sum(int(r.get("n_rows") or 0) for r in store.shard_records(bench, model).values())
    if expect != n_written:
        return  # the records and the rows disagree: the next run checks the files whole
    verified = VerifiedFiles(store.bundle_dir(bench, model) / RECORD_NAME)
    for key in ("results", "trajectories"):
        if key in paths:
            verified.remember(paths[key], expect)
    verified.save()
