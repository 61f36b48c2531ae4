"""`nel serve --slurm [CONFIG.yaml]`: the same `nel serve`, run as a SLURM job. This is the
CLI's part (which options the job's `nel serve` gets, the benchmark checked before a wait in
the queue); the job, its script and the wait for its endpoint are
nel_resources.launchers.slurm_serve's.

No Dagster here (`nel serve` must not pay its import time).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from benchmarks.errors import NelError
from benchmarks.uri_schemes import is_uri

# Options of the submitting command only: the job's `nel serve` does not get them.
_SUBMIT_ONLY = frozenset({"slurm", "output_dir", "node_pool", "slurm_timeout", "no_wait",
                          "endpoint_file", "help"})


def job_argv(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The job's `nel serve` options: every serve option given here (rebuilt from the parsed
    values, so abbreviations and `--flag=value` spellings need no care), minus the ones
    only the submitting command reads."""
    out: list[str] = []
    for action in parser._actions:
        if action.dest in _SUBMIT_ONLY or not action.option_strings:
            continue
        value = getattr(args, action.dest, action.default)
        if value == action.default or value is None:
            continue
        flag = max(action.option_strings, key=len)  # the long spelling
        if action.nargs == 0:  # store_true
            out.append(flag)
        elif isinstance(action.default, list):  # append: --param, --import
            for item in value:
                out += [flag, _param_text(item) if action.dest == "param" else str(item)]
        else:
            out += [flag, str(value)]
    return out


def _param_text(item: tuple[str, Any]) -> str:
    """`--param KEY=VALUE` as the job's parser reads it back to the same value."""
    key, value = item
    if isinstance(value, str):
        try:
            json.loads(value)
        except ValueError:
            return f"{key}={value}"  # a bare string stays bare
    return f"{key}={json.dumps(value)}"


def _check_benchmark(args: argparse.Namespace) -> None:
    """A typo in -b or --import fails here, in one line, not after a wait in the queue.
    (The benchmark is not built here: its data may live only where the job runs.)"""
    from benchmarks._registry import UnknownBenchmarkError, get_factory
    from benchmarks.plugins import resolve_benchmark_ref
    from benchmarks.serve import import_plugins

    if args.export_only:
        raise NelError("--export-only writes the rows and exits, which is no server to "
                       "submit: run it without --slurm")
    import_plugins(args.imports)
    name = resolve_benchmark_ref(args.benchmark)
    if not is_uri(name, "gym"):
        try:
            get_factory(name)
        except UnknownBenchmarkError as exc:
            raise NelError(str(exc)) from None


def serve_on_slurm(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Submit `nel serve` as a SLURM job and wait until it serves.

    Returns:
        0 once the job's server answers (endpoint printed), or once submitted with
        `--no-wait` / written with `submit: false`; 1 when the job ended (or did not start
        within --slurm-timeout, then it is cancelled) before serving.

    Raises:
        NelError: bad flags or config, no SLURM here, or sbatch refused the job (exit 2).
        KeyboardInterrupt: after cancelling the job.
    """
    from pathlib import Path

    from nel_resources.launchers.slurm_serve import load_serve_cluster, serve_pool, submit_serve

    cfg = load_serve_cluster(args.slurm)
    pool = serve_pool(cfg, args.node_pool)
    _check_benchmark(args)
    out = Path(args.output_dir or cfg.output.dir).expanduser().resolve()
    return submit_serve(cfg, pool, out, job_argv(parser, args), args.benchmark, host=args.host,
                        no_wait=args.no_wait, timeout_s=args.slurm_timeout)
