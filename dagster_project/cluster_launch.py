"""Run a benchmark's stale (model, shard) partitions on the configured cluster (`docker` or
`ray`) before the runner records them in Dagster.

The launched workers evaluate and commit their shards to the shared Parquet store; the
runner then materializes each partition with the tag LAUNCHED_TAG, and the shard asset
reads the worker's `_launch.json` instead of evaluating again (same Dagster record as a
local run, with where it ran in the metadata). Then the merge (bundles, reports) runs as
for a local run. A failed partition is reported alone; its siblings' results are recorded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nel_assets.engine.remote_shard import LAUNCHED_TAG
from nel_resources.launchers.partitions import PartitionJob, PartitionResult

__all__ = ["LAUNCHED_TAG", "launch_partitions", "launches", "preflight"]
LAUNCHED_TYPES = ("docker", "ray")


def launches(resolved: Any, shard_only: tuple[int, int] | None) -> bool:
    """Whether this run sends its shards to a cluster (never inside a shard process)."""
    return shard_only is None and resolved.config.cluster.type in LAUNCHED_TYPES


# The image each docker cluster runs, resolved (and nel's own built) once per process.
_IMAGES: dict[str | None, str] = {}


def preflight(resolved: Any) -> None:
    """Before anything is written: the Docker engine reachable and the image there (nel's
    own built when it is not), or the Ray address reachable and, in a `ray job submit` driver,
    the output dir outside the job's working_dir copy. NelError (one line) if not."""
    cluster = resolved.config.cluster
    if cluster.type == "docker":
        from nel_resources.launchers.docker import check_docker_usable, resolve_image

        check_docker_usable()
        _IMAGES[cluster.image] = resolve_image(cluster)
    elif cluster.type == "ray":
        from nel_resources.launchers.ray_tasks import (
            check_job_output_dir,
            check_reachable,
            ray_address,
        )

        check_job_output_dir(resolved.config.output.dir)
        address = ray_address(cluster)
        if address is not None:
            check_reachable(address)


def _read_only_paths(resolved: Any) -> list[Path]:
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


def launch_partitions(resolved: Any, out: Path, todo: list[Any], resources: dict[str, Any],
                      bench: Any) -> dict[tuple[str, int], PartitionResult]:
    """Evaluate `todo` (the benchmark's stale shard tasks) on the cluster; results by
    (model, shard)."""
    cluster = resolved.config.cluster
    config_path = str(out / "nel-config.yaml")
    jobs = []
    for t in todo:
        run = bench.run_for(t.model)
        svc = resources.get(run.service.resource_key) if run is not None else None
        jobs.append(PartitionJob(bench.name, t.model, t.shard, t.total, config_path,
                                 getattr(svc, "url", None) or None))
    if cluster.type == "docker":
        from nel_resources.launchers.docker import (
            DockerLauncher,
            check_docker_usable,
            resolve_image,
        )

        check_docker_usable()
        image = _IMAGES.get(cluster.image) or resolve_image(cluster)
        results = DockerLauncher(cluster, image, out, _read_only_paths(resolved)).run(jobs)
    else:
        from nel_assets.engine.remote_shard import run_job
        from nel_resources.launchers.ray_tasks import RayLauncher

        results = RayLauncher(cluster, run_job).run(jobs)
    return {(r.job.model, r.job.shard): r for r in results}
