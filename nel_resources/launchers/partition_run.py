"""The runner's way into a `partitions` launcher (`runs = "partitions"`: docker, ray,
subprocess, ...): the stale (model, shard) partitions of one benchmark become
`PartitionJob`s, run where the launcher runs them, and come back as one `PartitionResult`
each, by (model, shard). Their states go to `<out>/launch/states.json` as they change
(`Launcher.states` reads it back).

The shard worker (`work`) is passed in by the runner: this package imports no engine. No
Dagster here; recording the partitions in Dagster is the runner's part (dagster_project).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from nel_resources.launchers.base import LaunchContext
from nel_resources.launchers.partitions import PartitionJob, PartitionResult
from nel_resources.launchers.registry import get_launcher
from nel_resources.launchers.states import StateFile

__all__ = ["launch_partitions", "launches", "preflight"]


def launches(resolved: Any, shard_only: tuple[int, int] | None) -> bool:
    """Whether this run sends its shards to a cluster (never inside a shard process)."""
    return shard_only is None and get_launcher(resolved.cluster.type).runs == "partitions"


def preflight(resolved: Any) -> None:
    """Before anything is written: the launcher's own checks (NelError, one line, if not)."""
    get_launcher(resolved.cluster.type).preflight(resolved)


def read_only_paths(resolved: Any) -> list[Path]:
    """What the workers read besides the output: the data directory and BYOB modules."""
    from benchmarks.datasets import cache_root, data_root

    paths: list[Path] = [cache_root()]  # datasets fetched once are read from the cache
    if (root := data_root()) is not None:
        paths.append(root)
    for module in resolved.module_paths:
        m = Path(module).expanduser()
        paths.append(m.parent if m.is_file() else m)
    return paths


def launch_partitions(resolved: Any, out: Path, todo: list[Any], resources: Mapping[str, Any],
                      bench: Any, work: Callable[[PartitionJob], dict[str, Any]] | None = None,
                      ) -> dict[tuple[str, int], PartitionResult]:
    """Evaluate `todo` (the benchmark's stale shard tasks: `.model`, `.shard`, `.total`) on
    the run's cluster; results by (model, shard).

    Args:
        resources: the run's Dagster resources by key (a launched service's URL is read
            from its resource).
        work: the shard worker, for launchers that run it in a Python process of theirs (Ray).
    """
    config_path = str(out / "nel-config.yaml")
    jobs = []
    for t in todo:
        run = bench.run_for(t.model)
        svc = resources.get(run.service.resource_key) if run is not None else None
        jobs.append(PartitionJob(bench.name, t.model, t.shard, t.total, config_path,
                                 getattr(svc, "url", None) or None))
    cluster = resolved.cluster
    states = StateFile(out, cluster.type)
    for job in jobs:
        states.report(job, "PENDING")
    ctx = LaunchContext(cluster, out, read_only_paths(resolved), work, report=states.report)
    results = get_launcher(cluster.type).run(jobs, ctx)
    for r in results:
        states.report(r.job, "COMPLETED" if r.ok else "FAILED", "" if r.ok else str(r.error))
    return {(r.job.model, r.job.shard): r for r in results}
