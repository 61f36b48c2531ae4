"""nel's `messages` key of trajectories.jsonl (the conversation `trajectory` already holds,
~21% of the file, which 0.3.0 neither writes nor reads) is written only when asked:
`output.trajectory_messages: true`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nel_assets.engine.evaluation.evaluate import build_model_bundle
from nel_assets.engine.nemo import nemo_format as nf
from nel_assets.engine.nemo.exports import write_exports
from nel_assets.engine.results.bundle import build_bundle
from nel_resources.config import load_config
from nel_resources.storage.schema import rows_to_table
from nel_resources.storage.store import ResultStore


def _rows() -> list[dict]:
    out = []
    for i in range(40):
        failed = i % 10 == 9
        agent = i % 10 == 5
        out.append({"run_id": "r", "benchmark": "b", "model": "m", "model_id": "mid", "shard": 0,
                    "problem_idx": i // 2, "repeat": i % 2, "sample_id": f"{i // 2}:{i % 2}",
                    "prompt": f"q{i}?", "system": "Be brief." if i % 3 == 0 else None,
                    "messages": json.dumps([{"role": "user", "content": f"q{i}?"}]), "expected": "4",
                    "response": None if failed else f"#### {i}", "reward": None if failed else float(i % 2),
                    "extracted": str(i), "method": "m", "details": '{"method": "m"}', "metadata": "{}",
                    "finish_reason": "stop", "prompt_tokens": 3, "completion_tokens": 2, "model_ms": 1.0,
                    "total_ms": 2.0, "attempts": 1, "error": "boom" if failed else None,
                    "failure_category": "error" if failed else None, "timestamp": 1.7e9 + i,
                    "turns": 2 if agent else None, "tool_calls": 1 if agent else None,
                    "steps": '[{"source": "agent", "message": "m"}]' if agent else None})
    return out


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.mark.parametrize("asked", [False, True])
def test_messages_only_when_asked(tmp_path: Path, asked: bool) -> None:
    rows = _rows()
    table = rows_to_table(rows)
    bundle = build_bundle(table, benchmark="b", model="m")
    nel_config = {"output": {"trajectory_messages": True}} if asked else {}
    write_exports(tmp_path, table, bundle, config={"benchmark": "b", "repeats": 2}, nel_config=nel_config)
    traj = _lines(tmp_path / "trajectories.jsonl")
    assert len(traj) == len(rows)
    if not asked:
        assert all("messages" not in t for t in traj)
    else:  # the request's messages and the answer turn, as before
        assert [t["messages"] for t in traj] == [json.loads(nf._messages(r)) for r in table.to_pylist()]
    # the conversation is there either way: the ATIF trajectory of every answered step
    for t, r in zip(traj, rows, strict=True):
        if r["error"] is None and not r["steps"]:
            assert t["trajectory"][0]["steps"][-1] == {**t["trajectory"][0]["steps"][-1],
                                                       "source": "agent", "message": r["response"]}
    # the other keys, in the same order, whether or not `messages` is among them
    assert [k for k in traj[0] if k != "messages"] == [k for k in nf.trajectory_row(
        table.to_pylist()[0], messages=True) if k != "messages"]


def test_the_config_key_reaches_the_store_built_exports(tmp_path: Path) -> None:
    cfg = load_config(data={"services": {"m": {"type": "api", "url": "http://127.0.0.1:9/v1", "model": "m"}},
                            "benchmarks": [{"name": "gsm8k"}],
                            "output": {"dir": str(tmp_path), "trajectory_messages": True}})
    assert cfg.output.trajectory_messages is True
    store = ResultStore(tmp_path / "store")
    store.write_shard("b", "m", 0, rows_to_table(_rows()), {"fingerprint": "f", "data_version": "d"})
    with_key = json.dumps({"output": {"trajectory_messages": True}})
    _, paths = build_model_bundle(None, store, "b", "m", config_json=with_key)
    assert all("messages" in t for t in _lines(paths["trajectories"]))
    big = paths["trajectories"].stat().st_size
    _, paths = build_model_bundle(None, store, "b", "m", config_json="{}")
    assert all("messages" not in t for t in _lines(paths["trajectories"]))
    assert paths["trajectories"].stat().st_size < big
