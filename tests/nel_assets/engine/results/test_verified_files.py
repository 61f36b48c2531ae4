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


def test_the_exports_a_bundle_build_wrote_are_not_read_back_by_the_next_check(
        tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # The first run after a build used to read both JSONL exports whole (1.3 GB at 1,000,000
    # samples) to count their lines; the build wrote them, so it records them as checked.
    import pyarrow as pa

    from nel_assets.engine.evaluation import evaluate as ev
    from nel_assets.engine.results import artifacts
    from nel_resources.storage.schema import RESULT_SCHEMA
    from nel_resources.storage.store import ResultStore

    store = ResultStore(tmp_path)
    n = 40
    cols = {f.name: pa.nulls(n, f.type) for f in RESULT_SCHEMA}
    cols.update(run_id=pa.array(["r"] * n), model_id=pa.array(["m"] * n), shard=pa.array([0] * n, pa.int32()),
                problem_idx=pa.array([i // 4 for i in range(n)], pa.int64()),
                repeat=pa.array([i % 4 for i in range(n)], pa.int32()),
                sample_id=pa.array([f"{i // 4}:{i % 4}" for i in range(n)]),
                response=pa.array(["#### 1"] * n), reward=pa.array([float(i % 2) for i in range(n)]),
                timestamp=pa.array([1.7e9 + i for i in range(n)]))
    store.write_shard("b", "m", 0, pa.table([cols[f.name] for f in RESULT_SCHEMA], schema=RESULT_SCHEMA),
                      {"fingerprint": "f", "n_failed": 0, "data_version": "d", "n_rows": n})
    _, paths = ev.build_model_bundle(None, store, "b", "m")

    read: list[Path] = []
    real = artifacts.jsonl_problem
    monkeypatch.setattr(artifacts, "jsonl_problem", lambda p, k: read.append(p) or real(p, k))
    assert ev.artifact_problems(store, "b", "m") == []
    assert read == []  # neither export was read back
    # and a file changed since is still read (and its damage found)
    with open(paths["results"], "r+b") as fh:
        fh.truncate(10)
    assert any("results.jsonl" in p for p in ev.artifact_problems(store, "b", "m"))
    assert read == [paths["results"]]
