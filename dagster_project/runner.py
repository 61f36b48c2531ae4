"""Drive the asset graph in-process on a persistent Dagster instance (what `nel eval run`
does): materialize only the (model, shard) partitions that are missing or stale, then the
bundles and reports of the models that changed.

The instance lives with the output (`<output>/.dagster` unless `output.dagster_home` or
`DAGSTER_HOME` says otherwise), so `dagster dev` on the same home shows every CLI run.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.errors import NelError
from nel_resources.config import NelConfig

# One consolidated SQLite event log instead of Dagster's default database per run: a new
# instance is created in ~0.2 s instead of ~0.8 s, and each run pays less to open its log.
DAGSTER_YAML = """\
# Written by nel: a persistent instance next to the results.
telemetry:
  enabled: false
nux:
  enabled: false
run_coordinator:
  module: dagster._core.run_coordinator
  class: DefaultRunCoordinator
run_storage:
  module: dagster._core.storage.runs
  class: SqliteRunStorage
  config:
    base_dir: {home}/history
event_log_storage:
  module: dagster._core.storage.event_log
  class: ConsolidatedSqliteEventLogStorage
  config:
    base_dir: {home}/history
schedule_storage:
  module: dagster._core.storage.schedules
  class: SqliteScheduleStorage
  config:
    base_dir: {home}/schedules
"""


def save_effective_config(cfg: NelConfig, out: Path) -> Path:
    """Write the run's config (absolute output dir, no secret values) next to the results,
    so `NEL_CONFIG=<out>/nel-config.yaml dagster dev ...` shows the same asset graph.

    Secrets given by reference (`api_key_env`, `api_key: ${VAR}`, headers written with
    `${VAR}`) keep the reference, so runs started from that file authenticate; secrets
    written literally are left out (api_key) or replaced by a marker (auth-like headers),
    with a warning saying to use `${VAR}`.
    """
    import sys

    import yaml

    from nel_resources.redact import REDACTED, is_secret_header

    data = cfg.model_dump(mode="json", exclude_defaults=True)
    data.setdefault("output", {})["dir"] = str(out)
    for name, svc in data.get("services", {}).items():
        if svc.pop("api_key", None):
            print(f"warning: services.{name}.api_key is written literally, so "
                  f"{out / 'nel-config.yaml'} leaves it out: write api_key: ${{VAR}} (or "
                  "api_key_env) so runs started from that file authenticate", file=sys.stderr)
        for key, value in (svc.get("headers") or {}).items():
            if "${" not in value and is_secret_header(key):
                svc["headers"][key] = REDACTED
                print(f"warning: services.{name}.headers.{key} is written literally and is "
                      f"replaced by {REDACTED} in nel-config.yaml: write it as ${{VAR}}",
                      file=sys.stderr)
    path = out / "nel-config.yaml"
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text("# The effective config of the last `nel eval run` here (secret values "
                   "removed; environment-variable references kept).\n" + yaml.safe_dump(data, sort_keys=False))
    os.replace(tmp, path)
    return path


def dagster_home_for(cfg: NelConfig) -> Path:
    """The Dagster home a run uses (created with a dagster.yaml if new)."""
    home = cfg.output.dagster_home or os.path.join(cfg.output.dir, ".dagster")
    path = Path(home).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    y = path / "dagster.yaml"
    if not y.exists():
        y.write_text(DAGSTER_YAML.format(home=path))
    return path


# The CLI shows its own progress and summary: Dagster's console logger speaks only of
# problems (everything is still in the instance's event log and the UI).
_QUIET_RUN_CONFIG = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


@dataclass
class BenchOutcome:
    """What happened to one benchmark in a run."""

    benchmark: str
    shards_total: int = 0
    shards_run: list[tuple[str, int]] = field(default_factory=list)
    shards_fresh: int = 0
    requests_sent: int = 0
    bundles: dict[str, dict[str, Any]] = field(default_factory=dict)
    exports: dict[str, str] = field(default_factory=dict)


@dataclass
class RunSummary:
    """The result of `run_eval`."""

    output_dir: Path
    dagster_home: Path
    benchmarks: list[BenchOutcome]
    elapsed_s: float
    dagster_runs: int
    gates: dict[str, dict[str, Any]] = field(default_factory=dict)


class _Progress:
    """A rich progress bar fed by the engine's per-sample callback."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._bar: Any = None

    @contextmanager
    def task(self, label: str, total: int) -> Iterator[Callable[[int], None] | None]:
        if not self.enabled or total <= 0:
            yield None
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                      transient=False, refresh_per_second=4) as bar:
            tid = bar.add_task(label, total=total, rate="")
            t0 = time.perf_counter()
            done = 0
            last = 0.0

            def advance(k: int) -> None:
                nonlocal done, last
                done += k
                now = time.perf_counter()
                if now - last > 0.25 or done >= total:  # throttle: rich updates cost ~50µs
                    last = now
                    bar.update(tid, completed=done, rate=f"{done / max(now - t0, 1e-9):.0f}/s")

            yield advance


def _raise_failure(result: Any, what: str) -> None:
    """Turn a failed in-process run into a one-line NelError."""
    for ev in result.get_step_failure_events():
        data = ev.step_failure_data
        if data.user_failure_data is not None and data.user_failure_data.description:
            raise NelError(data.user_failure_data.description)
        err = data.error
        while err is not None and err.cause is not None:
            err = err.cause
        if err is not None:
            raise NelError(f"{what} failed: {err.cls_name}: {err.message.strip().splitlines()[-1]}")
    raise NelError(f"{what} failed (see the Dagster run log)")


def run_eval(cfg: NelConfig, *, resume: bool = True, progress: bool = True,
             shard_only: tuple[int, int] | None = None) -> RunSummary:
    """Evaluate every benchmark × service of `cfg`, running only stale partitions.

    Args:
        cfg: the validated config.
        resume: reuse journals of interrupted shards (never re-request finished samples);
            False discards stored results and journals and recomputes everything.
        progress: show a progress bar.
        shard_only: (shard, total) when this process is one shard of a distributed run;
            bundles are then left to `nel eval merge`.
    """
    from nel_assets.engine import evaluate as ev
    from nel_resources.store import ResultStore

    t0 = time.perf_counter()
    if cfg.data_dir:
        from benchmarks.datasets import set_data_dir

        set_data_dir(cfg.data_dir)
    out = Path(cfg.output.dir).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    home = dagster_home_for(cfg)
    os.environ["DAGSTER_HOME"] = str(home)
    store = ResultStore(out)
    save_effective_config(cfg, out)

    # Scoring configs that cannot run (a judge-graded benchmark without a judge, a judge on
    # the solver's own service) fail here, in one line, before any Dagster run.
    from nel_assets.engine.judging import check_scoring

    for bench in cfg.benchmarks:
        for svc_name in bench.service_names(cfg.services):
            check_scoring(cfg, bench, svc_name)

    # Plan first, without Dagster: an up-to-date run never pays for Dagster or a launched
    # model server, and sends no request.
    plans: list[tuple[Any, list[Any], list[Any]]] = []
    for bench in cfg.benchmarks:
        tasks = ev.plan(cfg, store, bench)
        if shard_only is not None:
            tasks = [t for t in tasks if t.shard == shard_only[0]]
        if not resume:
            for t in tasks:
                for p in store.journal_path(bench.name, t.model, t.shard, t.fingerprint).parent.glob("*.jsonl"):
                    p.unlink()
        todo = [t for t in tasks if t.stale or not resume]
        plans.append((bench, tasks, todo))
    needs_bundle = shard_only is None and any(
        store.read_bundle(b.name, t.model) is None for b, tasks, _ in plans for t in tasks)
    needs_compare = shard_only is None and bool(cfg.comparison.baseline) and _missing_comparisons(cfg, store)
    needs_dagster = needs_bundle or needs_compare or any(todo for _, _, todo in plans)

    n_runs = 0
    outcomes: list[BenchOutcome] = []
    gates: dict[str, dict[str, Any]] = {}
    if needs_dagster:
        n_runs = _materialize(cfg, store, home, plans, progress=progress, shard_only=shard_only,
                              outcomes=outcomes, gates=gates)
    else:
        outcomes = [BenchOutcome(b.name, shards_total=len(tasks), shards_fresh=len(tasks))
                    for b, tasks, _ in plans]
    for (bench, tasks, _), oc in zip(plans, outcomes, strict=True):
        if shard_only is None:
            for m in sorted({t.model for t in tasks}):
                bundle = store.read_bundle(bench.name, m)
                if bundle is not None:
                    oc.bundles[m] = bundle
                    oc.exports[m] = str(store.export_dir(bench.name, m))
    if cfg.comparison.baseline and shard_only is None and not gates:
        gates = _stored_gates(cfg, store)
    return RunSummary(out, home, outcomes, time.perf_counter() - t0, n_runs, gates)


def _missing_comparisons(cfg: NelConfig, store: Any) -> bool:
    from nel_assets.comparison_assets import comparison_dir
    from nel_resources.store import slugify

    baseline = slugify(cfg.comparison.baseline or "")
    return any(not (comparison_dir(store.root, slugify(s)) / "regression.json").exists()
               for b in cfg.benchmarks for s in b.service_names(cfg.services) if slugify(s) != baseline)


def _stored_gates(cfg: NelConfig, store: Any) -> dict[str, dict[str, Any]]:
    """The gate decisions already on disk (an up-to-date rerun reports them too)."""
    from nel_assets.comparison_assets import comparison_dir
    from nel_resources.store import slugify

    out: dict[str, dict[str, Any]] = {}
    baseline = slugify(cfg.comparison.baseline or "")
    for b in cfg.benchmarks:
        for s in b.service_names(cfg.services):
            m = slugify(s)
            p = comparison_dir(store.root, m) / "regression.json"
            if m != baseline and m not in out and p.exists():
                g = json.loads(p.read_text()).get("gate") or {}
                out[m] = {"decision": g.get("decision"), "baseline": baseline, "details": {}}
    return out


def build_runner_defs(cfg: NelConfig, resources: dict[str, Any]) -> Any:
    """Definitions for the runner: the benchmark assets, the comparison asset and gate
    check when a baseline is configured, and the jobs the runner executes."""
    import dagster as dg

    from nel_assets.comparison_assets import COMPARISON_KEY, build_comparison_assets
    from nel_assets.factory import MODEL_PARTITIONS, build_assets, build_runner_jobs

    extra = build_comparison_assets(cfg)
    assets = [*build_assets(cfg), *(a for a in extra if isinstance(a, dg.AssetsDefinition))]
    checks = [c for c in extra if not isinstance(c, dg.AssetsDefinition)]
    jobs = build_runner_jobs(cfg)
    if extra:
        jobs.append(dg.define_asset_job("nel_comparison", selection=dg.AssetSelection.assets(COMPARISON_KEY),
                                        partitions_def=MODEL_PARTITIONS,
                                        description="Compare one candidate with the baseline; the gate check runs too."))
    return dg.Definitions(assets=assets, asset_checks=checks, jobs=jobs, resources=resources)


def _materialize(cfg: NelConfig, store: Any, home: Path, plans: list[tuple[Any, list[Any], list[Any]]],
                 *, progress: bool, shard_only: tuple[int, int] | None,
                 outcomes: list[BenchOutcome], gates: dict[str, dict[str, Any]]) -> int:
    """Materialize the stale partitions of every benchmark; returns the number of runs."""
    import warnings

    import dagster as dg

    from dagster_project.automation import record_planned_shards
    from dagster_project.launch import launched_services

    for cat in (dg.BetaWarning, dg.PreviewWarning):
        warnings.filterwarnings("ignore", category=cat)
    from nel_assets.engine import evaluate as ev
    from nel_assets.factory import (
        MODEL_PARTITIONS,
        build_resources,
        runner_job_names,
    )
    from nel_resources.store import write_json_atomic

    instance = dg.DagsterInstance.from_config(str(home))
    resources = build_resources(cfg, str(store.root))
    bar = _Progress(progress)
    n_runs = 0
    rebuilt: set[str] = set()

    # Launched model servers start only when some shard actually needs them.
    any_todo = any(todo for _, _, todo in plans)
    with launched_services(cfg, resources) if any_todo else _nothing():
        # One Definitions per process (with the launched services' URLs): its jobs are
        # resolved once and executed in-process for each partition.
        defs = build_runner_defs(cfg, resources)

        def run(job: str, partition_key: Any, what: str) -> Any:
            nonlocal n_runs
            r = defs.resolve_job_def(job).execute_in_process(
                instance=instance, partition_key=partition_key, raise_on_error=False,
                run_config=_QUIET_RUN_CONFIG)
            n_runs += 1
            if not r.success:
                _raise_failure(r, what)
            return r

        for bench, tasks, todo in plans:
            jobs = runner_job_names(bench.name)
            oc = BenchOutcome(bench.name, shards_total=len(tasks), shards_fresh=len(tasks) - len(todo))
            models = sorted({t.model for t in tasks})
            existing = set(instance.get_dynamic_partitions(MODEL_PARTITIONS.name))
            new = [m for m in models if m not in existing]
            if new:
                instance.add_dynamic_partitions(MODEL_PARTITIONS.name, new)
            # The shards' fingerprints go to Dagster first, so the UI's stale/fresh marks
            # are the runner's own decisions.
            record_planned_shards(instance, bench.name, todo)
            version_file = store.dataset_path(bench.name).with_name("_version.json")
            version = ev.dataset_version(tasks)
            stored = json.loads(version_file.read_text()) if version_file.exists() else {}
            refresh_dataset = bool(todo) and stored.get("version") != version
            total_samples = sum(len(t.indices) for t in todo) * bench.repeats
            with bar.task(bench.name, total_samples) as advance:
                ev.set_progress_hook(advance)
                try:
                    for t in todo:
                        key = dg.MultiPartitionKey({"model": t.model, "shard": str(t.shard)})
                        job = jobs["dataset_shards"] if refresh_dataset else jobs["shards"]
                        r = run(job, key, f"{bench.name} {t.model} shard {t.shard}")
                        if refresh_dataset:
                            write_json_atomic(version_file, {"version": version})
                            refresh_dataset = False
                        oc.shards_run.append((t.model, t.shard))
                        oc.requests_sent += _metadata_int(r, "requests_sent")
                finally:
                    ev.set_progress_hook(None)
            if shard_only is None:
                changed = {m for m, _ in oc.shards_run}
                for m in models:
                    if m in changed or store.read_bundle(bench.name, m) is None:
                        run(jobs["bundle"], m, f"{bench.name} {m} bundle")
                        rebuilt.add(m)
            outcomes.append(oc)
        if shard_only is None and cfg.comparison.baseline:
            n_runs += _compare(cfg, defs, instance, store, rebuilt, gates)
    return n_runs


def _compare(cfg: NelConfig, defs: Any, instance: Any, store: Any, rebuilt: set[str],
             gates: dict[str, dict[str, Any]]) -> int:
    """Materialize each candidate's comparison (and its gate check) when a bundle on either
    side was rebuilt or the comparison is missing. A NO-GO is reported, not raised: `nel gate`
    and the `gate` job are where exit status follows the verdict."""
    from nel_assets.comparison_assets import comparison_dir
    from nel_resources.store import slugify

    baseline = slugify(cfg.comparison.baseline or "")
    candidates = sorted({slugify(s) for b in cfg.benchmarks for s in b.service_names(cfg.services)}
                        - {baseline})
    runs = 0
    for m in candidates:
        done = (comparison_dir(store.root, m) / "regression.json").exists()
        if done and m not in rebuilt and baseline not in rebuilt:
            continue
        r = defs.resolve_job_def("nel_comparison").execute_in_process(
            instance=instance, partition_key=m, raise_on_error=False, run_config=_QUIET_RUN_CONFIG)
        runs += 1
        evals = r.get_asset_check_evaluations()
        if not evals and not r.success:
            _raise_failure(r, f"comparison of {m}")
        for e in evals:
            md = {k: v.value for k, v in e.metadata.items()}
            gates[m] = {"decision": md.get("decision", "GO" if e.passed else "NO-GO"),
                        "baseline": baseline, "details": {k: v for k, v in md.items()
                                                          if k not in ("decision", "candidate", "baseline")}}
    return runs


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


def _metadata_int(result: Any, key: str) -> int:
    total = 0
    for e in result.get_asset_materialization_events():
        md = e.materialization.metadata
        if key in md:
            total += int(md[key].value or 0)
    return total
