"""Drive the asset graph in-process on a persistent Dagster instance (what `nel eval run`
does): materialize only the (model, shard) partitions that are missing or stale, then the
bundles and reports of the models that changed.

The instance lives with the output (`<output>/.dagster` unless `output.dagster_home` or
`DAGSTER_HOME` says otherwise), so `dagster dev` on the same home shows every CLI run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from dagster_project import record_repair, run_log, run_registry
from dagster_project.background_recording import RecordLater
from dagster_project.checkpoint import BenchFailure
from dagster_project.head_start import HeadStart
from dagster_project.instance_config import open_instance
from dagster_project.output_lock import OutputLock
from dagster_project.run_output import HomeUnusable, os_reason, prepare_output, storage_reason
from dagster_project.run_progress import Progress
from dagster_project.run_summary import (
    BenchOutcome,
    RunSummary,
    all_samples_failed,
    drop_empty_models,
    failed_models,
    missing_comparisons,
    stored_gates,
    write_checkpoint,
    write_run_reports,
)
from dagster_project.run_validation import is_config_error, preflight_sandboxes, validate_before_run
from nel_resources.config import NelConfig
from nel_resources.specs import ResolvedConfig

__all__ = ["BenchOutcome", "RunSummary", "build_runner_defs", "is_config_error", "jobs_of",
           "prepare_output", "run_eval", "validate_before_run"]

# The CLI shows its own progress, summary and one `error:` line per failure: Dagster's
# console logger stays silent (a failed step would print its ERROR lines and traceback);
# failures go to the run log (run_log) and everything is still in the instance's event log.
_QUIET_RUN_CONFIG = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


class _StepFailed(Exception):
    """A Dagster run for one (benchmark, model) failed; `reason` is one line."""

    def __init__(self, reason: str, *, budget: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.budget = budget  # a service's budget cap stopped it (exit 5, not a failure)


class _RunAborted(Exception):
    """The Dagster instance itself failed (e.g. its disk is full): no further run can work."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def run_eval(cfg: NelConfig, *, resume: bool = True, progress: bool = True,
             shard_only: tuple[int, int] | None = None,
             only: set[tuple[str, str, int]] | None = None,
             merge_only: set[tuple[str, str]] | None = None,
             elsewhere: Mapping[str, str | None] | None = None,
             wait: bool = False, record_later: RecordLater | None = None) -> RunSummary:
    """Evaluate every benchmark × service of `cfg`, running only stale partitions.

    A failure of one (benchmark, model) (missing data, a dead or refusing endpoint, a
    failed step) is recorded and the others still run; the summary's `failures` and
    `<out>/checkpoint.json` list them, tracebacks go to `<out>/logs/nel-run.log`.

    Args:
        cfg: the config (checked and resolved once, here).
        resume: reuse journals of interrupted shards (never re-request finished samples);
            False discards stored results and journals and recomputes everything.
        progress: show a progress bar.
        shard_only: (shard, total) when this process is one shard of a distributed run;
            it bundles its own shard (as NeMo Evaluator's shard processes do) and leaves the
            whole benchmark's bundle to `nel eval merge`.
        only: evaluate these (benchmark, model, shard) partitions and nothing else (no
            bundle, report or comparison): one task of a SLURM array (dagster_project.slurm_run).
        merge_only: evaluate nothing; build the bundles, reports and comparisons of these
            (benchmark, model) pairs from shards evaluated elsewhere (the SLURM merge job);
            a partition still missing or stale is a failure naming it.
        elsewhere: launched services this process must not start, by name: the base URL
            where another process serves it, or None when this run does not use it (a
            component of a heterogeneous SLURM job, dagster_project.slurm_het).
        wait: when another run holds the output directory, wait for it to end (default:
            refuse, OutputBusyError). The parts of a distributed run (`shard_only`, `only`,
            `merge_only`) share the directory and take no lock.
        record_later: where the run may leave its Dagster recording to a process that goes on
            after this returns (`nel eval run`; background_recording): the plain case of one
            stale shard and its bundle, both computed by the head start, is recorded there.

    Raises:
        NelError: the config or output location cannot work at all (nothing ran).
        OutputBusyError: another run is using the output directory (and not `wait`).
    """
    from nel_assets.engine.evaluation import evaluate as ev
    from nel_assets.engine.evaluation.budget import reset_budgets
    from nel_resources.launchers.partition_run import launches, preflight
    from nel_resources.storage.store import ResultStore

    # Every config check (unbuilt features included) before anything is written.
    resolved = validate_before_run(cfg)
    if launches(resolved, shard_only):
        preflight(resolved)  # cluster.type docker|ray: reachable, image built; one line if not
    preflight_sandboxes(resolved)
    started = time.time()
    t0 = time.perf_counter()
    # One run per output directory (output_lock.py): two at once each sent every request.
    lock = None if (shard_only is not None or only is not None or merge_only is not None) \
        else OutputLock(wait=wait)
    try:
        out, home = prepare_output(cfg, lock)
        os.environ["DAGSTER_HOME"] = str(home)
        reset_budgets()  # a budget cap counts what this run sends
        # `nel eval status|stop|logs|resume` find this run by its id or output dir.
        run_registry.register(out, home, [b.name for b in cfg.benchmarks], sorted(cfg.services))
        log_path = run_log.log_path_for(out)
        store = ResultStore(out)

        failures: list[BenchFailure] = []
        if not cfg.benchmarks:
            failures.append(BenchFailure("*", "*", "nothing to evaluate: the config selects no benchmarks", "plan"))

        # Plan first, without Dagster: an up-to-date run never pays for Dagster or a launched
        # model server, and sends no request. A benchmark that cannot be planned (its data is
        # missing) fails alone.
        plans: list[tuple[Any, list[Any], list[Any]]] = []
        for bench in resolved.benchmarks:
            if bench.name in resolved.unrunnable:  # a suite's benchmark that cannot run
                failures += [BenchFailure(bench.name, m, resolved.unrunnable[bench.name], "plan")
                             for m in bench.models]
                continue
            try:
                tasks = ev.plan(store, bench)
            except Exception as exc:  # isolate: the other benchmarks still run
                if is_config_error(bench.name, exc):
                    raise  # every plan comes before any request: nothing has been sent
                reason = run_log.one_line(type(exc).__name__, str(exc))
                _log_exception(log_path, f"{bench.name}: planning failed: {reason}")
                failures += [BenchFailure(bench.name, m, reason, "plan") for m in bench.models]
                continue
            tasks = drop_empty_models(bench.name, tasks, failures)
            if shard_only is not None:
                tasks = [t for t in tasks if t.shard == shard_only[0]]
            if only is not None:
                tasks = [t for t in tasks if (bench.name, t.model, t.shard) in only]
            if not resume and merge_only is None:
                for t in tasks:
                    for p in store.journal_path(bench.name, t.model, t.shard, t.fingerprint).parent.glob("*.jsonl"):
                        p.unlink()
            todo = [t for t in tasks if t.stale or not resume]
            if merge_only is not None:  # evaluated elsewhere: what is still stale is missing
                failures += [BenchFailure(bench.name, t.model, f"shard {t.shard} is missing "
                                          f"({t.reason}): its task did not store results", "shard")
                             for t in todo if t.stale]
                todo = []
            plans.append((bench, tasks, todo))
        # Every run checks every artifact (cheaply) and rebuilds missing or torn ones from the
        # store: a rebuild runs the bundle job only, never a model request.
        sub_run = shard_only is not None or only is not None  # one part of a distributed run
        artifact_issues = {} if sub_run else {
            (b.name, m): ev.artifact_problems(store, b.name, m)
            for b, tasks, _ in plans for m in sorted({t.model for t in tasks})}
        needs_bundle = any(artifact_issues.values())
        needs_compare = not sub_run and bool(resolved.comparison.baseline) and missing_comparisons(resolved, store)
        # A background recording of an earlier run here that never finished (record_repair).
        pending = None if sub_run or lock is None else record_repair.read_pending(out)
        needs_dagster = (needs_bundle or needs_compare or any(todo for _, _, todo in plans) or bool(merge_only)
                         or pending is not None)

        n_runs = 0
        outcomes: list[BenchOutcome] = []
        gates: dict[str, dict[str, Any]] = {}
        if needs_dagster:
            try:
                n_runs = _materialize(resolved, store, home, plans, progress=progress,
                                      shard_only=shard_only,
                                      outcomes=outcomes, gates=gates, failures=failures, log_path=log_path,
                                      artifact_issues=artifact_issues, bundle=only is None,
                                      merged=merge_only or set(), elsewhere=elsewhere or {},
                                      record_later=record_later, repair_pending=pending is not None)
            except OSError as exc:
                # Mid-run (the output's disk filled, a file became unwritable): what is stored
                # stays; the run ends as failed with one line, not a traceback.
                _log_exception(log_path, "the run stopped on an OS error")
                where = f"{exc.filename}: " if exc.filename else ""
                failures.append(BenchFailure("*", "*", f"the run stopped: {where}{os_reason(exc)}", "run"))
                outcomes += [BenchOutcome(b.name, shards_total=len(t)) for b, t, _ in plans[len(outcomes):]]
        else:
            outcomes = [BenchOutcome(b.name, shards_total=len(tasks), shards_fresh=len(tasks))
                        for b, tasks, _ in plans]
        failed_pairs = {(f.benchmark, f.model) for f in failures}
        for (bench, tasks, _), oc in zip(plans, outcomes, strict=True):
            if not sub_run:
                for m in sorted({t.model for t in tasks}):
                    if (bench.name, m) in failed_pairs:
                        continue  # an older bundle is not this run's result
                    bundle = store.read_bundle(bench.name, m)
                    if bundle is not None:
                        oc.bundles[m] = bundle
                        oc.exports[m] = str(store.export_dir(bench.name, m))
                        if (why := all_samples_failed(bundle)) is not None:
                            failures.append(BenchFailure(bench.name, m, why, "scores"))
        if resolved.comparison.baseline and not sub_run and not gates:
            gates = stored_gates(resolved, store, failed_models(failures))
        summary = RunSummary(out, home, outcomes, time.perf_counter() - t0, n_runs, gates,
                             failures=failures, log_path=log_path)
        if only is None:  # an array task leaves the run's files to the merge job
            write_run_reports(cfg.output.report, store, summary)
            summary.checkpoint_path = write_checkpoint(summary, started)
        run_registry.finished(summary.exit_status, len(summary.failures))
        if record_later is not None and record_later.pending:
            # Everything the user reads is written: the recording goes on without them.
            record_later.detach(home, log_path, lock.fileno() if lock is not None else None)
        return summary
    finally:
        if lock is not None:
            lock.release()


def _log_exception(log_path: Path, title: str) -> None:
    """The current exception's traceback into the run log (never the terminal)."""
    import traceback

    _append_quietly(log_path, title, traceback.format_exc())


def _append_quietly(log_path: Path, title: str, body: str) -> None:
    # A full or read-only disk: the failure itself is still reported in one line.
    with suppress(OSError):
        run_log.append(log_path, title, body)


def build_runner_defs(resolved: ResolvedConfig, resources: dict[str, Any]) -> Any:
    """Definitions for the runner: the benchmark assets, the comparison asset and gate
    check when a baseline is configured, and the jobs the runner executes."""
    import dagster as dg

    from nel_assets.comparison_assets import COMPARISON_KEY, build_comparison_assets
    from nel_assets.factory import build_assets, build_runner_jobs
    from nel_assets.partitions import MODEL_PARTITIONS

    extra = build_comparison_assets(resolved)
    assets = [*build_assets(resolved), *(a for a in extra if isinstance(a, dg.AssetsDefinition))]
    checks = [c for c in extra if not isinstance(c, dg.AssetsDefinition)]
    jobs = build_runner_jobs(resolved)
    if extra:
        jobs.append(dg.define_asset_job("nel_comparison", selection=dg.AssetSelection.assets(COMPARISON_KEY),
                                        partitions_def=MODEL_PARTITIONS,
                                        description="Compare one candidate with the baseline; the gate check runs too."))
    return dg.Definitions(assets=assets, asset_checks=checks, jobs=jobs, resources=resources)


def _materialize(resolved: ResolvedConfig, store: Any, home: Path, plans: list[tuple[Any, list[Any], list[Any]]],
                 *, progress: bool, shard_only: tuple[int, int] | None,
                 outcomes: list[BenchOutcome], gates: dict[str, dict[str, Any]],
                 failures: list[BenchFailure], log_path: Path,
                 artifact_issues: dict[tuple[str, str], list[str]], bundle: bool = True,
                 merged: set[tuple[str, str]] | None = None,
                 elsewhere: Mapping[str, str | None] | None = None,
                 record_later: RecordLater | None = None, repair_pending: bool = False) -> int:
    """Materialize the stale partitions of every benchmark; returns the number of runs.

    A failed run fails its (benchmark, model) alone (recorded in `failures`, its traceback
    in the run log); a failure of the Dagster instance itself stops every further run."""
    # The first stale shard starts before Dagster is imported (see HeadStart); Dagster's
    # imports, instance and definitions come after it, or at once when there is no head start.
    from nel_assets.engine.evaluation.remote_shard import LAUNCHED_TAG, run_job
    from nel_resources.launchers.partition_run import launch_partitions, launches

    # cluster.type docker|ray runs every stale shard elsewhere: no head start there.
    head = None if launches(resolved, shard_only) else HeadStart.pick(resolved, plans, store, bundle=bundle)
    dg: Any = None
    instance: Any = None
    defs: Any = None
    resources: dict[str, Any] = {}

    def dagster_ready() -> None:
        """Import Dagster and open the instance (once); HomeUnusable when it cannot be used."""
        nonlocal dg, instance, resources
        if dg is not None:
            return
        import warnings

        import dagster

        for cat in (dagster.BetaWarning, dagster.PreviewWarning):
            warnings.filterwarnings("ignore", category=cat)
        from nel_assets.factory import build_resources

        try:
            instance = open_instance(home)  # opens (creates) its storage
        except Exception as exc:  # any storage error: nothing has run in Dagster yet
            _log_exception(log_path, f"cannot open the Dagster instance at {home}")
            raise HomeUnusable(home, storage_reason(exc)) from None
        resources = build_resources(resolved, str(store.root),
                                    head.outcomes if head is not None else None)
        dg = dagster

    def ready_defs() -> Any:
        """Dagster ready and the runner's Definitions built (once per process, with the
        launched services' URLs): its jobs are resolved once and executed per partition."""
        nonlocal defs
        dagster_ready()
        if defs is None:
            defs = build_runner_defs(resolved, resources)
        return defs

    if head is None:
        dagster_ready()
    from nel_assets.engine.evaluation import evaluate as ev

    bar = Progress(progress)
    n_runs = 0
    rebuilt: set[str] = set()

    def run(job: str, partition_key: Any, what: str, tags: dict[str, str] | None = None,
            run_id: str | None = None) -> Any:
        nonlocal n_runs
        try:
            r = defs.resolve_job_def(job).execute_in_process(
                instance=instance, partition_key=partition_key, raise_on_error=False,
                run_config=_QUIET_RUN_CONFIG, tags={**run_registry.dagster_tags(), **(tags or {})},
                run_id=run_id)
        except Exception as exc:  # raised by Dagster itself, not by a step
            _log_exception(log_path, f"{what}: the Dagster instance failed")
            raise _RunAborted(f"the Dagster instance at {home} failed: {storage_reason(exc)}") from None
        n_runs += 1
        if not r.success:
            if run_log.interrupted(r):
                # Dagster turns Ctrl-C into a failed step; it must stop the whole run (exit 130).
                raise KeyboardInterrupt
            reason, full = run_log.step_failure(r)
            _append_quietly(log_path, f"{what} failed (Dagster run {r.run_id}): {reason}", full)
            raise _StepFailed(reason, budget=run_log.budget_stopped(r))
        return r

    def fail(bench: str, model: str, reason: str, stage: str) -> None:
        failures.append(BenchFailure(bench, model, reason, stage))

    def register(bench: Any, models: list[str], todo: list[Any]) -> None:
        """Model partitions, planned fingerprints and the dataset partitions the stale
        shards read into the instance (its storage may fail)."""
        from dagster_project.automation import record_dataset_shards, record_planned_shards
        from nel_assets.partitions import MODEL_PARTITIONS

        bench_name = bench.name
        try:
            existing = set(instance.get_dynamic_partitions(MODEL_PARTITIONS.name))
            new = [m for m in models if m not in existing]
            if new:
                instance.add_dynamic_partitions(MODEL_PARTITIONS.name, new)
            # The shards' fingerprints go to Dagster first, so the UI's stale/fresh marks
            # are the runner's own decisions.
            record_planned_shards(instance, bench_name, todo)
            record_dataset_shards(instance, bench, todo, store)
        except Exception as exc:  # the instance's storage, not a benchmark
            _log_exception(log_path, f"{bench_name}: the Dagster instance failed")
            raise _RunAborted(f"the Dagster instance at {home} failed: {storage_reason(exc)}") from None

    if repair_pending:
        n_runs += record_repair.repair_in_run(
            resolved, store, log_path, ready_defs=ready_defs, register=register, run=run,
            jobs_of=jobs_of, step_failed=_StepFailed)

    if record_later is not None and head is not None and head.is_whole_run(
            resolved, plans, artifact_issues, bundle=bundle, merged=bool(merged), shard_only=shard_only):
        bench, tasks, todo = plans[0]
        t = todo[0]
        with bar.task(bench.name, len(t.indices) * bench.repeats) as advance:
            ev.set_progress_hook(advance)
            try:
                head.evaluate(advance, resolved.config_json)
                head.settle()
            except BaseException:
                head.abandon()  # it got the same signal: its journal closes first
                raise
            finally:
                ev.set_progress_hook(None)
        kept = head.results()
        if kept is not None:  # the shard and its bundle are done: only their records are left
            oc = BenchOutcome(bench.name, shards_total=len(tasks), shards_fresh=len(tasks) - len(todo))
            oc.shards_run.append((t.model, t.shard))
            oc.run_reasons[f"{t.model}/{t.shard}"] = t.reason or "--fresh"
            oc.requests_sent += kept[0].requests_sent
            outcomes.append(oc)
            models = sorted({x.model for x in tasks})
            bundle_run = head.bundle_run_id(bench, t.model)
            # Said before the recording starts, unsaid when it ends: a recording cut short is
            # done by the next run here (record_repair).
            record_repair.write_pending(store.root, record_repair.pending_doc(store, bench, t, kept[0]))
            del kept

            def record() -> None:
                """The two runs the command would have executed, with their run ids."""
                with run_log.dagster_logs_to(log_path):
                    ready_defs()
                    register(bench, models, todo)
                    run(jobs_of(bench)["shards"], dg.MultiPartitionKey({"model": t.model, "shard": str(t.shard)}),
                        f"{bench.name} {t.model} shard {t.shard}", run_id=head.run_id)
                    run(jobs_of(bench)["bundle"], t.model, f"{bench.name} {t.model} bundle",
                        run_id=bundle_run)
                record_repair.clear_pending(store.root)

            record_later.defer(record)
            return 2
        # A failed shard or bundle: its runs, executed now as always, report the failure.

    # Launched model servers start only when some shard actually needs them.
    # (A head start is only picked when no service is launched.)
    any_todo = any(todo for _, _, todo in plans) and head is None
    if any_todo:
        from nel_resources.services.launch import launched_services
    with run_log.dagster_logs_to(log_path), (launched_services(resolved, resources, elsewhere) if any_todo else _nothing()):
        pending = list(plans)
        try:
            while pending:
                bench, tasks, todo = pending[0]
                oc = BenchOutcome(bench.name, shards_total=len(tasks), shards_fresh=len(tasks) - len(todo))
                outcomes.append(oc)
                # A model that already failed (e.g. a shard missing from a SLURM merge) gets no bundle.
                failed: set[str] = {f.model for f in failures if f.benchmark == bench.name}
                models = sorted({t.model for t in tasks})
                # cluster.type docker|ray: the stale shards run there first (all at once);
                # each is then recorded in Dagster from what its worker committed.
                launched = (launch_partitions(resolved, store.root, todo, resources, bench, run_job)
                            if todo and launches(resolved, shard_only) else None)
                total_samples = 0 if launched is not None else sum(len(t.indices) for t in todo) * bench.repeats
                with bar.task(bench.name, total_samples) as advance:
                    ev.set_progress_hook(advance)
                    try:
                        if head is not None and head.bench is bench and not head.started:
                            head.evaluate(advance, resolved.config_json)
                        try:
                            defs = ready_defs()  # while a forked head start's shard runs
                        except HomeUnusable as exc:
                            if head is None:
                                raise
                            head.abandon()
                            # After a head start the run is under way (its answers are in the
                            # journal): a home that cannot be opened now fails the run like any
                            # instance failure, one line per pair, not as a usage error.
                            raise _RunAborted(f"the Dagster instance at {home} failed: "
                                              f"{exc.reason}") from None
                        except BaseException:
                            if head is not None:
                                head.abandon()  # it got the same signal: its journal closes first
                            raise
                        if head is not None and head.bench is bench:
                            head.settle()
                        register(bench, models, todo)
                        for t in todo:
                            remote = launched.get((t.model, t.shard)) if launched is not None else None
                            if remote is not None and not remote.ok:
                                _append_quietly(log_path, f"{bench.name} {t.model} shard {t.shard} failed "
                                                f"on cluster.type {resolved.cluster.type}: {remote.error}",
                                                remote.details)
                                if t.model not in failed:  # one error line per (benchmark, model)
                                    fail(bench.name, t.model, str(remote.error), "shard")
                                failed.add(t.model)
                                continue
                            if t.model in failed and remote is None:
                                continue  # one failure per (benchmark, model) is enough
                            key = dg.MultiPartitionKey({"model": t.model, "shard": str(t.shard)})
                            job = jobs_of(bench)["shards"]
                            tags = {LAUNCHED_TAG: resolved.cluster.type} if remote is not None else None
                            try:
                                r = run(job, key, f"{bench.name} {t.model} shard {t.shard}", tags,
                                        run_id=head.run_id if head is not None and head.task is t else None)
                            except _StepFailed as exc:
                                fail(bench.name, t.model, exc.reason, "budget" if exc.budget else "shard")
                                failed.add(t.model)
                                continue
                            oc.shards_run.append((t.model, t.shard))
                            oc.run_reasons[f"{t.model}/{t.shard}"] = t.reason or "--fresh"
                            oc.requests_sent += _metadata_int(r, "requests_sent")
                    finally:
                        ev.set_progress_hook(None)
                # A shard process writes its shard's bundle and files too: NeMo Evaluator's
                # `eval merge` reads each shard_<i>/<bench>/ as its own shard processes leave it.
                changed = {m for m, _ in oc.shards_run} | {m for b, m in merged or () if b == bench.name}
                for m in models if bundle else ():
                    issues = artifact_issues.get((bench.name, m))
                    if m not in failed and (m in changed or issues):
                        try:
                            run(jobs_of(bench)["bundle"], m, f"{bench.name} {m} bundle",
                                run_id=head.bundle_run_id(bench, m) if head is not None else None)
                        except _StepFailed as exc:
                            fail(bench.name, m, exc.reason, "bundle")
                            continue
                        rebuilt.add(m)
                        if issues and m not in changed:
                            oc.artifacts_rebuilt[m] = issues
                if head is not None and head.bench is bench:
                    head.forget_bundle()  # a model that failed or got no bundle run
                pending.pop(0)
            if shard_only is None and bundle and resolved.comparison.baseline:
                n_runs += _compare(resolved, ready_defs(), instance, store, rebuilt, gates, failures, log_path)
        except _RunAborted as exc:
            done = {(f.benchmark, f.model) for f in failures}
            for i, (bench, tasks, _) in enumerate(pending):
                for m in sorted({t.model for t in tasks}):
                    if (bench.name, m) not in done:
                        fail(bench.name, m, exc.reason if i == 0 else f"not run: {exc.reason}", "run")
            if not pending:
                fail("comparison", "*", exc.reason, "comparison")
            outcomes.extend(BenchOutcome(b.name, shards_total=len(t)) for b, t, _ in plans[len(outcomes):])
    return n_runs


def jobs_of(bench: Any) -> dict[str, str]:
    """The runner's job names for a benchmark."""
    from nel_assets.factory import runner_job_names

    return runner_job_names(bench.name)


def _compare(resolved: ResolvedConfig, defs: Any, instance: Any, store: Any, rebuilt: set[str],
             gates: dict[str, dict[str, Any]], failures: list[BenchFailure], log_path: Path) -> int:
    """Materialize each candidate's comparison (and its gate check) when a bundle on either
    side was rebuilt or the comparison is missing. A NO-GO is reported, not raised: the exit
    status follows the verdicts (exit_codes). A candidate whose side failed in this run is
    not compared: a verdict on an incomplete run would mislead."""
    from nel_assets.comparison_assets import comparison_dir
    from nel_assets.engine.results.artifacts import json_problem

    baseline = resolved.comparison.baseline or ""
    candidates = sorted(set(resolved.models) - {baseline})
    runs = 0
    failed = failed_models(failures)
    for m in candidates:
        done = json_problem(comparison_dir(store.root, m) / "regression.json") is None
        if (done and m not in rebuilt and baseline not in rebuilt) or {m, baseline} & failed:
            continue
        try:
            r = defs.resolve_job_def("nel_comparison").execute_in_process(
                instance=instance, partition_key=m, raise_on_error=False, run_config=_QUIET_RUN_CONFIG,
                tags=run_registry.dagster_tags())
        except Exception as exc:  # raised by Dagster itself, not by a step
            _log_exception(log_path, f"comparison of {m}: the Dagster instance failed")
            raise _RunAborted(f"the Dagster instance failed: {storage_reason(exc)}") from None
        runs += 1
        evals = r.get_asset_check_evaluations()
        if not r.success and run_log.interrupted(r):
            raise KeyboardInterrupt
        if not evals and not r.success:
            reason, full = run_log.step_failure(r)
            _append_quietly(log_path, f"comparison of {m} failed (Dagster run {r.run_id}): {reason}", full)
            failures.append(BenchFailure("comparison", m, reason, "comparison"))
            continue
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
