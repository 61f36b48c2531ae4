"""Dataset loading: local formats, NEL_DATA_DIR layout, hf:// offline, real GSM8K/MMLU."""

from __future__ import annotations

import asyncio
import csv
import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from benchmarks import get_benchmark
from benchmarks.datasets import (
    content_hash,
    load_records,
    parse_hf_uri,
    resolve_file,
    set_data_dir,
)
from benchmarks.errors import DataMissingError, NelError

ROWS = [{"q": "1+1", "a": "2"}, {"q": "2+2", "a": "4"}]


def test_local_formats_roundtrip(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS) + "\n")
    with gzip.open(tmp_path / "d.jsonl.gz", "wt") as f:
        f.write("".join(json.dumps(r) + "\n" for r in ROWS))
    (tmp_path / "d.json").write_text(json.dumps({"data": ROWS}))
    with open(tmp_path / "d.csv", "w", newline="") as f:
        w = csv.DictWriter(f, ["q", "a"])
        w.writeheader()
        w.writerows(ROWS)
    with open(tmp_path / "d.tsv", "w", newline="") as f:
        w = csv.DictWriter(f, ["q", "a"], delimiter="\t")
        w.writeheader()
        w.writerows(ROWS)
    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "d.parquet")
    for name in ("d.jsonl", "d.jsonl.gz", "d.json", "d.csv", "d.tsv", "d.parquet"):
        assert load_records(tmp_path / name) == ROWS, name
    assert content_hash(ROWS) == content_hash([dict(r) for r in ROWS])


def test_bad_files_are_clear_errors(tmp_path: Path) -> None:
    (tmp_path / "bad.jsonl").write_text('{"q": 1}\n{"q": \n')
    with pytest.raises(NelError, match=r"bad.jsonl:2: invalid JSON"):
        load_records(tmp_path / "bad.jsonl")
    with pytest.raises(DataMissingError, match="not found"):
        load_records(tmp_path / "missing.jsonl")
    (tmp_path / "x.txt").write_text("hi")
    with pytest.raises(NelError, match="unsupported dataset format"):
        load_records(tmp_path / "x.txt")


def test_hf_uri_parsing_and_offline_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert parse_hf_uri("hf://openai/gsm8k?split=test&config=main") == (
        "openai/gsm8k", {"split": "test", "config": "main"})
    with pytest.raises(NelError, match="expected hf://ORG/NAME"):
        parse_hf_uri("hf://gsm8k")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(DataMissingError, match="cannot load hf://openai/gsm8k"):
        load_records("hf://openai/gsm8k?split=test&config=main")


def test_builtin_missing_data_says_which_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("NEL_CACHE_DIR", str(tmp_path / "cache"))
    set_data_dir(tmp_path / "empty")
    try:
        with pytest.raises(DataMissingError) as ei:
            get_benchmark("gsm8k")
        msg = str(ei.value)
        assert "gsm8k/test.jsonl" in msg and str(tmp_path / "empty") in msg and "\n" not in msg
        with pytest.raises(DataMissingError, match="mmlu"):
            resolve_file("mmlu", "test/")
    finally:
        set_data_dir(None)


def test_real_gsm8k_and_mmlu(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEL_DATA_DIR", str(data_dir))
    g = get_benchmark("gsm8k", prompt_set="nel")  # nel's prompts (NeMo's: test_prompt_sets.py)
    assert len(g) == 1319
    s = asyncio.run(g.seed(0))
    assert s.expected_answer == "18" and "Janet" in s.prompt and "####" in s.prompt
    gc = get_benchmark("gsm8k", protocol="completions", num_fewshot=4, prompt_set="nel")
    sc = asyncio.run(gc.seed(0))
    assert sc.prompt.count("Question:") == 5 and sc.prompt.endswith("Answer:")
    m = get_benchmark("mmlu")
    assert len(m) == 14042
    cats = {asyncio.run(m.seed(i)).metadata["category"] for i in range(0, 14042, 97)}
    assert len(cats) > 40
    mc = get_benchmark("mmlu", protocol="completions", num_fewshot=5, prompt_set="nel")
    p = asyncio.run(mc.seed(0)).prompt
    assert p.startswith("The following are multiple choice questions (with answers) about abstract algebra.")
    assert p.count("Answer:") == 6 and p.endswith("Answer:")
    chat5 = asyncio.run(get_benchmark("mmlu", num_fewshot=5, prompt_set="nel").seed(0))
    assert chat5.messages is not None and len(chat5.messages) == 11
    assert g.data_fingerprint() and g.data_fingerprint() != m.data_fingerprint()


def test_fixture_layout_under_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a tiny data root in the layout of the original files
    (tmp_path / "gsm8k").mkdir()
    rows = [{"question": "What is 2+3?", "answer": "2+3=5\n#### 5"},
            {"question": "Half of 1,000?", "answer": "#### 500"}]
    (tmp_path / "gsm8k" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "mmlu" / "test").mkdir(parents=True)
    with open(tmp_path / "mmlu" / "test" / "astronomy_test.csv", "w", newline="") as f:
        csv.writer(f).writerow(["Closest star?", "Sirius", "Sun", "Vega", "Rigel", "B"])
    monkeypatch.setenv("NEL_DATA_DIR", str(tmp_path))
    g = get_benchmark("gsm8k")
    assert [asyncio.run(g.seed(i)).expected_answer for i in range(2)] == ["5", "500"]
    m = get_benchmark("mmlu")
    s = asyncio.run(m.seed(0))
    assert len(m) == 1 and s.expected_answer == "B" and "B) Sun" in s.prompt
    assert s.metadata["supercategory"] == "stem"
