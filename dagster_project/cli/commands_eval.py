"""`nel eval run` (`nel list` is in commands_list)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

# The `eval` subcommand group; other command modules add `eval report`, `eval merge`.
EVAL_SUBPARSERS: argparse._SubParsersAction | None = None


def register(sub: argparse._SubParsersAction) -> None:
    """Add `eval run`."""
    global EVAL_SUBPARSERS
    ev = sub.add_parser("eval", help="run evaluations and work with their results")
    evsub = ev.add_subparsers(dest="eval_command", metavar="EVAL_COMMAND")
    EVAL_SUBPARSERS = evsub

    from dagster_project import exit_codes

    run = evsub.add_parser("run", help="evaluate a model on benchmarks (config file or flags)",
                           description="Materialize the evaluation asset graph in-process; only "
                           "missing or stale (model, shard) partitions run. A benchmark that fails "
                           "for a model is recorded (<out>/checkpoint.json, one `error:` line, its "
                           "traceback in <out>/logs/nel-run.log) and the others still run.",
                           epilog=exit_codes.epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("config", nargs="?", help="YAML config (services, benchmarks, cluster, output)")
    run.add_argument("-b", "--bench", action="append", default=[],
                     help="benchmark name, or a BYOB file FILE.py[:NAME] (repeatable); with a "
                     "config, selects from it")
    run.add_argument("-n", "--repeats", type=int, help="samples per problem")
    run.add_argument("-m", "--max-problems", type=int,
                     help="evaluate N problems: the first N of a permutation seeded by "
                     "shuffle_seed (42), as NeMo Evaluator picks them; --first-n keeps dataset order")
    run.add_argument("--problem-range", help="START:END problem indices")
    run.add_argument("--model-url", help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 "
                     "(default: $NEMO_MODEL_URL)")
    run.add_argument("--model-id", help="model name sent in requests (default: $NEMO_MODEL_ID)")
    run.add_argument("--api-key", help="API key (prefer --api-key-env; without either, flag "
                     "runs read $NEMO_API_KEY, then $NVIDIA_API_KEY)")
    run.add_argument("--api-key-env", help="name of the environment variable holding the API key")
    run.add_argument("--protocol", choices=["chat_completions", "completions", "responses"])
    run.add_argument("--system-prompt", help="system prompt sent with every request (not "
                     "with --prompt-set nemo's built-ins, which send NeMo Evaluator's request)")
    run.add_argument("--prompt-set", choices=["nemo", "nel"],
                     help="whose prompts the built-ins send: nemo (default: NeMo Evaluator "
                     "0.3.0's request, no system prompt, no few-shot) or nel (nel's own)")
    run.add_argument("--max-concurrent", type=int, help="concurrent requests per service")
    run.add_argument("--timeout", type=float, metavar="SECONDS",
                     help="seconds each model request may take before it is retried "
                     "(overrides every service's and benchmark's `timeout`)")
    run.add_argument("--shards", type=int, help="split each benchmark into N shards")
    run.add_argument("-o", "--output-dir", help="output directory (default ./eval_results)")
    run.add_argument("--resume", action="store_true", default=True,
                     help="continue interrupted shards from their journals (default)")
    run.add_argument("--fresh", action="store_true",
                     help="discard stored results and journals and recompute everything")
    run.add_argument("-O", "--override", action="append", default=[], metavar="KEY=VALUE",
                     help="config override, e.g. -O benchmarks.0.repeats=3")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument("--wait", action="store_true",
                     help="when another run is using the output directory, wait for it to end "
                     "(default: refuse with its pid)")
    run.add_argument("--json", action="store_true", help="print the summary as JSON")
    run.add_argument("--no-wait", action="store_true",
                     help="cluster.type slurm: print the job ids once submitted instead of "
                     "waiting for the jobs")
    # Inside the jobs `cluster.type: slurm` submits (nel_resources.launchers.slurm_jobs); not for users.
    run.add_argument("--slurm-task", help=argparse.SUPPRESS)
    run.add_argument("--slurm-merge", help=argparse.SUPPRESS)
    # Heterogeneous jobs (nel_resources.launchers.slurm_het): the task's index, and a service's component.
    run.add_argument("--slurm-index", type=int, help=argparse.SUPPRESS)
    run.add_argument("--slurm-service", help=argparse.SUPPRESS)
    run.add_argument("--slurm-services", help=argparse.SUPPRESS)
    _add_peer_run_flags(run)
    run.set_defaults(func=_cmd_run)

    ev.set_defaults(func=lambda a: (ev.print_help(), 2)[1])


# NeMo Evaluator's `eval run --api-key` reads these variables, in this order.
_PEER_KEY_VARS = ("NEMO_API_KEY", "NVIDIA_API_KEY")


def _add_peer_run_flags(run: argparse.ArgumentParser) -> None:
    """The flags of NeMo Evaluator 0.3.0's `nel eval run` that nel's own set lacked."""
    run.add_argument("--temperature", type=float, default=None,
                     help="sampling temperature sent with every request (flag runs default to "
                     "0.0 as in NeMo Evaluator; with a config, overrides every service's)")
    run.add_argument("--max-tokens", type=int, default=None,
                     help="maximum generated tokens per request (overrides every service's)")
    run.add_argument("--shuffle-seed", type=int, default=None, metavar="SEED",
                     help="seed of the permutation --max-problems takes its N problems from "
                     "(default 42, or the config's shuffle_seed)")
    run.add_argument("--first-n", action="store_true",
                     help="take the first N problems in dataset order (shuffle_seed: null)")
    run.add_argument("--dry-run", action="store_true",
                     help="validate the config and print which (benchmark, model, shard) "
                     "partitions would run and why; sends no request, starts no server")
    run.add_argument("--submit", action=argparse.BooleanOptionalAction, default=None,
                     help="submit to the configured cluster (a no-op for cluster.type: local, "
                     "as in NeMo Evaluator)")
    run.add_argument("--background", action="store_true",
                     help="run detached: writes <out>/nel.pid and <out>/nel_eval.log and "
                     "returns at once")
    run.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    run.add_argument("--adapter", metavar="NAME",
                     help="refused, as in NeMo Evaluator 0.3.0 (whose `eval run` has no such "
                     "flag): interceptors go in a service's `interceptors:` in the config")


def bench_entry(ref: str) -> dict[str, Any]:
    """A `benchmarks:` entry for a --bench value: a registered name, or a BYOB file
    `FILE.py` (the one benchmark it registers) / `FILE.py:NAME` (one of several)."""
    from dagster_project.cli.bench_ref import resolve_bench_file

    found = resolve_bench_file(ref)
    if found is None:
        return {"name": ref}
    module, name = found
    return {"name": name, "module": module}


def config_from_args(args: argparse.Namespace) -> Any:
    """Build the NelConfig from a config file and/or flags."""
    from nel_resources.checks import load_checked_config as load_config
    from nel_resources.config import ConfigError

    overrides = list(args.override)
    _check_flags(args)
    if args.config:
        cfg = load_config(args.config, overrides=overrides)
        # Only what the config wrote: validating a full dump again would mark every default
        # as written, and code that tells "set" from "unset" (a proxy's timeouts and
        # retries) would then read defaults as the user's choice.
        data = cfg.model_dump(mode="json", exclude_unset=True)
        if args.bench:
            data["benchmarks"] = _select_benchmarks(data.setdefault("benchmarks", []), args.bench,
                                                    args.config)
        if args.model_url:
            raise ConfigError("--model-url cannot be combined with a config file; "
                              "edit the config's services or use -O services.NAME.url=...")
    else:
        # `nel config set model_url/api_key_env` (or NEL_MODEL_URL/NEL_API_KEY_ENV) fill
        # flags left out; only here, since a config file names its own services.
        # NeMo Evaluator's variables come first (its flags read them), then nel's.
        args.model_url = (args.model_url or os.environ.get("NEMO_MODEL_URL")
                          or os.environ.get("NEL_MODEL_URL") or None)
        args.model_id = args.model_id or os.environ.get("NEMO_MODEL_ID") or None
        args.api_key_env = args.api_key_env or os.environ.get("NEL_API_KEY_ENV") or None
        if not args.api_key and not args.api_key_env:
            # NeMo Evaluator's --api-key defaults to $NEMO_API_KEY, then $NVIDIA_API_KEY;
            # nel keeps the variable's name (not its value) so nel-config.yaml holds no secret.
            args.api_key_env = next((v for v in _PEER_KEY_VARS if os.environ.get(v)), None)
        if not args.bench:
            raise ConfigError("nothing to run: give a config file or --bench NAME "
                              "(see `nel list` for benchmark names)")
        if not args.model_url:
            raise ConfigError("no model endpoint: give --model-url http://HOST:PORT/v1 "
                              "(and --model-id), or a config file with `services`")
        from nel_resources.storage.store import slugify

        name = slugify(args.model_id) if args.model_id else "default"
        svc: dict[str, Any] = {"type": "api", "url": args.model_url, "model": args.model_id}
        # NeMo Evaluator's quick mode sends temperature 0.0 unless --temperature says otherwise.
        svc["generation"] = {"temperature": 0.0 if args.temperature is None else args.temperature}
        data = {"services": {name: svc}, "benchmarks": [bench_entry(n) for n in args.bench]}
        for expr in overrides:
            from nel_resources.config import apply_override

            apply_override(data, expr)
    for svc in data.get("services", {}).values():
        if args.api_key:
            svc["api_key"] = args.api_key
        if args.api_key_env:
            svc["api_key_env"] = args.api_key_env
        if args.protocol:
            svc["protocol"] = args.protocol
        if args.max_concurrent is not None:
            svc["max_concurrent"] = args.max_concurrent
        if args.timeout is not None:
            svc["timeout"] = args.timeout
        for key in ("temperature", "max_tokens"):
            if getattr(args, key) is not None:
                svc.setdefault("generation", {})[key] = getattr(args, key)
    for b in data.get("benchmarks", []):
        if args.repeats is not None:
            b["repeats"] = args.repeats
        if args.max_problems is not None:
            b["max_problems"] = args.max_problems
        if args.problem_range:
            b["problem_range"] = args.problem_range
        if args.system_prompt is not None:
            b["system_prompt"] = args.system_prompt
        if args.prompt_set is not None:
            if isinstance(b.get("solver"), dict):  # the flag wins over `solver.prompt_set`
                b["solver"].pop("prompt_set", None)
            b["prompt_set"] = args.prompt_set
        if args.shards is not None:
            b["shards"] = args.shards
        if args.timeout is not None:
            b["timeout"] = args.timeout
        if args.shuffle_seed is not None:
            b["shuffle_seed"] = args.shuffle_seed
        if args.first_n:
            b["shuffle_seed"] = None
    if args.output_dir is not None:
        data.setdefault("output", {})["dir"] = args.output_dir
    cfg = load_config(data=data, source=cfg if args.config else None)
    _check_runnable(cfg, args.config or "the flags")
    return cfg


def _select_benchmarks(entries: list[dict[str, Any]], refs: list[str], where: str
                       ) -> list[dict[str, Any]]:
    """With a config, `-b` selects among its benchmarks; a name it lacks is refused (it
    would otherwise run a whole benchmark the config never asked for)."""
    from nel_resources.config import ConfigError

    names = [b["name"] for b in entries]
    wanted = {bench_entry(ref)["name"]: ref for ref in refs}
    missing = [ref for name, ref in wanted.items() if name not in names]
    if missing:
        raise ConfigError(f"-b {missing[0]}: {where} has no such benchmark (its benchmarks: "
                          f"{', '.join(names) or 'none'}); pick one of those, or run without "
                          "the config")
    return [b for b in entries if b["name"] in wanted]


# flag -> (smallest allowed value, what it means); a value below is refused before any run.
_INT_FLAGS = {
    "repeats": ("-n/--repeats", 1, "samples per problem"),
    "max_problems": ("-m/--max-problems", 1, "problems to evaluate"),
    "max_concurrent": ("--max-concurrent", 1, "concurrent requests per service"),
    "shards": ("--shards", 1, "shards per benchmark"),
}


def _check_flags(args: argparse.Namespace) -> None:
    """Refuse flag values that would silently run nothing (or forever), naming the flag."""
    from nel_resources.config import ConfigError

    for attr, (flag, low, what) in _INT_FLAGS.items():
        value = getattr(args, attr, None)
        if value is not None and value < low:
            raise ConfigError(f"{flag} {value}: must be at least {low} ({what})")
    if args.output_dir is not None and not args.output_dir.strip():
        raise ConfigError("-o/--output-dir is empty: give a directory, e.g. -o ./eval_results")
    if args.output_dir is not None:
        from nel_resources.config.deployment import path_length_problem

        problem = path_length_problem(args.output_dir)
        if problem:
            raise ConfigError(f"-o/--output-dir: {problem}; give a shorter directory")


def _check_runnable(cfg: Any, where: str) -> None:
    """A run needs at least one benchmark and a service for each: say so instead of exit 0."""
    from nel_resources.config import ConfigError

    if not cfg.benchmarks:
        raise ConfigError(
            f"{where}: no benchmarks to run; add `benchmarks: [{{name: gsm8k}}]` "
            "or pass --bench NAME"
        )
    for i, b in enumerate(cfg.benchmarks):
        if not b.service_names(cfg.services):
            raise ConfigError(
                f"{where}: benchmarks[{i}] ({b.name}) has no model service to run against; "
                "add one under `services` (type: api, url: http://HOST:PORT/v1)"
            )


def _validate_benchmarks(cfg: Any) -> None:
    """Fail early, with suggestions, on unknown benchmark names."""
    from benchmarks import get_factory
    from benchmarks.uri_schemes import is_uri

    for b in cfg.benchmarks:
        if b.module:
            from benchmarks.plugins import load_module

            load_module(b.module)
        if not is_uri(b.name, "gym", "container"):  # container://: a harness image
            get_factory(b.name)  # raises UnknownBenchmarkError with suggestions


def _refuse_unsupported_flags(args: argparse.Namespace, cfg: Any) -> None:
    """Flags whose feature nel does not have yet: refused in one line, before anything runs."""
    from nel_resources.config import ConfigError

    if args.adapter:
        # NeMo Evaluator 0.3.0's `nel eval run` has no --adapter (click: "No such option",
        # exit 2); its adapters are the services' interceptor chains, which nel runs.
        raise ConfigError(f"--adapter {args.adapter}: `nel eval run` has no --adapter (nor has "
                          "NeMo Evaluator 0.3.0's); put the interceptors under the service's "
                          "`interceptors:` (or `proxy.interceptors`) in the config")
    from nel_resources.launchers.registry import get_launcher

    flag = get_launcher(cfg.cluster.type).submit_flag
    if args.submit and flag not in ("note", "submit"):
        raise ConfigError(flag)  # the launcher's own one line


def _cmd_run(args: argparse.Namespace) -> int:
    if args.verbose:
        import logging

        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = config_from_args(args)
    _refuse_unsupported_flags(args, cfg)
    if args.slurm_task or args.slurm_merge or args.slurm_service:
        return _run_slurm_job(args, cfg)
    from nel_resources.launchers.registry import get_launcher

    launcher = get_launcher(cfg.cluster.type)
    if launcher.runs == "submits" and not args.dry_run:
        return _run_submitted(args, cfg, launcher)
    from nel_assets.engine.evaluation.sharding import shard_from_env

    shard_only = shard_from_env(default_total=cfg.cluster.shards)
    if shard_only is not None:
        data = cfg.model_dump(mode="json", exclude_unset=True)  # see config_from_args
        for b in data["benchmarks"]:
            b["shards"] = shard_only[1]
        from nel_resources.checks import load_checked_config

        cfg = load_checked_config(data=data, source=cfg)  # keeps file:line for refusals
    if args.submit and launcher.submit_flag == "note":
        # As in NeMo Evaluator, --submit means nothing for a local run: say so, then run. For
        # docker and ray nel starts the containers / Ray tasks itself, with or without it.
        where = ("running here" if launcher.runs == "here"
                 else "nel launches the shards itself")
        print(f"note: --submit has no effect with cluster.type: {cfg.cluster.type}; {where}",
              file=sys.stderr)
    if args.dry_run:
        from dagster_project.dry_run import plan_run, print_plan

        if args.background:  # as in NeMo Evaluator, the dry run wins
            print("note: --background has no effect with --dry-run (nothing runs)", file=sys.stderr)

        plan = plan_run(cfg, resume=not args.fresh, shard_only=shard_only, argv=args.argv)
        if args.json:
            import json

            print(json.dumps(plan.to_dict(), indent=2))
        else:
            print_plan(plan, where=args.config or "the flags")
        return plan.exit_status
    _validate_benchmarks(cfg)
    if args.background:
        from dagster_project.run_validation import validate_before_run

        validate_before_run(cfg)  # a config error is reported here, not in a log file
        from dagster_project.background import start_background

        return start_background(cfg, args.argv)
    from dagster_project import background_recording
    from dagster_project.runner import run_eval

    try:
        # Dagster's recording of a plain run goes on after the command returns (see there).
        later = background_recording.RecordLater() if background_recording.wanted() else None
        summary = run_eval(cfg, resume=not args.fresh, progress=not args.no_progress and sys.stderr.isatty(),
                           shard_only=shard_only, wait=args.wait, record_later=later)
    finally:
        from dagster_project.background import finished_in_background

        finished_in_background()
    _print_summary(summary, as_json=args.json)
    _print_failures(summary)
    return summary.exit_status


def _run_submitted(args: argparse.Namespace, cfg: Any, launcher: Any) -> int:
    """A cluster type that submits the whole run (`runs = "submits"`: slurm, k8s): its
    launcher plans through the runner's hooks and submits (and, when it can, waits)."""
    from dagster_project.cluster_launch import RunnerHooks
    from dagster_project.run_output import dagster_home_for
    from dagster_project.runner import prepare_output, run_eval, validate_before_run
    from nel_resources.launchers.base import SubmitOptions

    _validate_benchmarks(cfg)
    opts = SubmitOptions(argv=tuple(args.argv), resume=not args.fresh,
                         wait=not (args.no_wait or args.background), submit=args.submit)
    hooks = RunnerHooks(validate_before_run, prepare_output, run_eval, dagster_home_for)
    status, summary = launcher.submit(cfg, hooks, opts)
    if summary is None:
        return int(status)
    _print_summary(summary, as_json=args.json)
    _print_failures(summary)
    return int(summary.exit_status)


def _run_slurm_job(args: argparse.Namespace, cfg: Any) -> int:
    """One of the jobs `cluster.type: slurm` submits (`--slurm-task` / `--slurm-merge` /
    `--slurm-service`; nel_resources.launchers.slurm_jobs)."""
    from pathlib import Path

    from dagster_project.cluster_launch import RunnerHooks
    from dagster_project.run_output import dagster_home_for
    from dagster_project.runner import prepare_output, run_eval, validate_before_run
    from nel_resources.launchers import slurm_jobs

    hooks = RunnerHooks(validate_before_run, prepare_output, run_eval, dagster_home_for)

    _validate_benchmarks(cfg)
    if args.slurm_service:
        from nel_resources.launchers.slurm_het import serve_service

        return serve_service(cfg, args.slurm_service, Path(args.slurm_services or "."))
    if args.slurm_task:
        summary = slurm_jobs.run_task(cfg, Path(args.slurm_task), hooks, resume=not args.fresh,
                                     index=args.slurm_index,
                                     svc_dir=Path(args.slurm_services) if args.slurm_services else None)
    else:
        summary = slurm_jobs.run_merge(cfg, Path(args.slurm_merge), hooks, resume=not args.fresh)
    _print_summary(summary, as_json=args.json)
    _print_failures(summary)
    return int(summary.exit_status)


def _print_failures(summary: Any) -> None:
    """One `error:` line per failed (benchmark, model) on stderr, naming the log; one
    `warning:` line per result that lacks some samples (scored over the rest)."""
    for oc in summary.benchmarks:
        for m, b in sorted(oc.bundles.items()):
            s = b.get("score") or {}
            if s.get("n_samples") and s.get("n_failed_samples"):
                print(f"warning: {oc.benchmark}/{m}: {s['n_failed_samples']} samples failed and are "
                      "not in the score (see failure_analysis.json)", file=sys.stderr)
    budget = [f for f in summary.failures if f.stage == "budget"]
    if budget:  # one line: the first stop's reason, and what else is left for the rerun
        rest = [f"{f.benchmark}/{f.model}" for f in budget[1:]]
        print(f"stopped: {budget[0].benchmark}/{budget[0].model}: {budget[0].reason}"
              + (f"; also not finished: {', '.join(rest)}" if rest else ""), file=sys.stderr)
    for f in summary.failures:
        if f.stage == "budget":
            continue
        where = f.benchmark if f.model == "*" else f"{f.benchmark}/{f.model}"
        print(f"error: {where}: {f.reason} (details: {summary.log_path})", file=sys.stderr)


def _print_summary(summary: Any, *, as_json: bool) -> None:
    import json

    from dagster_project.checkpoint import keyed
    from nel_assets.engine.nemo.nemo_scores import exported_scores, scores_line
    from nel_assets.engine.results.headline import beside_metrics, headline_metric, headline_note

    rows = []
    for oc in summary.benchmarks:
        for m, b in oc.bundles.items():
            s = b["score"]
            # the bundle's one interval (fractions 0-1 here and in --json; percent in the table)
            rows.append({"benchmark": oc.benchmark, "model": m, "score": s.get("mean"),
                         "ci_low": s.get("ci_low"), "ci_high": s.get("ci_high"),
                         "ci_method": s.get("ci_method"), "se": s.get("se"), "se_note": s.get("se_note"),
                         "n_items": s.get("n_items"), "n_samples": s.get("n_samples"),
                         "failed": s.get("n_failed_samples"), "exports": oc.exports.get(m),
                         # which configured metric `score` is, and the others beside it
                         "metric": headline_metric(b), "beside": beside_metrics(b),
                         "note": headline_note(b),
                         # NeMo Evaluator's names and values, as in the exported eval-*.json
                         "scores": exported_scores(oc.exports.get(m)),
                         **({"cost_usd": b["cost"].get("total_cost")} if isinstance(b.get("cost"), dict) else {})})
    info = {"output_dir": str(summary.output_dir), "dagster_home": str(summary.dagster_home),
            "elapsed_s": round(summary.elapsed_s, 3), "dagster_runs": summary.dagster_runs,
            "shards_run": sum(len(o.shards_run) for o in summary.benchmarks),
            "shards_fresh": sum(o.shards_fresh for o in summary.benchmarks),
            "requests_sent": sum(o.requests_sent for o in summary.benchmarks), "results": rows,
            "artifacts_rebuilt": {f"{o.benchmark}/{m}": v for o in summary.benchmarks
                                  for m, v in getattr(o, "artifacts_rebuilt", {}).items()},
            "shards_run_because": {f"{o.benchmark}/{k}": v for o in summary.benchmarks
                                   for k, v in getattr(o, "run_reasons", {}).items()},
            "gates": summary.gates, "failed_benchmarks": keyed([f.as_dict() for f in summary.failures]),
            "checkpoint": str(summary.checkpoint_path) if summary.checkpoint_path else None,
            "log": str(summary.log_path) if summary.log_path else None,
            "exit_status": summary.exit_status}
    if as_json:
        for r in rows:
            r.pop("note")
        print(json.dumps(info, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title="nel results")
    for c in ("benchmark", "model", "score", "95% CI", "CI method", "items", "samples", "failed"):
        t.add_column(c)
    for r in rows:
        def pct(x: float | None) -> str:
            return "n/a" if x is None else f"{100 * x:.2f}%"
        t.add_row(r["benchmark"], r["model"], pct(r["score"]),
                  f"[{pct(r['ci_low'])}, {pct(r['ci_high'])}]", r["ci_method"] or "n/a",
                  str(r["n_items"]), str(r["n_samples"]), str(r["failed"]))
    con = Console()
    con.print(t)
    for r in rows:
        if r["note"]:
            con.print(f"{r['benchmark']}/{r['model']}: {r['note']}", markup=False, soft_wrap=True,
                      highlight=False)
        if r["scores"]:
            con.print(f"{r['benchmark']}/{r['model']} (NeMo Evaluator's names): {scores_line(r['scores'])}",
                      markup=False, soft_wrap=True, highlight=False)
    con.print(f"shards run {info['shards_run']}, up to date {info['shards_fresh']}, "
              f"requests {info['requests_sent']}, {info['elapsed_s']:.1f}s")
    from nel_assets.engine.reports.cost_text import run_cost_line

    if total := run_cost_line([b for oc in summary.benchmarks for b in oc.bundles.values()]):
        con.print(total, markup=False, soft_wrap=True, highlight=False)
    for what, why in info["shards_run_because"].items():
        if why.endswith("to retry"):
            con.print(f"retried {what}: {why}", markup=False, soft_wrap=True, highlight=False)
    for what, issues in info["artifacts_rebuilt"].items():
        con.print(f"rebuilt {what} from the store ({'; '.join(issues)})", markup=False, soft_wrap=True, highlight=False)
    con.print(f"results: {info['output_dir']}", markup=False, soft_wrap=True)
    con.print(f"exit status {summary.exit_status} (see `nel eval run --help`)", markup=False, soft_wrap=True, highlight=False)
    con.print(f"Dagster UI: DAGSTER_HOME={info['dagster_home']} "
              f"NEL_CONFIG={info['output_dir']}/nel-config.yaml dagster dev -m dagster_project.definitions",
              markup=False, soft_wrap=True, highlight=False)
    for r in rows:
        con.print(f"exports {r['benchmark']}/{r['model']}: {r['exports']}", markup=False, soft_wrap=True, highlight=False)
    if summary.failures:
        con.print(f"failed: {len(summary.failures)} (see the error lines; record: "
                  f"{summary.checkpoint_path})", markup=False, soft_wrap=True, highlight=False)
    for m, g in sorted(summary.gates.items()):
        con.print(f"gate {m} vs {g['baseline']}: {g['decision']}", markup=False, soft_wrap=True, highlight=False)
        for name, reason in sorted(g.get("details", {}).items()):
            if name not in ("ci_level", "correction"):
                con.print(f"  {name}: {reason}", markup=False, soft_wrap=True, highlight=False)


run_command = _cmd_run  # `nel eval run` (the CLI's entry hands it to a nel daemon when one runs)
