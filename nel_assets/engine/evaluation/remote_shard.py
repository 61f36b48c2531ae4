"""One (benchmark, model, shard) partition evaluated away from the runner: in a container of
nel's image (`cluster.type: docker`) or a Ray task (`cluster.type: ray`).

The worker reads the run's effective config (`<out>/nel-config.yaml`, written by the runner),
evaluates its one shard with the same engine call as a local run (`evaluate_shard`), commits
it to the shared Parquet store and leaves `_launch.json` beside it: what it did and where.
The runner then records the partition in Dagster from that file (`launched_outcome`), so a
launched shard has the same Dagster record as a local one, without a second evaluation.

    NEL_SHARD_IDX=1 NEL_TOTAL_SHARDS=2 python -m nel_assets.engine.evaluation.remote_shard \
        --config <out>/nel-config.yaml --benchmark gsm8k --model m1 [--base-url URL]

No Dagster here.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.errors import NelError
from nel_resources.launchers.partitions import OUTCOME_PREFIX, PartitionJob
from nel_resources.storage.store import ResultStore, write_json_atomic

LAUNCH_FILE = "_launch.json"
#: Run tag of a shard job whose partition a launched worker already computed: the shard
#: asset then records the worker's result instead of evaluating again.
LAUNCHED_TAG = "nel/launched_by"
#: The last stdout line of the worker starts with this, then the outcome as JSON.


@dataclass(frozen=True)
class LaunchedShard:
    """What a launched shard did (the content of `_launch.json`)."""

    benchmark: str
    model: str
    shard: int
    total: int
    fingerprint: str
    data_version: str
    n_rows: int
    requests_sent: int
    reused_from_journal: int
    mean_reward: float | None
    n_errors: int
    elapsed_s: float
    where: str

    def to_dict(self) -> dict[str, Any]:
        """The JSON document."""
        return asdict(self)


def run_partition(config_path: str, benchmark: str, model: str, shard: int, total: int,
                  base_url: str | None = None, where: str = "") -> dict[str, Any]:
    """Evaluate one partition and commit it to the store; returns `_launch.json`'s content.

    Args:
        config_path: the run's effective config (absolute output dir inside).
        benchmark, model, shard: the partition.
        total: the shard count the runner planned with (checked against the config's).
        base_url: the model endpoint when the runner launched the service itself.
        where: a label for the record (container or Ray task); host and pid are added.

    Raises:
        NelError: the config does not hold this partition, or the shard counts differ.
    """
    from nel_assets.engine.evaluation.evaluate import evaluate_shard
    from nel_resources.run_settings import load_saved_specs

    resolved = load_saved_specs(config_path)
    spec = next((b for b in resolved.benchmarks if b.name == benchmark), None)
    run = spec.run_for(model) if spec is not None else None
    if spec is None or run is None:
        raise NelError(f"{config_path} has no partition {benchmark}/{model}")
    if spec.shards != total:
        raise NelError(f"{benchmark} has {spec.shards} shards in {config_path}, the runner planned {total}")
    store = ResultStore(resolved.output_dir)
    out = evaluate_shard(run, store, shard, base_url=base_url or None)
    record = store.shard_fingerprint(benchmark, model, shard) or {}
    doc = LaunchedShard(benchmark, model, shard, total, str(record.get("fingerprint", "")),
                        out.data_version, out.n_rows, out.requests_sent, out.reused_from_journal,
                        out.mean_reward, out.n_errors, round(out.elapsed_s, 3),
                        f"{where or 'worker'} on {socket.gethostname()} (pid {os.getpid()})").to_dict()
    write_json_atomic(store.shard_dir(benchmark, model, shard) / LAUNCH_FILE, doc)
    return doc


def run_job(job: PartitionJob) -> dict[str, Any]:
    """A launcher's job, run in this process (what a Ray task executes)."""
    import ray  # only ever called inside a Ray worker

    ctx = ray.get_runtime_context()
    return run_partition(job.config_path, job.benchmark, job.model, job.shard, job.total,
                         job.base_url, f"ray task {ctx.get_task_id()} node {ctx.get_node_id()[:12]}")


def launched_outcome(store: ResultStore, benchmark: str, model: str, shard: int) -> dict[str, Any]:
    """The `_launch.json` of a committed shard, checked against the shard's commit marker.

    Raises:
        NelError: no launched result, or it does not describe the rows in the store.
    """
    record = store.shard_fingerprint(benchmark, model, shard)
    path = store.shard_dir(benchmark, model, shard) / LAUNCH_FILE
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        doc = None
    if record is None or not isinstance(doc, dict):
        raise NelError(f"{benchmark} {model} shard {shard}: the launched worker left no committed result")
    if doc.get("data_version") != record.get("data_version"):
        raise NelError(f"{benchmark} {model} shard {shard}: {path.name} does not match the stored rows")
    return doc


def main(argv: list[str] | None = None) -> int:
    """The worker's command line (what a container of nel's image runs)."""
    from nel_assets.engine.evaluation.sharding import shard_from_env

    ap = argparse.ArgumentParser(prog="python -m nel_assets.engine.evaluation.remote_shard")
    ap.add_argument("--config", required=True)
    ap.add_argument("--benchmark", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--base-url", default=None)
    ap.add_argument("--where", default="")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        shard = shard_from_env()
        if shard is None:
            raise NelError("set NEL_SHARD_IDX and NEL_TOTAL_SHARDS: which shard this worker runs")
        doc = run_partition(args.config, args.benchmark, args.model, shard[0], shard[1],
                            args.base_url, args.where)
    except NelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # the traceback for the run log, then the one line reported
        import traceback

        traceback.print_exc()
        line = (str(exc).strip().splitlines() or [""])[0][:300]
        print(f"error: {type(exc).__name__}: {line}", file=sys.stderr)
        return 1
    print(f"{OUTCOME_PREFIX}{json.dumps(doc)}", flush=True)
    print(f"done in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
