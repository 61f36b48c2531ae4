"""The runner's use of a `partitions` launcher (`cluster.type` docker, ray, or any type whose
Launcher says `runs = "partitions"`; nel_resources.launchers.registry): the stale (model,
shard) partitions of a benchmark run there before the runner records them in Dagster.

The launched workers evaluate and commit their shards to the shared Parquet store; the
runner then materializes each partition with the tag LAUNCHED_TAG, and the shard asset
reads the worker's `_launch.json` instead of evaluating again. The runner asks the Launcher
interface only: it imports nothing of dagster_project.cluster_launch (which calls the runner
back for a `submits` launcher), so the two do not import each other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nel_resources.specs import ResolvedConfig


def launches(resolved: ResolvedConfig, shard_only: tuple[int, int] | None) -> bool:
    """Whether this run sends its shards to a cluster (never inside a shard process)."""
    from nel_resources.launchers.registry import get_launcher

    return shard_only is None and get_launcher(resolved.config.cluster.type).runs == "partitions"


def preflight(resolved: ResolvedConfig) -> None:
    """Before anything is written: the launcher's own checks (NelError, one line, if not)."""
    from nel_resources.launchers.registry import get_launcher

    get_launcher(resolved.config.cluster.type).preflight(resolved)


def _read_only_paths(resolved: ResolvedConfig) -> list[Path]:
    """What the workers read besides the output: the data directory and BYOB modules."""
    from benchmarks.datasets import cache_root, data_root

    paths: list[Path] = [cache_root()]  # datasets fetched once are read from the cache
    if (root := data_root()) is not None:
        paths.append(root)
    for b in resolved.config.benchmarks:
        if b.module:
            m = Path(b.module).expanduser()
            paths.append(m.parent if m.is_file() else m)
    return paths


def launch_partitions(resolved: ResolvedConfig, out: Path, todo: list[Any],
                      resources: dict[str, Any], bench: Any) -> dict[tuple[str, int], Any]:
    """Evaluate `todo` (the benchmark's stale shard tasks) on the cluster; its
    `PartitionResult`s by (model, shard)."""
    from nel_assets.engine.remote_shard import run_job
    from nel_resources.launchers.base import LaunchContext
    from nel_resources.launchers.partitions import PartitionJob
    from nel_resources.launchers.registry import get_launcher

    config_path = str(out / "nel-config.yaml")
    jobs = []
    for t in todo:
        run = bench.run_for(t.model)
        svc = resources.get(run.service.resource_key) if run is not None else None
        jobs.append(PartitionJob(bench.name, t.model, t.shard, t.total, config_path,
                                 getattr(svc, "url", None) or None))
    cluster = resolved.config.cluster
    ctx = LaunchContext(cluster, out, _read_only_paths(resolved), run_job)
    results = get_launcher(cluster.type).run(jobs, ctx)
    return {(r.job.model, r.job.shard): r for r in results}
