"""Entry point of the `nel` command.

Only argparse is imported at start-up; each subcommand imports what it needs when it runs,
so `nel --help` stays fast (no Dagster, polars or scipy).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from dagster_project.cli import (
    commands_compare,
    commands_config,
    commands_daemon,
    commands_data,
    commands_eval,
    commands_list,
    commands_misc,
    commands_package,
    commands_proxy,
    commands_reference,
    commands_report,
    commands_runs,
    commands_serve,
    commands_validate,
)

# Each module exposes `register(subparsers)`; order is the order shown in --help
# (commands_eval first: it creates the `eval` group the report module extends).
_COMMAND_MODULES = [commands_eval, commands_list, commands_report, commands_runs, commands_validate,
                    commands_compare, commands_data, commands_misc, commands_serve, commands_proxy, commands_reference, commands_config,
                    commands_package, commands_daemon]


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (also used by the docs test)."""
    parser = argparse.ArgumentParser(
        prog="nel",
        description="nel: LLM evaluation as a declarative Dagster asset graph.",
    )
    parser.add_argument("--version", action="version", version="nel 0.1.0")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in _COMMAND_MODULES:
        mod.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code.

    Called with no `argv` it is the process's entry point (the `nel` script, `python -m`),
    and the interpreter's shutdown then skips its collection of the whole heap (see
    `skip_final_collection`).
    """
    try:
        return _run(argv)
    finally:
        if argv is None:
            skip_final_collection()


def skip_final_collection() -> None:
    """Exempt every live object from the collection the interpreter runs as it shuts down.

    At exit Python walks the whole heap once more for reference cycles; after a large run
    that heap is the run's (Dagster's, pyarrow's, the rows'), and the walk took 1.2 s of a
    3.2 s run of 10.5k samples. Nothing is lost by skipping it: the process ends anyway,
    `atexit` handlers and objects freed by reference counting (files flushed and closed,
    Parquet writers, Dagster's instance) still run as before, and the operating system
    takes the memory back. Only cyclic garbage left at exit goes unfinalized, as in any
    process ended by `os._exit` (nel's daemon runs end that way).
    """
    import gc

    gc.freeze()


def _run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # e.g. for `eval run --background`
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    from benchmarks.errors import NelError

    try:
        if args.command != "config":  # `nel config` must still work to repair a broken file
            from nel_resources.runtime.user_config import apply_user_config

            apply_user_config()  # stored defaults for unset NEL_* variables (`nel config`)
        if func is commands_eval.run_command and not args.background:
            # A nel daemon of this code takes the run (warm: Dagster already imported).
            from dagster_project import daemon_client

            code = daemon_client.delegate(args.argv)
            if code is not None:
                return code
        return int(func(args) or 0)
    except NelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
