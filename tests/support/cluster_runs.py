"""A small sharded GSM8K run for the cluster launcher tests (docker, ray): its config, the
same run done locally, and the per-item comparison of two output directories."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow.parquet as pq
import yaml

from tests.support.cli import run_nel, summary_json

MODEL = "ref"  # the service name is the model partition
#: The columns that must match item by item between a cluster run and the local run.
ITEM_COLUMNS = ("sample_id", "problem_idx", "repeat", "shard", "prompt", "response", "expected",
                "extracted", "reward", "error")


def write_config(path: Path, url: str, out: Path, *, n: int, shards: int,
                 cluster: dict[str, Any] | None = None) -> Path:
    """`nel.yaml`: GSM8K's first `n` items on the reference server, in `shards` shards."""
    cfg: dict[str, Any] = {
        "services": {"ref": {"type": "api", "url": url, "model": MODEL}},
        "benchmarks": [{"name": "gsm8k", "max_problems": n, "shards": shards}],
        "output": {"dir": str(out)},
    }
    if cluster:
        cfg["cluster"] = cluster
    path.write_text(yaml.safe_dump(cfg))
    return path


def items(out: Path) -> list[dict[str, Any]]:
    """Every stored result row of the run, sorted, with the columns compared across runs."""
    files = sorted((out / "gsm8k" / "shard_results" / f"model={MODEL}").glob("shard=*/part-0.parquet"))
    rows = [r for f in files for r in pq.read_table(f).to_pylist()]
    keep = [c for c in ITEM_COLUMNS if rows and c in rows[0]]
    return sorted(({c: r[c] for c in keep} for r in rows), key=lambda r: (r["sample_id"], r.get("repeat")))


def local_run(tmp: Path, url: str, env: dict[str, str], *, n: int, shards: int) -> Path:
    """The reference: the same run with `cluster.type: local`; returns its output dir."""
    out = tmp / "local"
    cfg = write_config(tmp / "local.yaml", url, out, n=n, shards=shards)
    s = summary_json(run_nel("eval", "run", str(cfg), "--json", "--no-progress", env=env))
    assert s["shards_run"] == shards, s
    return out


def shard_materializations(out: Path) -> dict[str, dict[str, Any]]:
    """The latest Dagster materialization of each gsm8k shard partition of the run, by
    partition key (`model|shard`), with its metadata values."""
    inst = dg.DagsterInstance.from_config(str(out / ".dagster"))
    try:
        key = dg.AssetKey(["gsm8k", "shard_results"])
        recs = inst.fetch_materializations(key, limit=100).records
        found: dict[str, dict[str, Any]] = {}
        for r in recs:  # newest first
            m = r.asset_materialization
            if m is not None and str(m.partition) not in found:
                found[str(m.partition)] = {k: v.value for k, v in m.metadata.items()}
        return found
    finally:
        inst.dispose()
