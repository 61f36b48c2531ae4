"""Stores written before the agentic columns (`turns`, `tool_calls`, `steps`) still read:
alone, and next to a shard that has them (in the store and in the DuckDB views)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from nel_resources.storage.schema import rows_to_table
from nel_resources.storage.store import ResultStore
from nel_resources.storage.views import connect


def row(i: int, **extra: object) -> dict[str, object]:
    return {"benchmark": "b", "model": "m", "shard": 0, "problem_idx": i, "repeat": 0,
            "sample_id": f"{i}:0", "reward": 1.0, **extra}


def test_a_store_without_the_agentic_columns_reads_beside_one_with_them(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    old = rows_to_table([row(0)]).drop_columns(["turns", "tool_calls", "steps"])
    store.write_shard("b", "m", 0, old, {"fingerprint": "x"})
    alone = store.read_shards("b", "m").to_pylist()
    assert alone[0]["reward"] == 1.0 and "steps" not in alone[0]
    new = rows_to_table([row(1, turns=2, tool_calls=1, steps='[{"source": "agent"}]')])
    assert new.schema.field("steps").type == pa.string()
    store.write_shard("b", "m", 1, new, {"fingerprint": "y"})
    both = store.read_shards("b", "m").to_pylist()
    assert [(r["sample_id"], r["turns"], r["steps"]) for r in both] == [
        ("0:0", None, None), ("1:0", 2, '[{"source": "agent"}]')]
    con = connect(tmp_path)
    assert con.execute("SELECT sample_id, tool_calls FROM results ORDER BY sample_id").fetchall() == [
        ("0:0", None), ("1:0", 1)]
