"""The cheap artifact checks: each names what is wrong, and passes only on a usable file."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from nel_assets.engine.results.artifacts import (
    json_problem,
    jsonl_problem,
    parquet_problem,
    text_problem,
)


def test_json_problem(tmp_path: Path) -> None:
    p = tmp_path / "a.json"
    assert json_problem(p) == "missing"
    p.write_text('{"metrics": {"score": 0.5}, "x": [1, 2')
    assert json_problem(p) == "torn or not JSON"
    p.write_text('{"x": 1}')
    assert json_problem(p) is None
    assert json_problem(p, require=("metrics",)) == "lacks metrics"
    p.write_text("[1]")
    assert json_problem(p, require=("metrics",)) == "not a JSON object"


def test_jsonl_problem_counts_lines_and_sees_a_torn_tail(tmp_path: Path) -> None:
    p = tmp_path / "r.jsonl"
    assert jsonl_problem(p, 3) == "missing"
    good = b'{"a": 1}\n{"a": 2}\n{"a": 3}\n'
    p.write_bytes(good)
    assert jsonl_problem(p, 3) is None
    assert jsonl_problem(p, 4) == "3 lines, expected 4"
    p.write_bytes(good[:-4])
    assert jsonl_problem(p, 3) == "torn (last line incomplete)"
    p.write_bytes(good[:-5] + b"\n")  # a newline after a cut line: still torn
    assert jsonl_problem(p, 3) == "torn (last line is not JSON)"
    p.write_bytes(b"")
    assert jsonl_problem(p, 0) is None
    # bigger than one read chunk: the count spans chunks
    big = b"".join(b'{"i": %d, "pad": "%s"}\n' % (i, b"y" * 200) for i in range(20_000))
    p.write_bytes(big)
    assert jsonl_problem(p, 20_000) is None


def test_parquet_and_text_problems(tmp_path: Path) -> None:
    p = tmp_path / "b.parquet"
    assert parquet_problem(p) == "missing"
    pq.write_table(pa.table({"x": [1, 2]}), p)
    assert parquet_problem(p) is None
    p.write_bytes(p.read_bytes()[:-10])
    assert parquet_problem(p).startswith("torn")
    t = tmp_path / "report.md"
    assert text_problem(t) == "missing"
    t.write_text("")
    assert text_problem(t) == "empty"
    t.write_text("# report\n")
    assert text_problem(t) is None
