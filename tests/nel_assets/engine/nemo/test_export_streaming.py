"""The bundle from `BUNDLE_COLUMNS` alone and the exports streamed from the store are the
same bytes as from the whole table (what `build_model_bundle` did before it streamed)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import orjson

from nel_assets.engine.nemo import nemo_bundle as nb
from nel_assets.engine.nemo.exports import _SUMMARY_COLUMNS, write_exports
from nel_assets.engine.results.bundle import BUNDLE_COLUMNS, build_bundle
from nel_resources.storage.schema import COLUMNS, rows_to_table
from nel_resources.storage.store import ResultStore


def _rows(n: int, seed: int) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    rows = []
    for i in range(n):
        fail = rnd.random() < 0.08
        agent = rnd.random() < 0.2
        rows.append({
            "run_id": "r1", "benchmark": "b", "model": "m", "model_id": "mid", "shard": 0,
            "problem_idx": i // 4, "repeat": i % 4, "sample_id": f"{i // 4}:{i % 4}",
            "category": rnd.choice([None, "a", "b"]), "cluster": rnd.choice([None, "k"]),
            "prompt": f"question {i // 4}?", "system": rnd.choice([None, "be brief"]),
            "messages": '[{"role":"user","content":"q"}]', "expected": "4",
            "response": None if fail else rnd.choice(["4", "I cannot help", ""]),
            "reasoning": rnd.choice([None, "think"]), "reward": None if fail else rnd.choice([0.0, 1.0]),
            "extracted": rnd.choice([None, "4"]), "method": "m",
            "details": None if fail else orjson.dumps({"method": rnd.choice(["a", "b"]),
                                                      "scorer:x": {"reward": 1.0}} if rnd.random() < .1
                                                     else {"method": rnd.choice(["a", "b"])}).decode(),
            "metadata": '{"k": 1}', "finish_reason": rnd.choice(["stop", "length"]),
            "prompt_tokens": 10, "completion_tokens": rnd.choice([None, 5]), "reasoning_tokens": None,
            "seed_ms": 0.1, "model_ms": rnd.random() * 100, "verify_ms": 0.2, "total_ms": 101.0,
            "attempts": rnd.choice([1, 2]), "error": "boom" if fail else None,
            "failure_category": "timeout" if fail else rnd.choice([None, "refusal"]),
            "timestamp": 1.7e9 + i, "turns": 2 if agent else None, "tool_calls": 1 if agent else None,
            "steps": '[{"source": "agent", "message": "m"}]' if agent else None,
        })
    return rows


def test_the_summary_columns_are_bundle_columns_of_the_schema() -> None:
    assert set(_SUMMARY_COLUMNS) <= set(BUNDLE_COLUMNS) <= set(COLUMNS)


def test_a_bundle_from_its_columns_equals_one_from_every_column() -> None:
    table = rows_to_table(_rows(3000, 1))
    whole = build_bundle(table, benchmark="b", model="m")
    cols = build_bundle(table.select(list(BUNDLE_COLUMNS)), benchmark="b", model="m")
    whole.pop("created_at"), cols.pop("created_at")
    assert json.dumps(whole, sort_keys=True) == json.dumps(cols, sort_keys=True)


def test_exports_streamed_from_the_store_are_the_same_files(tmp_path: Path) -> None:
    rows = _rows(2500, 2)
    store = ResultStore(tmp_path / "store")
    store.write_shard("b", "m", 0, rows_to_table(rows[:1100]), {"fingerprint": "x"})
    store.write_shard("b", "m", 1, rows_to_table(rows[1100:]), {"fingerprint": "y"})
    table = store.read_shards("b", "m")
    bundle = build_bundle(table, benchmark="b", model="m")
    bundle["created_at"] = 1.8e9
    cfg = {"benchmark": "b", "repeats": 4}
    write_exports(tmp_path / "whole", table, bundle, config=cfg)
    write_exports(tmp_path / "streamed", store.read_shards("b", "m", columns=BUNDLE_COLUMNS), bundle,
                  config=cfg, batches=store.iter_shard_batches("b", "m", batch_size=97))
    names = sorted(p.name for p in (tmp_path / "whole").iterdir())
    assert "failure_analysis.json" in names and "results.jsonl" in names
    assert names == sorted(p.name for p in (tmp_path / "streamed").iterdir())
    for n in names:
        assert (tmp_path / "whole" / n).read_bytes() == (tmp_path / "streamed" / n).read_bytes(), n
    lines = (tmp_path / "streamed" / "results.jsonl").read_bytes().splitlines()
    assert [json.loads(x)["sample_id"] for x in lines] == [r["sample_id"] for r in rows]


def test_breakdowns_skip_fields_with_too_many_values_and_fields_some_rows_lack() -> None:
    rows = [{"reward": float(i % 2), "details": orjson.dumps(
        {"answer": str(i), "kind": "ab"[i % 2], **({"rare": "x"} if i == 0 else {})}).decode()}
        for i in range(200)]
    out = nb.breakdowns(rows, max_groups=50)
    assert list(out) == ["kind"]
    assert [(g["group"], g["n"], g["mean_reward"]) for g in out["kind"]] == [("a", 100, 0.0), ("b", 100, 1.0)]
    assert list(nb.breakdowns(rows, max_groups=1)) == []


def test_a_bundle_from_columns_read_one_at_a_time_equals_one_from_the_whole_table(tmp_path: Path) -> None:
    """`build_model_bundle`'s way (ShardColumns, dictionary-encoded strings, the texts
    streamed) gives the bundle and `eval-*.json` the whole table gives, byte for byte."""
    from nel_assets.engine.results.bundle import DICTIONARY_COLUMNS, TEXT_COLUMNS

    rows = _rows(2500, 3)
    tool_step = orjson.dumps([{"source": "agent", "message": "m"}, {"observation": {"results": []}, "extra": {
        "function_name": "bash", "error": "exit code 1", "exit_code": 1, "turn": 2}}]).decode()
    for r in rows[:900]:
        if r["steps"]:
            r["steps"] = tool_step
    store = ResultStore(tmp_path / "store")
    store.write_shard("b", "m", 0, rows_to_table(rows[:900]), {"fingerprint": "x"})
    # an older shard file without the agentic columns: they read as nulls
    store.write_shard("b", "m", 1, rows_to_table(rows[900:]).drop_columns(["turns", "tool_calls", "steps"]),
                      {"fingerprint": "y"})
    table = store.read_shards("b", "m")
    cols = store.shard_columns("b", "m", columns=[c for c in BUNDLE_COLUMNS if c not in TEXT_COLUMNS],
                               dictionary=DICTIONARY_COLUMNS)
    assert cols.num_rows == table.num_rows == 2500
    whole = build_bundle(table, benchmark="b", model="m")
    lazy = build_bundle(cols, benchmark="b", model="m",
                        texts=lambda c: store.iter_shard_batches("b", "m", batch_size=101, columns=c))
    whole["created_at"] = lazy["created_at"] = 1.8e9
    assert whole["failures"]["categories"] and whole["failures"].get("tools")
    assert json.dumps(whole, sort_keys=True) == json.dumps(lazy, sort_keys=True)
    cfg = {"benchmark": "b", "repeats": 4}
    write_exports(tmp_path / "whole", table, whole, config=cfg)
    write_exports(tmp_path / "lazy", cols, lazy, config=cfg, batches=store.iter_shard_batches("b", "m"))
    for name in ("failure_analysis.json", "runtime_stats.json", "results.jsonl", "trajectories.jsonl",
                 *(p.name for p in (tmp_path / "whole").glob("eval-*.json"))):
        assert (tmp_path / "whole" / name).read_bytes() == (tmp_path / "lazy" / name).read_bytes(), name
