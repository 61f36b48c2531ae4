"""The Dagster side of a `submits` launcher (slurm, k8s; nel_resources.launchers.base.RunHooks):
the Dagster instance records the planned model partitions and each job's outcome, and the
runner's own functions (config checks, output, evaluation) are handed in by the caller, so
this module does not import the runner (which imports the launchers).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["RunnerHooks"]


class RunnerHooks:
    """The runner's side of a `submits` launcher (nel_resources.launchers.base.RunHooks).

    Args:
        validate: dagster_project.runner.validate_before_run.
        prepare_output: dagster_project.runner.prepare_output.
        run_eval: dagster_project.runner.run_eval.
        dagster_home: dagster_project.run_output.dagster_home_for.
    """

    def __init__(self, validate: Callable[[Any], Any], prepare_output: Callable[[Any], tuple[Any, Any]],
                 run_eval: Callable[..., Any], dagster_home: Callable[[Any], Any]) -> None:
        self._validate = validate
        self._prepare_output = prepare_output
        self._run_eval = run_eval
        self._dagster_home = dagster_home
        self._stores: dict[Path, Any] = {}
        self._instances: dict[Path, Any] = {}

    def validate(self, cfg: Any) -> Any:
        """Every config check; the resolved config."""
        return self._validate(cfg)

    def prepare_output(self, cfg: Any) -> tuple[Path, Path]:
        """The output dir and Dagster home, created (no output lock: the jobs share the dir)."""
        out, home = self._prepare_output(cfg)
        return Path(out), Path(home)

    def evaluate(self, cfg: Any, **options: Any) -> Any:
        """A local run's evaluation (run_eval, `progress` off unless asked)."""
        return self._run_eval(cfg, **{"progress": False, **options})

    def dagster_home(self, cfg: Any) -> Path:
        """The run's Dagster home."""
        return Path(self._dagster_home(cfg))

    def plan(self, out: Path, bench: Any) -> list[Any]:
        """nel_assets.engine.evaluation.evaluate.plan against the store at `out` (one store per dir)."""
        from nel_assets.engine.evaluation import evaluate as ev
        from nel_resources.storage.store import ResultStore

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
        summary = self.evaluate(cfg, merge_only=set())
        for oc in summary.benchmarks:
            done = [p for p in ran or [] if p.benchmark == oc.benchmark]
            oc.shards_run = [(p.model, p.shard) for p in done]
            oc.run_reasons = {f"{p.model}/{p.shard}": p.reason for p in done}
            sent = [p for p in submitted or ran or [] if p.benchmark == oc.benchmark]
            oc.shards_fresh = max(0, oc.shards_total - len(sent))  # a missing shard is not fresh
        known = {(f.benchmark, f.model) for f in summary.failures}
        summary.failures += [f for f in failures if (f.benchmark, f.model) not in known]
        return summary.exit_status, summary
