"""An export that passed its check and is unchanged since is not read again; any change
(truncated, appended, replaced, another expected count) is checked in full (issue 32)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from nel_assets.engine.results.artifacts import jsonl_problem
from nel_assets.engine.results.verified_files import VerifiedFiles


def _counting(path: Path, n: int, calls: list[Path]) -> Callable[[], str | None]:
    def problem() -> str | None:
        calls.append(path)
        return jsonl_problem(path, n)
    return problem


def test_unchanged_file_is_not_read_again_and_any_change_is(tmp_path: Path) -> None:
    f = tmp_path / "results.jsonl"
    f.write_text('{"a": 1}\n{"a": 2}\n')
    record = tmp_path / ".verified.json"
    calls: list[Path] = []

    v = VerifiedFiles(record)
    assert v.check(f, 2, _counting(f, 2, calls)) is None
    v.save()
    assert calls == [f]
    calls.clear()
    assert VerifiedFiles(record).check(f, 2, _counting(f, 2, calls)) is None
    assert calls == []  # unchanged since it passed: not read

    # another expected count: checked, and wrong
    assert VerifiedFiles(record).check(f, 3, _counting(f, 3, calls)) == "2 lines, expected 3"
    # torn in place (same inode, new size)
    with open(f, "r+b") as fh:
        fh.truncate(12)
    v = VerifiedFiles(record)
    assert v.check(f, 2, _counting(f, 2, calls)) == "torn (last line incomplete)"
    v.save()
    # a failed check is not remembered: restored, it passes again only by being read
    f.write_text('{"a": 1}\n{"a": 2}\n')
    calls.clear()
    assert VerifiedFiles(record).check(f, 2, _counting(f, 2, calls)) is None
    assert calls == [f]


def test_same_size_rewrite_is_checked(tmp_path: Path) -> None:
    f = tmp_path / "results.jsonl"
    f.write_text('{"a": 1}\n')
    record = tmp_path / ".verified.json"
    v = VerifiedFiles(record)
    assert v.check(f, 1, lambda: jsonl_problem(f, 1)) is None
    v.save()
    st = f.stat()
    f.write_text('{"a": 1}x')  # same size, torn; mtime moved on
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert VerifiedFiles(record).check(f, 1, lambda: jsonl_problem(f, 1)) == "torn (last line incomplete)"


def test_missing_file_and_unwritable_record(tmp_path: Path) -> None:
    f = tmp_path / "results.jsonl"
    v = VerifiedFiles(tmp_path / "no-such-dir" / ".verified.json")
    assert v.check(f, 1, lambda: jsonl_problem(f, 1)) == "missing"
    f.write_text('{"a": 1}\n')
    assert v.check(f, 1, lambda: jsonl_problem(f, 1)) is None
    v.save()  # the record's directory does not exist: no error, the next run checks in full
