"""`nel eval status | stop | logs | jobs | clean | resume`: work with the runs `nel eval run`
started, with NeMo Evaluator 0.3.0's arguments, flags and exit statuses.

A run is found by `-r RUN_ID` (the index of runs) or `-o OUTPUT_DIR` (its `nel_run.json`);
what it did is read from its Dagster instance (runs tagged `nel/run_id`), its checkpoint and
its log. See dagster_project.run_registry.

Exit statuses follow NeMo Evaluator: 0 done (also "could not stop: already finished"), 1 a
run that cannot be found or acted on (its `Error: ...` cases), 2 bad flags; nel adds 2 for a
flag whose feature nel does not have yet (SLURM-only flags), and `resume` exits with
`nel eval run`'s statuses.

Only argparse here: the handlers import the registry (and Dagster) when they run.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

# Peer-compatible "No run metadata" and friends: NeMo Evaluator's click errors exit 1.
NOT_FOUND = 1


class RunCommandError(Exception):
    """A run cannot be found or acted on: one `Error:` line, exit 1 (as NeMo Evaluator)."""


def register(sub: argparse._SubParsersAction) -> None:
    """Add the run subcommands to the `eval` group created by commands_eval."""
    del sub  # these live under `nel eval`
    from dagster_project.cli import commands_eval

    evsub = commands_eval.EVAL_SUBPARSERS
    assert evsub is not None, "commands_eval.register must run first"

    def which_run(p: argparse.ArgumentParser) -> None:
        p.add_argument("-r", "--run-id", help="run id (printed by `nel eval run`; see `nel eval jobs`)")
        p.add_argument("-o", "--output-dir", help="output directory of the run (its last run)")
        p.add_argument("--job-id", help="SLURM job id (legacy; nel's local runs have none)")
        p.add_argument("--host", help="SLURM login host (legacy, with --job-id)")

    p = evsub.add_parser("status", help="is a run running, and how did it end",
                         description="State of a run (running, stopped, completed, failed, "
                         "interrupted) and its Dagster runs. Without -r/-o: the last run in "
                         "the default output directory.")
    which_run(p)
    p.add_argument("-w", "--watch", action="store_true", help="refresh every 60s until the run ends")
    p.set_defaults(func=guard_run_errors(_cmd_status))

    p = evsub.add_parser("stop", help="stop a running run",
                         description="Send SIGTERM to the process running the run (it stops its "
                         "model servers and keeps every finished sample), SIGKILL after "
                         "--grace seconds, and mark its unfinished Dagster runs canceled.")
    which_run(p)
    p.add_argument("-s", "--shard", type=int, help="stop one shard (SLURM runs only)")
    p.add_argument("--grace", type=float, default=30.0, metavar="SECONDS",
                   help="seconds to wait after SIGTERM before SIGKILL (default 30)")
    p.set_defaults(func=guard_run_errors(_cmd_stop))

    p = evsub.add_parser("jobs", help="list the runs nel has started")
    p.add_argument("--offline", action="store_true", help="do not check whether runs are alive")
    p.set_defaults(func=guard_run_errors(_cmd_jobs))

    p = evsub.add_parser("logs", help="a run's log and Dagster event log")
    which_run(p)
    p.add_argument("-f", "--follow", action="store_true", help="keep printing the log while the run runs")
    p.add_argument("-n", "--tail", type=int, metavar="N", help="only the last N lines")
    p.add_argument("-s", "--shard", type=int, help="only the Dagster events of shard N")
    p.set_defaults(func=guard_run_errors(_cmd_logs))

    p = evsub.add_parser("resume", help="continue an interrupted or failed run",
                         description="Run the run's config again (<out>/nel-config.yaml): "
                         "finished (model, shard) partitions and journaled samples are kept; "
                         "only missing, failed or interrupted work is redone.")
    which_run(p)
    p.add_argument("--continue-attempts", action="store_true",
                   help="keep the SLURM retry counter (SLURM runs only)")
    p.add_argument("-s", "--shard", type=int, help="resume one shard only (SLURM runs only)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=guard_run_errors(_cmd_resume))

    p = evsub.add_parser("clean", help="remove runs from the list of runs (never their results)",
                         description="Remove entries from nel's index of runs. Output "
                         "directories, results and Dagster instances are not touched.")
    p.add_argument("--older-than", help="only entries started longer ago than this (7d, 4w, 24h, 2m)")
    p.add_argument("--executor", dest="filter_executor",
                   help="only entries of this executor (slurm, docker, local; nel's are local)")
    p.add_argument("--dry-run", action="store_true", help="show what would be removed")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=guard_run_errors(_cmd_clean))


def guard_run_errors(func: Any) -> Any:
    """Run a handler; a RunCommandError becomes one `Error:` line and exit 1."""
    def run(args: argparse.Namespace) -> int:
        try:
            return int(func(args) or 0)
        except RunCommandError as exc:
            print(f"Error: {exc}", file=sys.stderr)
            return NOT_FOUND
    return run


def _refuse(what: str) -> None:
    from benchmarks.errors import NelError

    raise NelError(f"{what} is not supported yet in nel (nel runs are local, not SLURM jobs)")


def _resolve(args: argparse.Namespace) -> Any:
    from dagster_project import run_registry

    record = run_registry.resolve(args.run_id, args.output_dir, args.job_id, args.host)
    if record is not None:
        return record
    hint = (f"run-id={args.run_id}" if args.run_id else f"job-id={args.job_id}" if args.job_id
            else f"output-dir={args.output_dir}")
    raise RunCommandError(f"No run metadata found for {hint}.")


def _resolve_default(args: argparse.Namespace) -> Any:
    """As _resolve; without -r/-o/--job-id, the last run in the default output directory."""
    if args.run_id or args.output_dir or args.job_id:
        return _resolve(args)
    from dagster_project import run_registry
    from nel_resources.config import OutputConfig

    default = OutputConfig().dir
    record = run_registry.resolve(output_dir=default)
    if record is None:
        raise RunCommandError("No evaluation metadata found. Use -r <run_id> or -o <dir>.")
    return record


def _status_text(record: Any) -> tuple[bool, str]:
    from dagster_project import run_registry

    state = run_registry.state_of(record)
    lines = [f"Run:      {record.run_id}", f"Executor: {record.executor}",
             f"Running:  {state == 'running'}", f"  state: {state}",
             f"  pid: {record.details.get('pid')}", f"  started_at: {record.started_at}",
             f"  benchmarks: {', '.join(record.details.get('benchmarks') or []) or '-'}",
             f"  output_dir: {record.output_dir}", f"  dagster_home: {record.dagster_home}"]
    if record.details.get("stopped_at"):
        lines.append(f"  stopped_at: {record.details['stopped_at']}")
    if record.details.get("finished_at"):
        lines.append(f"  finished_at: {record.details['finished_at']}")
        lines.append(f"  exit_status: {record.details.get('exit_status')}")
    doc = run_registry.checkpoint_of(record)
    for key, f in sorted(((doc or {}).get("failed_benchmarks") or {}).items()):
        lines.append(f"  failed: {key}: {f.get('reason')}")
    runs = run_registry.dagster_runs(record)
    counts: dict[str, int] = {}
    for r in runs:
        counts[r.status.value] = counts.get(r.status.value, 0) + 1
    shown = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    lines.append(f"  dagster_runs: {len(runs)}{f' ({shown})' if shown else ''}")
    if state == "interrupted":
        lines.append(f"  resume: nel eval resume -r {record.run_id}")
    return state == "running", "\n".join(lines)


def _cmd_status(args: argparse.Namespace) -> int:
    record = _resolve_default(args)
    if not args.watch:
        print(_status_text(record)[1])
        return 0
    from dagster_project import run_registry

    while True:
        running, text = _status_text(record)
        print(f"{text}\n[{time.strftime('%H:%M:%S')}]", flush=True)
        if not running:
            print("Run finished.")
            return 0
        # Refresh every 60 s, or as soon as the run ends.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and run_registry.is_running(record):
            time.sleep(1)


def _cmd_stop(args: argparse.Namespace) -> int:
    import os
    import signal

    from dagster_project import run_registry

    record = _resolve_default(args)
    if args.shard is not None:
        raise RunCommandError("--shard is only supported for SLURM runs.")
    if not run_registry.is_running(record):
        print("Could not stop (may already be finished).", file=sys.stderr)
        return 0
    pid = int(record.details["pid"])
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + max(args.grace, 0.0)
    while run_registry.is_running(record) and time.monotonic() < deadline:
        time.sleep(0.1)
    killed = False
    if run_registry.is_running(record):
        os.kill(pid, signal.SIGKILL)
        killed = True
        deadline = time.monotonic() + 10
        while run_registry.is_running(record) and time.monotonic() < deadline:
            time.sleep(0.1)
    if run_registry.is_running(record):
        raise RunCommandError(f"run {record.run_id} (pid {pid}) is still running after SIGKILL")
    run_registry.mark_stopped(record)
    run_registry.cancel_unfinished(record, "stopped by `nel eval stop`")
    how = " (SIGKILL after the grace period)" if killed else ""
    print(f"Stopped run {record.run_id} ({record.executor}){how}")
    return 0


def _cmd_jobs(args: argparse.Namespace) -> int:
    from dagster_project import run_registry

    runs = run_registry.all_runs()
    if not runs:
        print("No tracked runs.")
        return 0
    header = f"{'RUN_ID':<26} {'EXECUTOR':<10} {'STATE':<20} {'BENCHMARKS':<30} {'OUTPUT_DIR'}"
    print(header)
    print("-" * len(header))
    for r in runs:
        state = "\u2014" if args.offline else run_registry.state_of(r)
        summary = r.config_summary or "\u2014"
        if len(summary) > 28:
            summary = summary[:25] + "..."
        print(f"{r.run_id:<26} {r.executor:<10} {state:<20} {summary:<30} {r.output_dir}")
    return 0


def _log_lines(record: Any, shard: int | None) -> list[str]:
    from dagster_project import run_registry

    lines: list[str] = []
    if shard is None and record.log_path.exists():
        lines += record.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    events = list(run_registry.event_lines(record, shard))
    if events:
        lines += ["", f"# Dagster event log ({record.dagster_home})", *events]
    return lines


def _cmd_logs(args: argparse.Namespace) -> int:
    from dagster_project import run_registry

    record = _resolve(args)
    if args.tail is not None and args.tail < 0:
        from benchmarks.errors import NelError

        raise NelError(f"-n/--tail {args.tail}: give a number of lines, 0 or more")
    lines = _log_lines(record, args.shard)
    if not lines:
        print("No logs found.", file=sys.stderr)
        if not args.follow:
            return 0
    # -n 0 shows no past lines, as tail(1) does (NeMo Evaluator shows them all: a bug).
    shown = lines if args.tail is None else lines[len(lines) - args.tail:] if args.tail else []
    if shown:
        print("\n".join(shown), flush=True)
    if not args.follow:
        return 0
    # Follow: print what the run log gains until the run ends (then the rest once more).
    path = record.log_path
    pos = path.stat().st_size if path.exists() else 0
    while True:
        running = run_registry.is_running(record)
        if path.exists() and path.stat().st_size > pos:
            with path.open("rb") as fh:
                fh.seek(pos)
                chunk = fh.read()
            pos += len(chunk)
            sys.stdout.write(chunk.decode("utf-8", errors="replace"))
            sys.stdout.flush()
        if not running:
            return 0
        time.sleep(0.5)


def _cmd_resume(args: argparse.Namespace) -> int:
    from dagster_project import run_registry

    record = _resolve(args)
    if args.continue_attempts:
        _refuse("--continue-attempts (SLURM retry counters)")
    if args.shard is not None:
        _refuse("--shard for resume (resuming one SLURM shard)")
    if run_registry.is_running(record):
        raise RunCommandError(f"run {record.run_id} is still running (pid {record.details.get('pid')}); "
                              f"stop it first: nel eval stop -r {record.run_id}")
    config = record.out / "nel-config.yaml"
    if not config.exists():
        raise RunCommandError(f"Cannot resume run {record.run_id}: no saved config in {record.output_dir}")
    print(f"Resuming run {record.run_id} ({record.executor})", file=sys.stderr, flush=True)
    # Its process is gone (killed, crashed): Dagster runs it left "started" never will end.
    run_registry.cancel_unfinished(record, f"the process of nel run {record.run_id} ended "
                                   "without finishing them (nel eval resume)")
    from dagster_project.cli.commands_eval import _print_failures, _print_summary
    from dagster_project.runner import run_eval
    from nel_resources.config import load_config

    cfg = load_config(str(config))
    summary = run_eval(cfg, resume=True, progress=not args.no_progress and sys.stderr.isatty())
    _print_summary(summary, as_json=args.json)
    _print_failures(summary)
    return summary.exit_status


_UNITS = {"h": 1 / 24, "d": 1.0, "w": 7.0, "m": 30.0}


def _cmd_clean(args: argparse.Namespace) -> int:
    import datetime as dt
    import re

    from dagster_project import run_registry

    runs = run_registry.all_runs()
    if not runs:
        print("No tracked runs to clean.")
        return 0
    cutoff = None
    if args.older_than:
        m = re.fullmatch(r"(\d+)\s*([hdwm])", args.older_than.strip())
        if not m:
            raise RunCommandError(f"Invalid duration: {args.older_than!r}. Use e.g. 7d, 4w, 24h")
        cutoff = dt.datetime.now(dt.UTC) - dt.timedelta(days=int(m.group(1)) * _UNITS[m.group(2)])
    chosen = []
    for r in runs:
        if args.filter_executor and r.executor != args.filter_executor:
            continue
        started = r.started()
        if cutoff and started is not None and started > cutoff:
            continue
        if run_registry.is_running(r):
            # Unlike NeMo Evaluator, keep a running run listed: without its entry it could
            # no longer be found to stop or follow.
            print(f"  keeping {r.run_id}: still running", file=sys.stderr)
            continue
        chosen.append(r)
    if not chosen:
        print("Nothing to clean.")
        return 0
    print(f"Found {len(chosen)} entries to remove:")
    for r in chosen:
        print(f"  {r.run_id}  {r.executor:<8}  {r.started_at[:19]}  {r.config_summary}")
    if args.dry_run:
        print("(dry-run \u2014 nothing removed)")
        return 0
    if not args.yes and not _confirm("Remove these entries?"):
        print("Aborted!", file=sys.stderr)
        return 1
    removed = sum(run_registry.remove(r.run_id) for r in chosen)
    print(f"Removed {removed} entries.")
    return 0


def _confirm(question: str) -> bool:
    """Ask y/N on the terminal (stdin); no answer (end of input) is no."""
    try:
        answer = input(f"{question} [y/N]: ")
    except EOFError:
        print()
        return False
    return answer.strip().lower() in ("y", "yes")
