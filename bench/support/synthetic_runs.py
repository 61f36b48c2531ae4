"""Synthetic runs in nel's real on-disk format (shard Parquet of `RESULT_SCHEMA` committed
through `ResultStore.write_shard`), for the side-by-side bench and its tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from nel_resources.storage.arrow import pa
from nel_resources.storage.schema import RESULT_SCHEMA
from nel_resources.storage.store import ResultStore


def write_run(root: Path, bench: str, model: str, rewards: np.ndarray, *, shards: int = 4,
              categories: Sequence[str] | None = None, responses: Sequence[str] | None = None,
              prompts: Sequence[str] | None = None, failed: np.ndarray | None = None) -> None:
    """Store one model's results on `bench`: `rewards[i, r]` is item i's repeat r.

    Args:
        root: The output dir.
        bench: Benchmark (folder and `benchmark` column).
        model: Model key.
        rewards: Rewards, shape (items,) or (items, repeats).
        shards: Items are split round-robin into this many shards.
        categories: Category per item (default: 8 categories `cat0`..`cat7`).
        responses: Response text per item (all repeats; default: a ~300-character text).
        prompts: Prompt per item (default: a ~600-character text).
        failed: Optional bool mask like `rewards`: those samples are failed requests
            (null reward, an error).
    """
    rw = np.asarray(rewards, dtype=np.float64)
    if rw.ndim == 1:
        rw = rw[:, None]
    n, k = rw.shape
    fail = np.zeros_like(rw, dtype=bool) if failed is None else np.asarray(failed, dtype=bool).reshape(n, k)
    cats = list(categories) if categories is not None else [f"cat{i % 8}" for i in range(n)]
    store = ResultStore(root)
    for s in range(shards):
        idx = np.arange(s, n, shards)
        items = np.repeat(idx, k)
        reps = np.tile(np.arange(k), len(idx))
        flat_r = rw[idx].reshape(-1)
        flat_f = fail[idx].reshape(-1)
        m = len(items)
        resp = [responses[i] if responses is not None else
                f"Let me work through problem {i} step by step. " * 6 + f"The answer is {i % 97}."
                for i in items]
        prm = [prompts[i] if prompts is not None else
               f"Question {i}: " + "Solve the following problem carefully and show your work. " * 10
               for i in items]
        cols = {
            "run_id": ["synthetic"] * m, "benchmark": [bench] * m, "model": [model] * m,
            "model_id": [model] * m, "shard": [s] * m, "problem_idx": items.tolist(),
            "repeat": reps.tolist(), "sample_id": [f"{i}:{r}" for i, r in zip(items, reps, strict=True)],
            "category": [cats[i] for i in items], "prompt": prm, "expected": [str(i % 97) for i in items],
            "response": resp, "extracted": [str(i % 97) if v > 0 else str(i % 97 + 1) for i, v in zip(items, flat_r, strict=True)],
            "method": ["last_number"] * m,
            "reward": [None if f else float(v) for v, f in zip(flat_r, flat_f, strict=True)],
            "error": ["HTTP 500" if f else None for f in flat_f],
        }
        full = {name: cols.get(name, [None] * m) for name in RESULT_SCHEMA.names}
        table = pa.Table.from_pydict(full, schema=RESULT_SCHEMA)
        store.write_shard(bench, model, s, table, {"synthetic": True, "shard": s})
