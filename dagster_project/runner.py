"""Drive the asset graph in-process on a persistent Dagster instance (what `nel eval run`
does): materialize only the (model, shard) partitions that are missing or stale, then the
bundles and reports of the models that changed.

The instance lives with the output (`<output>/.dagster` unless `output.dagster_home` or
`DAGSTER_HOME` says otherwise), so `dagster dev` on the same home shows every CLI run.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.errors import NelError
from dagster_project import exit_codes, run_log, run_registry
from dagster_project.checkpoint import BenchFailure, checkpoint_doc, checkpoint_path
from dagster_project.instance_config import open_instance, write_instance_yaml
from dagster_project.output_lock import OutputLock
from nel_resources.checks import check_schema, check_supported
from nel_resources.config import ConfigError, NelConfig
from nel_resources.specs import ResolvedConfig, resolve


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

    from nel_resources.endpoint_url import redact_url
    from nel_resources.redact import REDACTED, is_secret_header

    data = cfg.model_dump(mode="json", exclude_defaults=True)
    data.setdefault("output", {})["dir"] = str(out)
    # The seed that picked the items is written out even when it is the default: the file
    # must select the same items wherever NEL_SHUFFLE_SEED says otherwise.
    for entry, bench in zip(data.get("benchmarks", []), cfg.benchmarks, strict=True):
        entry["shuffle_seed"] = bench.shuffle_seed
    for name, svc in data.get("services", {}).items():
        if svc.pop("api_key", None):
            print(f"warning: services.{name}.api_key is written literally, so "
                  f"{out / 'nel-config.yaml'} leaves it out: write api_key: ${{VAR}} (or "
                  "api_key_env) so runs started from that file authenticate", file=sys.stderr)
        if svc.get("url") and (url := redact_url(svc["url"])) != svc["url"]:
            svc["url"] = url
            print(f"warning: services.{name}.url carries credentials (user-info or a query "
                  f"string), redacted in nel-config.yaml: runs started from that file need "
                  f"-O services.{name}.url=...", file=sys.stderr)
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
    write_instance_yaml(path)  # SQLite here, or the shared Postgres instance when selected
    return path


# The CLI shows its own progress, summary and one `error:` line per failure: Dagster's
# console logger stays silent (a failed step would print its ERROR lines and traceback);
# failures go to the run log (run_log) and everything is still in the instance's event log.
_QUIET_RUN_CONFIG = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


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
    # model -> what was missing or torn in its bundle/report/exports (rebuilt from the store)
    artifacts_rebuilt: dict[str, list[str]] = field(default_factory=dict)
    # "model/shard" -> why it ran (the planner's reason, e.g. "3 failed samples to retry")
    run_reasons: dict[str, str] = field(default_factory=dict)


@dataclass
class RunSummary:
    """The result of `run_eval`."""

    output_dir: Path
    dagster_home: Path
    benchmarks: list[BenchOutcome]
    elapsed_s: float
    dagster_runs: int
    gates: dict[str, dict[str, Any]] = field(default_factory=dict)
    failures: list[BenchFailure] = field(default_factory=list)
    log_path: Path | None = None
    checkpoint_path: Path | None = None

    @property
    def exit_status(self) -> int:
        """The status `nel eval run` exits with (see dagster_project.exit_codes)."""
        return exit_codes.eval_run_status(len(self.failures), (g.get("decision") for g in self.gates.values()))


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


class _StepFailed(Exception):
    """A Dagster run for one (benchmark, model) failed; `reason` is one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _RunAborted(Exception):
    """The Dagster instance itself failed (e.g. its disk is full): no further run can work."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _HomeUnusable(NelError):
    """The Dagster instance cannot be opened at `home` (one line; exit 2 when nothing ran)."""

    def __init__(self, home: Path, reason: str) -> None:
        super().__init__(f"cannot use the Dagster home {home}: {reason}")
        self.reason = reason


def _os_reason(exc: OSError) -> str:
    """`strerror` and a hint for the errors a user can fix where nel writes."""
    import errno

    text = exc.strerror or str(exc)
    hints = {errno.ENOSPC: "free some space or write elsewhere",
             errno.EROFS: "the file system is mounted read-only; write elsewhere",
             errno.EACCES: "no permission to write there; write elsewhere",
             errno.EDQUOT: "the disk quota is exceeded; free some space or write elsewhere"}
    hint = hints.get(exc.errno or 0)
    return f"{text} ({hint})" if hint else text


def _storage_reason(exc: BaseException) -> str:
    """One line for an exception from the Dagster instance's storage."""
    if isinstance(exc, OSError):
        return _os_reason(exc)
    line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if "disk is full" in line or "No space left" in line:
        line += " (free some space or set output.dagster_home to another disk)"
    elif "disk I/O error" in line or "readonly database" in line:
        # SQLite reports a write that hit a full or read-only disk this way.
        line += " (is the Dagster home's disk full or read-only? free space or set output.dagster_home)"
    return f"{type(exc).__name__}: {line}"


def prepare_output(cfg: NelConfig, lock: OutputLock | None = None) -> tuple[Path, Path]:
    """Create the output directory and the Dagster home; NelError (one line, exit 2) when
    either cannot be used (a file in the way, a read-only or full disk). Nothing has run yet.
    `lock` is taken on the directory before anything is written into it."""
    out = Path(cfg.output.dir).expanduser().resolve()
    if out.exists() and not out.is_dir():
        raise NelError(f"the output directory {out} is a file: give -o / output.dir a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise NelError(f"cannot create the output directory {out}: {_os_reason(exc)}") from None
    if lock is not None:
        lock.acquire(out)
    home = Path(cfg.output.dagster_home or out / ".dagster").expanduser().resolve()
    if home.exists() and not home.is_dir():
        raise NelError(f"the Dagster home {home} is a file: set output.dagster_home to a directory")
    try:
        home = dagster_home_for(cfg)
    except OSError as exc:
        raise NelError(f"cannot use the Dagster home {home}: {_os_reason(exc)}") from None
    try:
        save_effective_config(cfg, out)
        run_log.append(run_log.log_path_for(out), f"nel eval run: output {out}, Dagster home {home}")
    except OSError as exc:
        raise NelError(f"cannot write to the output directory {out}: {_os_reason(exc)}") from None
    return out, home


def _preflight_sandboxes(resolved: ResolvedConfig) -> None:
    """Each benchmark's sandbox can start here (a docker image in the engine, ...), checked
    before the first model request of the run, not when its first sample is scored."""
    from nel_resources.sandboxes.base import SandboxError
    from nel_resources.sandboxes.factory import preflight as sandbox_preflight

    seen: set[str] = set()
    for bench in resolved.benchmarks:
        sb = bench.sandbox
        if sb is None:
            continue
        key = sb.model_dump_json()
        if key in seen:
            continue
        seen.add(key)
        try:
            sandbox_preflight(sb)
        except SandboxError as exc:
            raise ConfigError(f"benchmark {bench.name}: {exc}") from None


def validate_before_run(cfg: NelConfig) -> ResolvedConfig:
    """Every check a run makes before it writes or sends anything; `nel eval run` and
    `nel eval run --dry-run` both call it, so a dry run accepts exactly what a run accepts.

    Returns:
        The config resolved into run specs.

    Raises:
        NelError: (ConfigError or UnknownBenchmarkError) one line naming what to fix.
    """
    check_schema(cfg)  # a config loaded without the load-time checks (a saved one) too
    check_supported(cfg)  # keys nel cannot honour yet are refused, in a dry run too
    from benchmarks.datasets import set_allow_downloads, set_data_dir

    set_allow_downloads(cfg.allow_downloads)
    if cfg.data_dir:
        set_data_dir(cfg.data_dir)
    from benchmarks import get_factory
    from benchmarks.plugins import load_module

    # Unknown benchmark names fail with suggestions before anything else.
    for bench in cfg.benchmarks:
        if bench.module:
            load_module(bench.module)
        if bench.name.startswith("container://"):
            pass  # a harness image; check_supported checked it is in the local engine
        elif not bench.name.startswith("gym://"):
            if getattr(get_factory(bench.name), "needs_task_files", False):
                from dagster_project.agent_benchmarks import check_agent_benchmark

                check_agent_benchmark(cfg, bench)
        else:
            from benchmarks.remote import check_gym_benchmark

            ignored = check_gym_benchmark(bench.name, bench.params)  # its query and rows file
            if ignored:
                print(f"warning: {bench.name}: the rows set {', '.join(ignored)} in "
                      "responses_create_params; nel sends the service's generation settings "
                      "to every row instead", file=sys.stderr)
    # Scoring configs that cannot run (a judge-graded benchmark without a judge, a judge on
    # the solver's own service) make the config invalid: one line, before any Dagster run.
    # Resolving checks every name (services, judges) the same way.
    from nel_assets.engine.judging import check_scoring
    from nel_assets.engine.sandboxing import check_sandbox

    resolved = resolve(cfg)
    seen: set[str] = set()
    for bench_spec in resolved.benchmarks:  # found by the asset factory only after a run began
        if bench_spec.asset_name in seen:
            raise NelError(f"benchmark {bench_spec.name!r} appears twice in the config; merge "
                           "the entries (list several services under `service:`)")
        seen.add(bench_spec.asset_name)
    for bench_spec in resolved.benchmarks:
        for run in bench_spec.runs:
            check_scoring(run)
            check_sandbox(run)  # a benchmark that runs model code has a sandbox
            # A key variable that is not set is a config error too (not one pair's failure).
            run.service.config.resolved_api_key()
    from nel_resources.specs import self_judging_warnings

    for line in self_judging_warnings(resolved):
        print(line, file=sys.stderr)
    return resolved


def is_config_error(bench: str, exc: BaseException) -> bool:
    """Whether a planning failure is the config's fault (an unknown parameter, a bad
    language list): the whole run is refused with it, before any request. Missing data,
    an empty selection and remote environments (gym://, container://) fail their
    benchmark alone."""
    from benchmarks.errors import BenchmarkConfigError

    return isinstance(exc, BenchmarkConfigError) and not bench.startswith(("gym://", "container://"))


def run_eval(cfg: NelConfig | ResolvedConfig, *, resume: bool = True, progress: bool = True,
             shard_only: tuple[int, int] | None = None,
             only: set[tuple[str, str, int]] | None = None,
             merge_only: set[tuple[str, str]] | None = None,
             elsewhere: Mapping[str, str | None] | None = None,
             wait: bool = False) -> RunSummary:
    """Evaluate every benchmark × service of `cfg`, running only stale partitions.

    A failure of one (benchmark, model) (missing data, a dead or refusing endpoint, a
    failed step) is recorded and the others still run; the summary's `failures` and
    `<out>/checkpoint.json` list them, tracebacks go to `<out>/logs/nel-run.log`.

    Args:
        cfg: the validated config, or its resolved specs (it is resolved once, here).
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

    Raises:
        NelError: the config or output location cannot work at all (nothing ran).
        OutputBusyError: another run is using the output directory (and not `wait`).
    """
    from nel_assets.engine import evaluate as ev
    from nel_resources.store import ResultStore

    given = cfg if isinstance(cfg, ResolvedConfig) else None
    cfg = given.config if given is not None else cfg
    # Every config check (unbuilt features included) before anything is written.
    checked = validate_before_run(cfg)
    resolved = given if given is not None else checked
    from dagster_project.cluster_launch import launches, preflight

    if launches(resolved, shard_only):
        preflight(resolved)  # cluster.type docker|ray: reachable, image built; one line if not
    _preflight_sandboxes(resolved)
    started = time.time()
    t0 = time.perf_counter()
    # One run per output directory (output_lock.py): two at once each sent every request.
    lock = None if (shard_only is not None or only is not None or merge_only is not None) \
        else OutputLock(wait=wait)
    try:
        out, home = prepare_output(cfg, lock)
        os.environ["DAGSTER_HOME"] = str(home)
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
            try:
                tasks = ev.plan(store, bench)
            except Exception as exc:  # isolate: the other benchmarks still run
                if is_config_error(bench.name, exc):
                    raise  # every plan comes before any request: nothing has been sent
                reason = run_log.one_line(type(exc).__name__, str(exc))
                _log_exception(log_path, f"{bench.name}: planning failed: {reason}")
                failures += [BenchFailure(bench.name, m, reason, "plan") for m in bench.models]
                continue
            tasks = _drop_empty_models(bench.name, tasks, failures)
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
        needs_compare = not sub_run and bool(resolved.comparison.baseline) and _missing_comparisons(resolved, store)
        needs_dagster = needs_bundle or needs_compare or any(todo for _, _, todo in plans) or bool(merge_only)

        n_runs = 0
        outcomes: list[BenchOutcome] = []
        gates: dict[str, dict[str, Any]] = {}
        if needs_dagster:
            try:
                n_runs = _materialize(resolved, store, home, plans, progress=progress,
                                      shard_only=shard_only,
                                      outcomes=outcomes, gates=gates, failures=failures, log_path=log_path,
                                      artifact_issues=artifact_issues, bundle=only is None,
                                      merged=merge_only or set(), elsewhere=elsewhere or {})
            except OSError as exc:
                # Mid-run (the output's disk filled, a file became unwritable): what is stored
                # stays; the run ends as failed with one line, not a traceback.
                _log_exception(log_path, "the run stopped on an OS error")
                where = f"{exc.filename}: " if exc.filename else ""
                failures.append(BenchFailure("*", "*", f"the run stopped: {where}{_os_reason(exc)}", "run"))
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
                        if (why := _all_samples_failed(bundle)) is not None:
                            failures.append(BenchFailure(bench.name, m, why, "scores"))
        if resolved.comparison.baseline and not sub_run and not gates:
            gates = _stored_gates(resolved, store, _failed_models(failures))
        summary = RunSummary(out, home, outcomes, time.perf_counter() - t0, n_runs, gates,
                             failures=failures, log_path=log_path)
        if only is None:  # an array task leaves the run's files to the merge job
            _write_run_reports(cfg.output.report, store, summary)
            summary.checkpoint_path = _write_checkpoint(summary, started)
        run_registry.finished(summary.exit_status, len(summary.failures))
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


def _drop_empty_models(bench: str, tasks: list[Any], failures: list[BenchFailure]) -> list[Any]:
    """A model with no problem to evaluate (max_problems / problem_range select none) is a
    failure, not a silent success; its tasks are dropped."""
    if bench.startswith("container://"):
        return tasks  # the harness image picks its own problems
    models = {t.model for t in tasks}
    empty = sorted(m for m in models if not any(t.indices for t in tasks if t.model == m))
    for m in empty:
        failures.append(BenchFailure(bench, m, "nothing to evaluate: no problem selected "
                                     "(check max_problems / problem_range)", "plan"))
    return [t for t in tasks if t.model not in empty]


def _all_samples_failed(bundle: dict[str, Any]) -> str | None:
    """A one-line reason when no sample of a bundle could be scored, else None."""
    s = bundle.get("score") or {}
    n_failed = int(s.get("n_failed_samples") or 0)
    if s.get("n_samples") or not n_failed:
        return None
    first = ""
    for cat in (bundle.get("failures") or {}).get("categories", {}).values():
        for ex in cat.get("examples", []):
            if ex.get("error"):
                first = str(ex["error"]).strip().splitlines()[0][:200]
                break
        if first:
            break
    return f"every sample failed ({n_failed} of {n_failed})" + (f"; first error: {first}" if first else "")


def _failed_models(failures: list[BenchFailure]) -> set[str]:
    return {f.model for f in failures}


def _write_checkpoint(summary: RunSummary, started: float) -> Path | None:
    """Write `<out>/checkpoint.json`; a write error becomes one more failure."""
    from nel_resources.store import write_json_atomic

    completed = []
    for oc in summary.benchmarks:
        for m, b in sorted(oc.bundles.items()):
            s = b.get("score") or {}
            # `bundle_path` is the benchmark's folder, as NeMo Evaluator records it (its
            # --resume reads the eval-*.json there); nel's own bundle file is `nel_bundle_path`.
            completed.append({"name": oc.benchmark, "model": m,
                              "bundle_path": oc.exports.get(m) or str(summary.output_dir / oc.benchmark),
                              "nel_bundle_path": str(
                                  summary.output_dir / oc.benchmark / "bundle" / f"model={m}" / "bundle.json"),
                              "score": s.get("mean"),
                              "n_samples": s.get("n_samples"), "n_failed_samples": s.get("n_failed_samples")})
    failed_pairs = {(f.benchmark, f.model) for f in summary.failures}
    completed = [c for c in completed if (c["name"], c["model"]) not in failed_pairs]
    path = checkpoint_path(summary.output_dir)
    doc = checkpoint_doc(started_at=started, finished_at=time.time(), completed=completed,
                         failed=summary.failures, gates=summary.gates,
                         exit_status=summary.exit_status, log=summary.log_path or Path())
    try:
        write_json_atomic(path, doc)
    except OSError as exc:
        summary.failures.append(BenchFailure("*", "*", f"cannot write {path}: {_os_reason(exc)}", "run"))
        return None
    return path


def _write_run_reports(formats: list[str], store: Any, summary: RunSummary) -> None:
    """`<out>/report.<ext>` per `output.report` format over every bundle in the output
    directory, as NeMo Evaluator writes them after a run; a write error is one more failure."""
    from nel_assets.engine.reports import EXTENSIONS, collect, render
    from nel_resources.store import write_text_atomic

    if not formats:
        return
    bundles, details = collect(store, with_samples="html" in formats)
    if not bundles:
        return
    for fmt in formats:
        path = summary.output_dir / f"report.{EXTENSIONS[fmt]}"
        try:
            write_text_atomic(path, render(fmt, bundles, details=details))
        except OSError as exc:
            summary.failures.append(BenchFailure("*", "*", f"cannot write {path}: {_os_reason(exc)}", "run"))


def _missing_comparisons(resolved: ResolvedConfig, store: Any) -> bool:
    from nel_assets.comparison_assets import comparison_dir
    from nel_assets.engine.artifacts import json_problem

    baseline = resolved.comparison.baseline
    return any(json_problem(comparison_dir(store.root, m) / "regression.json") is not None
               for m in resolved.models if m != baseline)


def _stored_gates(resolved: ResolvedConfig, store: Any, failed: set[str]) -> dict[str, dict[str, Any]]:
    """The gate decisions already on disk (an up-to-date rerun reports them too), except for
    candidates compared against a side that failed in this run."""
    from nel_assets.comparison_assets import comparison_dir
    from nel_assets.engine.artifacts import read_json

    out: dict[str, dict[str, Any]] = {}
    baseline = resolved.comparison.baseline or ""
    if baseline in failed:
        return out
    for b in resolved.benchmarks:
        for m in b.models:
            p = comparison_dir(store.root, m) / "regression.json"
            doc = read_json(p) if m != baseline and m not in out and m not in failed else None
            if isinstance(doc, dict):
                g = doc.get("gate") or {}
                out[m] = {"decision": g.get("decision"), "baseline": baseline, "details": {}}
    return out


def build_runner_defs(resolved: ResolvedConfig, resources: dict[str, Any]) -> Any:
    """Definitions for the runner: the benchmark assets, the comparison asset and gate
    check when a baseline is configured, and the jobs the runner executes."""
    import dagster as dg

    from nel_assets.comparison_assets import COMPARISON_KEY, build_comparison_assets
    from nel_assets.factory import MODEL_PARTITIONS, build_assets, build_runner_jobs

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
                 elsewhere: Mapping[str, str | None] | None = None) -> int:
    """Materialize the stale partitions of every benchmark; returns the number of runs.

    A failed run fails its (benchmark, model) alone (recorded in `failures`, its traceback
    in the run log); a failure of the Dagster instance itself stops every further run."""
    # The first stale shard starts before Dagster is imported (see _HeadStart); Dagster's
    # imports, instance and definitions come after it, or at once when there is no head start.
    from dagster_project.cluster_launch import LAUNCHED_TAG, launch_partitions, launches

    # cluster.type docker|ray runs every stale shard elsewhere: no head start there.
    head = None if launches(resolved, shard_only) else _HeadStart.pick(resolved, plans, store, bundle=bundle)
    dg: Any = None
    instance: Any = None
    defs: Any = None
    resources: dict[str, Any] = {}

    def dagster_ready() -> None:
        """Import Dagster and open the instance (once); _HomeUnusable when it cannot be used."""
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
            raise _HomeUnusable(home, _storage_reason(exc)) from None
        resources = build_resources(resolved, str(store.root))
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
    from nel_assets.engine import evaluate as ev
    from nel_resources.store import write_json_atomic

    bar = _Progress(progress)
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
            raise _RunAborted(f"the Dagster instance at {home} failed: {_storage_reason(exc)}") from None
        n_runs += 1
        if not r.success:
            if run_log.interrupted(r):
                # Dagster turns Ctrl-C into a failed step; it must stop the whole run (exit 130).
                raise KeyboardInterrupt
            reason, full = run_log.step_failure(r)
            _append_quietly(log_path, f"{what} failed (Dagster run {r.run_id}): {reason}", full)
            raise _StepFailed(reason)
        return r

    def fail(bench: str, model: str, reason: str, stage: str) -> None:
        failures.append(BenchFailure(bench, model, reason, stage))

    def register(bench_name: str, models: list[str], todo: list[Any]) -> None:
        """Model partitions and planned fingerprints into the instance (its storage may fail)."""
        from dagster_project.automation import record_planned_shards
        from nel_assets.factory import MODEL_PARTITIONS

        try:
            existing = set(instance.get_dynamic_partitions(MODEL_PARTITIONS.name))
            new = [m for m in models if m not in existing]
            if new:
                instance.add_dynamic_partitions(MODEL_PARTITIONS.name, new)
            # The shards' fingerprints go to Dagster first, so the UI's stale/fresh marks
            # are the runner's own decisions.
            record_planned_shards(instance, bench_name, todo)
        except Exception as exc:  # the instance's storage, not a benchmark
            _log_exception(log_path, f"{bench_name}: the Dagster instance failed")
            raise _RunAborted(f"the Dagster instance at {home} failed: {_storage_reason(exc)}") from None

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
                version_file = store.dataset_path(bench.name).with_name("_version.json")
                version = ev.dataset_version(tasks)
                stored = json.loads(version_file.read_text()) if version_file.exists() else {}
                refresh_dataset = bool(todo) and stored.get("version") != version
                # cluster.type docker|ray: the stale shards run there first (all at once);
                # each is then recorded in Dagster from what its worker committed.
                launched = (launch_partitions(resolved, store.root, todo, resources, bench)
                            if todo and launches(resolved, shard_only) else None)
                total_samples = 0 if launched is not None else sum(len(t.indices) for t in todo) * bench.repeats
                with bar.task(bench.name, total_samples) as advance:
                    ev.set_progress_hook(advance)
                    try:
                        if head is not None and head.bench is bench:
                            head.evaluate(advance, resolved.config_json)
                        try:
                            defs = ready_defs()
                        except _HomeUnusable as exc:
                            if head is None:
                                raise
                            # After a head start the run is under way (its answers are in the
                            # journal): a home that cannot be opened now fails the run like any
                            # instance failure, one line per pair, not as a usage error.
                            raise _RunAborted(f"the Dagster instance at {home} failed: "
                                              f"{exc.reason}") from None
                        register(bench.name, models, todo)
                        for t in todo:
                            remote = launched.get((t.model, t.shard)) if launched is not None else None
                            if remote is not None and not remote.ok:
                                _append_quietly(log_path, f"{bench.name} {t.model} shard {t.shard} failed "
                                                f"on cluster.type {resolved.config.cluster.type}: {remote.error}",
                                                remote.details)
                                if t.model not in failed:  # one error line per (benchmark, model)
                                    fail(bench.name, t.model, str(remote.error), "shard")
                                failed.add(t.model)
                                continue
                            if t.model in failed and remote is None:
                                continue  # one failure per (benchmark, model) is enough
                            key = dg.MultiPartitionKey({"model": t.model, "shard": str(t.shard)})
                            # A head start that failed fails its run at the shard step, with its
                            # own error: the dataset is seeded by the next run (a full disk must
                            # be reported as the journal's, not as the dataset write after it).
                            seed = refresh_dataset and not (head is not None and head.task is t and head.failed)
                            job = jobs_of(bench)["dataset_shards"] if seed else jobs_of(bench)["shards"]
                            tags = {LAUNCHED_TAG: resolved.config.cluster.type} if remote is not None else None
                            try:
                                r = run(job, key, f"{bench.name} {t.model} shard {t.shard}", tags,
                                        run_id=head.run_id if head is not None and head.task is t else None)
                            except _StepFailed as exc:
                                fail(bench.name, t.model, exc.reason, "shard")
                                failed.add(t.model)
                                continue
                            if refresh_dataset:
                                write_json_atomic(version_file, {"version": version})
                                refresh_dataset = False
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


class _HeadStart:
    """The first stale shard of a run, evaluated before Dagster is imported.

    Importing Dagster, opening its instance and building the definitions cost about a second
    before the first request. So the runner evaluates this shard first, with the engine alone,
    and keeps the outcome for the Dagster run it then executes for that partition with the
    run id chosen here: that run's step takes the outcome (nel_assets.engine.head_start) and
    records the same materialization, metadata and data version, or fails the same way.

    Dagster is imported after the shard, not in a thread during it: an import holding the GIL
    made the event loop wait a switch interval (5 ms) at every turn, which cost a 10,552-sample
    run 40% of its wall time; and the shard's rows are freed before Dagster's memory is taken.

    Only for shards that need nothing Dagster provides: no launched model server (its URL
    comes from the launch) and no sandbox (a Dagster resource).

    When the shard is its model's only stale one and the run builds bundles, the model's
    bundle is built right after it, before Dagster too, for the bundle run whose id is chosen
    here (`head_start.keep_bundle`). Same files, metadata and data version as when the run's
    step builds it; the gain is memory: the bundle's working set (rows, export batches) is
    gone before Dagster's imports (~70 MB) arrive, instead of coming on top of them.
    """

    def __init__(self, bench: Any, task: Any, run: Any, store: Any, *, with_bundle: bool) -> None:
        import uuid

        self.bench, self.task, self.run, self.store = bench, task, run, store
        self.run_id = str(uuid.uuid4())
        self.failed = False
        self.with_bundle = with_bundle
        self._bundle_run_id: str | None = None  # set once a bundle (or its error) is kept

    @classmethod
    def pick(cls, resolved: ResolvedConfig, plans: list[tuple[Any, list[Any], list[Any]]],
             store: Any, *, bundle: bool = True) -> _HeadStart | None:
        """The head start of this run, or None (Dagster first, as before). `bundle`: whether
        the run builds bundles at all (not for `--only` stages)."""
        from nel_resources.config.services import LAUNCHED_TYPES

        if os.environ.get("NEL_NO_HEAD_START") or not plans or not plans[0][2]:
            return None
        if any(resolved.services[s].config.type in LAUNCHED_TYPES for s in resolved.used_services):
            return None
        bench, _, todo = plans[0]
        run = bench.run_for(todo[0].model)
        if run is None or bench.sandbox is not None:
            return None
        model = todo[0].model
        only_stale = sum(1 for t in todo if t.model == model) == 1
        return cls(bench, todo[0], run, store, with_bundle=bundle and only_stale)

    def evaluate(self, advance: Callable[[int], None] | None, config_json: str | None) -> None:
        """Evaluate the shard now and keep its outcome (or its error) for the Dagster run;
        then, when it is the model's only stale shard, build and keep the model's bundle."""
        from nel_assets.engine import evaluate as ev
        from nel_assets.engine import head_start

        key = (self.bench.name, self.task.model, self.task.shard, self.run_id[:12])
        try:
            out = ev.evaluate_shard(self.run, self.store, self.task.shard, run_id=self.run_id[:12],
                                    base_url=self.run.service.config.url, on_progress=advance)
        except Exception as exc:  # the Dagster run's step raises it, as if it had run the shard
            head_start.keep(*key, error=exc)
            self.failed = True
            return
        head_start.keep(*key, outcome=out)
        del out
        if not self.with_bundle:
            return
        import uuid

        run_id = str(uuid.uuid4())
        try:
            built = ev.build_model_bundle(self.run, self.store, self.bench.name, self.task.model,
                                          config_json=config_json)
        except Exception as exc:  # the bundle run's step raises it, as if it had built it
            head_start.keep_bundle(self.bench.name, self.task.model, run_id, error=exc)
        else:
            head_start.keep_bundle(self.bench.name, self.task.model, run_id, outcome=built)
            del built
        self._bundle_run_id = run_id
        # What the shard and bundle freed goes back to the OS before Dagster's imports
        # allocate theirs: without it the peak held both (212 against 197 MB, 10,552 rows).
        from nel_resources import heap

        heap.give_back_freed()

    def bundle_run_id(self, bench: Any, model: str) -> str | None:
        """The run id to give (bench, model)'s bundle run: the one its kept bundle waits
        for, or None (the run's step builds the bundle itself)."""
        if bench is not self.bench or model != self.task.model or self._bundle_run_id is None:
            return None
        run_id, self._bundle_run_id = self._bundle_run_id, None
        return run_id

    def forget_bundle(self) -> None:
        """Drop a kept bundle no run took (its model failed, or got no bundle run)."""
        if self._bundle_run_id is not None:
            from nel_assets.engine import head_start

            head_start.discard(self._bundle_run_id)
            self._bundle_run_id = None


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
    from nel_assets.engine.artifacts import json_problem

    baseline = resolved.comparison.baseline or ""
    candidates = sorted(set(resolved.models) - {baseline})
    runs = 0
    failed = _failed_models(failures)
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
            raise _RunAborted(f"the Dagster instance failed: {_storage_reason(exc)}") from None
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
