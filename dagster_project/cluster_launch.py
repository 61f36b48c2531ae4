"""The runner's side of a `partitions` launcher (`cluster.type` docker, ray, or any type
whose Launcher says `runs = "partitions"`; nel_resources.launchers.registry): the stale
(model, shard) partitions of a benchmark run there before the runner records them in Dagster.

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
from nel_resources.launchers.base import LaunchContext
from nel_resources.launchers.partitions import PartitionJob, PartitionResult
from nel_resources.launchers.registry import get_launcher

__all__ = ["LAUNCHED_TAG", "launch_partitions", "launches", "preflight"]


def launches(resolved: Any, shard_only: tuple[int, int] | None) -> bool:
    """Whether this run sends its shards to a cluster (never inside a shard process)."""
    return shard_only is None and get_launcher(resolved.config.cluster.type).runs == "partitions"


def preflight(resolved: Any) -> None:
    """Before anything is written: the launcher's own checks (NelError, one line, if not)."""
    get_launcher(resolved.config.cluster.type).preflight(resolved)


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
    from nel_assets.engine.remote_shard import run_job

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


class RunnerHooks:
    """The runner's side of a `submits` launcher (nel_resources.launchers.base.RunHooks):
    config checks, output, planning and the summary come from dagster_project.runner; the
    Dagster instance records the planned model partitions and each job's outcome."""

    def __init__(self) -> None:
        self._stores: dict[Path, Any] = {}
        self._instances: dict[Path, Any] = {}

    def validate(self, cfg: Any) -> Any:
        """dagster_project.runner.validate_before_run."""
        from dagster_project.runner import validate_before_run

        return validate_before_run(cfg)

    def prepare_output(self, cfg: Any) -> tuple[Path, Path]:
        """dagster_project.runner.prepare_output (no output lock: the jobs share the dir)."""
        from dagster_project.runner import prepare_output

        out, home = prepare_output(cfg)
        return Path(out), Path(home)

    def plan(self, out: Path, bench: Any) -> list[Any]:
        """nel_assets.engine.evaluate.plan against the store at `out` (one store per dir)."""
        from nel_assets.engine import evaluate as ev
        from nel_resources.store import ResultStore

        store = self._stores.get(out)
        if store is None:
            store = self._stores[out] = ResultStore(out)
        return ev.plan(store, bench)

    def failure(self, benchmark: str, model: str, exc: BaseException, stage: str) -> Any:
        """A BenchFailure with the exception's one-line reason."""
        from dagster_project import run_log
        from dagster_project.checkpoint import BenchFailure

        return BenchFailure(benchmark, model, run_log.one_line(type(exc).__name__, str(exc)), stage)

    def _instance(self, home: Path) -> Any:
        import dagster as dg

        inst = self._instances.get(home)
        if inst is None:
            inst = self._instances[home] = dg.DagsterInstance.from_config(str(home))
        return inst

    def record_planned(self, home: Path, models: set[str]) -> None:
        """The model partitions exist in the instance before any job starts (jobs add them
        too; doing it once here keeps them from racing on it)."""
        from nel_assets.partitions import MODEL_PARTITIONS

        instance = self._instance(home)
        new = sorted(models - set(instance.get_dynamic_partitions(MODEL_PARTITIONS.name)))
        if new:
            instance.add_dynamic_partitions(MODEL_PARTITIONS.name, new)

    def record_outcome(self, home: Path, asset_name: str, model: str, shard: int,
                       metadata: dict[str, Any]) -> None:
        """How a job ended, as an AssetObservation of its `shard_results` partition."""
        import dagster as dg

        self._instance(home).report_runless_asset_event(dg.AssetObservation(
            asset_key=dg.AssetKey([asset_name, "shard_results"]),
            partition=dg.MultiPartitionKey({"model": model, "shard": str(shard)}),
            metadata=metadata))

    def finish(self, cfg: Any, failures: list[Any], ran: list[Any] | None,
               submitted: list[Any] | None) -> tuple[int, Any]:
        """The run's summary, read from the store as a local run reports it (nothing is
        evaluated here: a shard still missing is a failure naming it); `ran` are the
        partitions the jobs evaluated, `submitted` all those the run submitted (the rest
        were fresh)."""
        from dagster_project.runner import run_eval

        summary = run_eval(cfg, progress=False, merge_only=set())
        for oc in summary.benchmarks:
            done = [p for p in ran or [] if p.benchmark == oc.benchmark]
            oc.shards_run = [(p.model, p.shard) for p in done]
            oc.run_reasons = {f"{p.model}/{p.shard}": p.reason for p in done}
            sent = [p for p in submitted or ran or [] if p.benchmark == oc.benchmark]
            oc.shards_fresh = max(0, oc.shards_total - len(sent))  # a missing shard is not fresh
        known = {(f.benchmark, f.model) for f in summary.failures}
        summary.failures += [f for f in failures if (f.benchmark, f.model) not in known]
        return summary.exit_status, summary
