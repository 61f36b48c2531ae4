"""The dataset asset's partitions: the problems of one shard, seeded and written to the store.

A partition's version is the content hash of its shard's seeds, computed exactly as the
shard fingerprints compute it (`evaluate.seed_hash`), so the dataset partition changes
exactly when nel reruns that shard because a row changed. Pure Python: no Dagster import.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from nel_assets.engine.evaluation import evaluate as ev
from nel_assets.engine.evaluation.image_parts import save_images, seed_images
from nel_resources.specs import BenchmarkSpec
from nel_resources.storage.store import ResultStore, write_json_atomic, write_parquet_atomic


@dataclass(frozen=True)
class DatasetShard:
    """One written dataset partition."""

    shard: int
    path: Path
    n_problems: int
    version: str  # == the shard's `seeds_digest` in `evaluate.plan`


async def _seed_rows(env: Any, indices: list[int],
                     image_dir: Path | None = None) -> tuple[list[dict[str, Any]], str]:
    """The shard's rows and the hash of its seeds (the same bytes `seed_hash` hashes).

    A seed's images are written once into `image_dir` (content-addressed) and its row names
    them (`images`: `nel-image:<sha256>` names), never carries their bytes."""
    h = hashlib.sha256()
    rows = []
    for i in indices:
        s = await env.seed(i)
        h.update(orjson.dumps(s.to_dict(), option=orjson.OPT_SORT_KEYS, default=str))
        row = {"problem_idx": i, "shard": None, "prompt": s.prompt, "expected": s.expected_answer,
               "system": s.system, "metadata": orjson.dumps(s.metadata, default=str).decode(),
               "category": None if s.metadata.get("category") is None else str(s.metadata["category"])}
        if s.images:
            images = seed_images(s.images)
            if image_dir is not None:
                save_images(image_dir, images)
            row["images"] = orjson.dumps([img.ref for img in images]).decode()
        rows.append(row)
    if any("images" in r for r in rows):  # one schema for the shard (Arrow reads the first row's)
        for r in rows:
            r.setdefault("images", None)
    return rows, h.hexdigest()[:16]


def write_dataset_shard(store: ResultStore, bench: BenchmarkSpec, shard: int) -> DatasetShard:
    """Seed the problems of `shard` (the benchmark's first run's selection, as the shards
    split it) and write them to the store; also record the whole selection, which a merge
    of shard outputs reads, and drop shard files a smaller shard count left behind."""
    from nel_resources.storage.arrow import pa

    first = bench.runs[0]
    env = ev.make_env(first.env)

    async def seeded() -> tuple[list[int], list[dict[str, Any]], str]:
        prep = getattr(env, "prepare", None)
        if prep is not None:
            await prep()
        all_idx = ev.problem_indices(env, first.selection)
        rows, digest = await _seed_rows(env, ev.shard_indices(all_idx, shard, bench.shards),
                                        store.images_dir(bench.name))
        return all_idx, rows, digest

    all_idx, rows, digest = asyncio.run(seeded())
    for r in rows:
        r["shard"] = shard
    table = (pa.Table.from_pylist(rows) if rows
             else pa.table({"problem_idx": pa.array([], pa.int64()), "shard": pa.array([], pa.int64())}))
    path = store.dataset_shard_path(bench.name, shard)
    write_parquet_atomic(path, table)
    write_json_atomic(store.dataset_selection_path(bench.name), {"indices": all_idx, "shards": bench.shards})
    for old in path.parent.parent.glob("shard=*"):
        if not old.name.removeprefix("shard=").isdigit() or int(old.name.removeprefix("shard=")) >= bench.shards:
            shutil.rmtree(old, ignore_errors=True)
    return DatasetShard(shard, path, len(rows), digest)
