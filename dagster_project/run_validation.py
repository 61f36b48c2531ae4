"""`validate_before_run`: the one path from a loaded config to resolved run specs.

`nel eval run`, `--dry-run`, the Dagster definitions (`dagster dev`, jobs, sensors) and the
daemon all call it, so each accepts and refuses exactly the configs the others do, with the
same one-line message.
"""

from __future__ import annotations

import dataclasses
import sys

from benchmarks.errors import NelError
from benchmarks.uri_schemes import is_uri
from nel_resources.checks import check_schema, check_supported
from nel_resources.config import ConfigError, NelConfig
from nel_resources.specs import ResolvedConfig, resolve


def preflight_sandboxes(resolved: ResolvedConfig) -> None:
    """Each benchmark's sandbox can start here (a docker image in the engine, ...), checked
    before the first model request of the run, not when its first sample is scored. A
    sandbox that cannot start refuses the run (a setup mistake to fix before anything is
    sent), in a suite too."""
    from nel_resources.sandboxes.base import SandboxError
    from nel_resources.sandboxes.factory import preflight as sandbox_preflight

    seen: set[str] = set()
    for bench in resolved.benchmarks:
        sb = bench.sandbox
        if sb is None or bench.name in resolved.unrunnable:
            continue
        key = sb.model_dump_json()
        if key in seen:
            continue
        seen.add(key)
        try:
            sandbox_preflight(sb)
        except SandboxError as exc:
            raise ConfigError(f"benchmark {bench.name}: {exc}") from None


def _check_solver_types(cfg: NelConfig) -> None:
    """A `solver.type` outside NeMo Evaluator's names is one of nel's registered solvers
    (nel_assets.engine.solvers.factory.SOLVERS: a new solver is a module and one line there)."""
    from nel_resources.config.benchmarks import NEMO_SOLVER_TYPES

    for i, bench in enumerate(cfg.benchmarks):
        if bench.solver.type in NEMO_SOLVER_TYPES:
            continue  # built, or refused by name by check_supported
        from nel_assets.engine.solvers.factory import SOLVERS

        if bench.solver.type not in SOLVERS:
            line = cfg.line_of("benchmarks", i, "solver", "type") or "?"
            raise ConfigError(f"{cfg._where}:{line}: benchmarks.{i}.solver.type: "
                              f"{SOLVERS.unknown(bench.solver.type)}")


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
    from benchmarks import get_factory
    from nel_resources.run_settings import apply_run_settings

    apply_run_settings(cfg)  # BYOB modules loaded: their benchmarks are known below
    # Unknown benchmark names fail with suggestions before anything else.
    for bench in cfg.benchmarks:
        if is_uri(bench.name, "container"):
            pass  # a harness image; check_supported checked it is in the local engine
        elif not is_uri(bench.name, "gym"):
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
    _check_solver_types(cfg)
    # Scoring configs that cannot run (a judge-graded benchmark without a judge, a judge on
    # the solver's own service) make the config invalid: one line, before any Dagster run.
    # Resolving checks every name (services, judges) the same way.
    from nel_assets.engine.evaluation.judging import MissingJudgeError, check_scoring
    from nel_assets.engine.evaluation.sandboxing import check_sandbox
    from nel_assets.engine.solvers.loglikelihood_check import check_loglikelihood

    resolved = resolve(cfg)
    seen: set[str] = set()
    for bench_spec in resolved.benchmarks:  # found by the asset factory only after a run began
        if bench_spec.asset_name in seen:
            raise NelError(f"benchmark {bench_spec.name!r} appears twice in the config; merge "
                           "the entries (list several services under `service:`)")
        seen.add(bench_spec.asset_name)
    unrunnable: dict[str, str] = {}
    for bench_spec in resolved.benchmarks:
        for run in bench_spec.runs:
            try:
                check_scoring(run)
            except MissingJudgeError as exc:
                if len(resolved.benchmarks) == 1:
                    raise  # nothing else would run: the config is refused, nothing is sent
                # A suite isolates a benchmark that cannot run as written (NeMo Evaluator's
                # walkthrough): it fails alone. A mistake in the config (an unknown scorer
                # option) is still refused whole.
                unrunnable.setdefault(bench_spec.name, str(exc))
            check_sandbox(run)  # a benchmark that runs model code has a sandbox
            check_loglikelihood(run)  # log-probability scoring: a completions service
            # A key variable that is not set is a config error too (not one pair's failure).
            run.service.config.resolved_api_key()
    if unrunnable:
        if len(unrunnable) == len(resolved.benchmarks):
            raise NelError(next(iter(unrunnable.values())))
        for name, why in unrunnable.items():
            print(f"warning: {name} cannot run as configured and fails alone (the other "
                  f"benchmarks run): {why}", file=sys.stderr)
        resolved = dataclasses.replace(resolved, unrunnable=unrunnable)
    from nel_resources.specs import dropped_by_nemo_prompts, self_judging_warnings

    for line in [*self_judging_warnings(resolved), *dropped_by_nemo_prompts(cfg)]:
        print(line, file=sys.stderr)
    return resolved


def is_config_error(bench: str, exc: BaseException) -> bool:
    """Whether a planning failure is the config's fault (an unknown parameter, a bad
    language list): the whole run is refused with it, before any request. Missing data,
    an empty selection and remote environments (gym://, container://) fail their
    benchmark alone."""
    from benchmarks.errors import BenchmarkConfigError

    return isinstance(exc, BenchmarkConfigError) and not is_uri(bench, "gym", "container")
