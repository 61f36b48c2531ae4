"""`nel serve`: serve a benchmark over HTTP (seed/verify) for RL training, or export it.

Flags as NeMo Evaluator 0.3.0's (`-b/--benchmark` a name or a .py file[:name], `-p/--port`,
`--host`, `--gym-compat`, `--export-data DIR`), next to nel's own. One default differs on
purpose: `--host` is 127.0.0.1 (the peer binds 0.0.0.0); expose a server with
`--host 0.0.0.0`.

`--slurm [CONFIG.yaml]` runs the same `nel serve` as a SLURM job instead
(dagster_project.serve_slurm): the job writes `<output dir>/endpoint.txt` once it serves.

Only argparse is imported here; the server stack (FastAPI, uvicorn, the benchmark) is
imported inside the handler so `nel --help` stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path
from typing import Any


def _param(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)  # numbers, booleans, lists...
    except ValueError:
        return key, value  # a bare string


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _port(text: str) -> int:
    value = _non_negative(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"not a TCP port: {value}")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    """Add this module's subcommands to the parser."""
    p = sub.add_parser(
        "serve",
        help="serve a benchmark over HTTP (seed/verify) for RL training",
        description=textwrap.fill(
            "Serve a benchmark with the NeMo Evaluator 0.3.0 protocol (GET /health, "
            "GET /dataset_size, POST /seed_session, POST /verify) and NeMo Gym's "
            "POST /aggregate_metrics, so NeMo Gym agents and ng_collect_rollouts can use it; "
            "or export it as Gym JSONL with --export-data."
        ),
        epilog=_SLURM_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "-b",
        "--benchmark",
        required=True,
        metavar="NAME",
        help="registered benchmark name, a BYOB file (file.py or file.py:NAME), "
        "or gym://host:port to proxy one",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="interface to bind (default 127.0.0.1; use 0.0.0.0 to expose it)",
    )
    p.add_argument("-p", "--port", type=_port, default=9090, help="TCP port (default 9090)")
    p.add_argument(
        "--workers",
        type=_positive,
        default=1,
        help="uvicorn worker processes, each with its own copy of the benchmark",
    )
    p.add_argument(
        "--gym-compat",
        action="store_true",
        help="NeMo Gym mode: /health reports protocol 'gym', and /seed_session without idx "
        "answers Gym's empty session {} (by default it is problem 0, as NeMo Evaluator)",
    )
    p.add_argument(
        "--export-data",
        metavar="DIR",
        help="first write the dataset as NeMo Gym JSONL rows to DIR/<benchmark>.jsonl "
        "(a path ending in .jsonl is the file itself), then serve",
    )
    p.add_argument(
        "--export-only",
        action="store_true",
        help="with --export-data: write the rows and exit instead of serving",
    )
    p.add_argument(
        "--max-problems",
        type=_non_negative,
        metavar="N",
        help="serve or export only the first N problems",
    )
    p.add_argument(
        "--max-body-bytes",
        type=_positive,
        default=1_000_000,
        metavar="N",
        help="refuse request bodies larger than N bytes with 413 (default 1000000)",
    )
    p.add_argument(
        "--read-timeout",
        type=_positive_seconds,
        default=10.0,
        metavar="SECONDS",
        help="cut off a client whose request headers, or whose body, take longer (default 10)",
    )
    p.add_argument(
        "--verify-timeout",
        type=_positive_seconds,
        default=30.0,
        metavar="SECONDS",
        help="answer 422 when scoring one response takes longer (default 30)",
    )
    p.add_argument(
        "--scoring-workers",
        type=_positive,
        metavar="N",
        help="scoring processes per server process (default: the CPUs shared among --workers, "
        "at least 2); a scorer that overruns --verify-timeout is killed with its process",
    )
    p.add_argument(
        "--scorer-memory-mb",
        type=_non_negative,
        default=2048,
        metavar="MB",
        help="memory each scoring process may grow by before its scorer fails with a 422 "
        "(default 2048; 0: no cap)",
    )
    p.add_argument(
        "--param",
        type=_param,
        action="append",
        default=[],
        metavar="K=V",
        help="benchmark factory parameter (JSON value or string); repeatable",
    )
    p.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import a module or .py file first (BYOB benchmarks); repeatable",
    )
    p.add_argument(
        "--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"]
    )
    p.add_argument(
        "--endpoint-file",
        metavar="PATH",
        help="once the server answers /health, write its host:port to PATH (atomically; "
        "removed when it stops). The host is this machine's name with --host 0.0.0.0, else "
        "the bound address; with --port 0 the port is the free one the server got",
    )
    from dagster_project.cli.sandbox_flags import add_sandbox_flags

    add_sandbox_flags(p)
    slurm = p.add_argument_group("on SLURM (see below)")
    slurm.add_argument(
        "--slurm",
        nargs="?",
        const="",
        metavar="CONFIG.yaml",
        help="submit this `nel serve` as a SLURM job and wait until it serves; CONFIG.yaml "
        "gives `cluster:` (type slurm: walltime, node_pools, account, ...) and `output.dir`; "
        "without it: the cluster's default partition, walltime 04:00:00",
    )
    slurm.add_argument(
        "--output-dir",
        metavar="DIR",
        help="where endpoint.txt, the job script and its log go (default: the config's "
        "output.dir, else ./eval_results)",
    )
    slurm.add_argument(
        "--node-pool",
        metavar="NAME",
        help="which of the config's cluster.node_pools to run on (needed when it has several)",
    )
    slurm.add_argument(
        "--slurm-timeout",
        type=_positive_seconds,
        default=900.0,
        metavar="SECONDS",
        help="cancel the job when it has not served after this long (default 900)",
    )
    slurm.add_argument(
        "--no-wait",
        action="store_true",
        help="print the job id once submitted instead of waiting for endpoint.txt",
    )
    p.set_defaults(func=_run, serve_parser=p)


_SLURM_EPILOG = """\
on SLURM:
  nel serve -b gsm8k --gym-compat --host 0.0.0.0 --port 0 --slurm slurm.yaml
  submits one job running that same `nel serve` (every serve option passes through) on a
  node of the config's pool; the job's server binds, and once it answers /health writes
  <output dir>/endpoint.txt (host:port, plus endpoint.json naming the job). This command
  waits for it, then prints the endpoint, gym://<endpoint>, the job id and `scancel <id>`
  to stop it. A job that ends before serving is reported with the tail of its log (exit 1);
  Ctrl-C while waiting cancels the job (exit 130). `cluster.submit: false` writes the job
  script only. `--port 0` takes a free port on the node (a fixed port can be taken on a
  shared node); the default --host 127.0.0.1 is reachable from that node only.
"""


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def _export_path(target: str, name: str) -> Path:
    """NeMo Evaluator's `--export-data DIR` writes DIR/<name>.jsonl; a .jsonl path is the file."""
    path = Path(target).expanduser()
    # an existing directory is a directory whatever its name ends with
    return path if path.suffix == ".jsonl" and not path.is_dir() else path / f"{name}.jsonl"


def _run(args: argparse.Namespace) -> int:
    from benchmarks.errors import NelError
    from benchmarks.plugins import resolve_benchmark_ref
    from benchmarks.serve import build_environment, export_data, serve
    from dagster_project.cli.sandbox_flags import sandbox_config

    if args.export_only and not args.export_data:
        raise NelError("--export-only needs --export-data DIR (where to write the rows)")
    if args.slurm is not None:
        from dagster_project.serve_slurm import serve_on_slurm

        return serve_on_slurm(args, args.serve_parser)
    for flag, value in (("--output-dir", args.output_dir), ("--node-pool", args.node_pool),
                        ("--no-wait", args.no_wait), ("--slurm-timeout", args.slurm_timeout != 900.0)):
        if value:
            raise NelError(f"{flag} goes with --slurm (it says where the SLURM job writes or "
                           "runs); remove it or add --slurm")
    sandbox_cfg = sandbox_config(args)
    if sandbox_cfg is not None and args.workers > 1:
        raise NelError("--sandbox serves with one worker (--workers 1): the sandboxes and their "
                       "`concurrency` bound live in the serving process")
    params = dict(args.param)
    ref = args.benchmark
    # a BYOB file given as the benchmark: import it and serve what it registers, by name
    # (workers import it again, so it joins the imports)
    args.benchmark = resolve_benchmark_ref(ref)
    if args.benchmark != ref:
        args.imports = [*args.imports, ref.rpartition(":")[0] if ":" in ref and not ref.endswith(".py") else ref]
    env = build_environment(
        args.benchmark, params, max_problems=args.max_problems, imports=args.imports
    )
    name = args.benchmark  # `-b ./file.py` serves under the name the file registers
    if args.export_data:
        target = _export_path(args.export_data, args.benchmark)
        n = export_data(env, target, benchmark=args.benchmark, close=True)
        print(f"wrote {n} rows to {target}", file=sys.stderr)
        if args.export_only:
            return 0
        # the export closed the environment (inside its own event loop): serve a fresh one
        env = build_environment(
            args.benchmark, params, max_problems=args.max_problems, imports=args.imports
        )
    sandboxes = _start_sandboxes(name, env, sandbox_cfg)
    print(
        f"nel serve: {name} ({len(env)} problems) on "
        f"http://{args.host}:{args.port} (workers={args.workers}"
        f"{', gym-compat' if args.gym_compat else ''})",
        file=sys.stderr,
        flush=True,
    )
    # With several workers each one rebuilds the benchmark by name (the copy built above
    # only validated the name); with one, the process serves the copy it already has.
    if sandboxes is not None or args.endpoint_file:
        _exit_on_sigterm()  # the endpoint file is removed on the way out too
    try:
        serve(
            args.benchmark if args.workers > 1 else env,
            args.host,
            args.port,
            workers=args.workers,
            gym_compat=args.gym_compat,
            max_body_bytes=args.max_body_bytes,
            params=params,
            max_problems=args.max_problems if args.workers > 1 else None,
            imports=args.imports,
            log_level=args.log_level,
            benchmark_name=name,
            read_timeout=args.read_timeout,
            verify_timeout=args.verify_timeout,
            sandbox=sandboxes.open if sandboxes is not None else None,
            endpoint_file=args.endpoint_file,
            scoring_workers=args.scoring_workers,
            scorer_memory_mb=args.scorer_memory_mb or None,
        )
    finally:
        if sandboxes is not None:
            sandboxes.close()  # warm containers removed however serving ends
    return 0


def _exit_on_sigterm() -> None:
    """Make SIGTERM end the process through Python's exit path.

    uvicorn stops on SIGTERM and then raises the signal again; with the default action
    that kills the process before the sandboxes are closed (warm docker containers would
    stay behind). An exception instead unwinds through `finally`.
    """
    import signal

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, stop)


def _start_sandboxes(name: str, env: Any, cfg: Any) -> Any:
    """The sandboxes `/verify` runs code in (None without `--sandbox`), checked now: a
    benchmark that needs one and has none, or a sandbox that cannot start, is refused
    before serving, in one line."""
    from benchmarks.errors import NelError
    from benchmarks.serve import needs_sandbox

    if cfg is None or cfg.type == "none":
        if needs_sandbox(env):
            raise NelError(f"benchmark {name!r} runs model-written code and needs a sandbox: "
                           "add `--sandbox local` (or `--sandbox docker --sandbox-image IMAGE`)")
        return None
    from nel_resources.sandboxes import SandboxError, make_factory
    from nel_resources.sandboxes.loop_thread import LoopThreadSandboxes

    try:
        sandboxes = LoopThreadSandboxes(make_factory(cfg))
    except SandboxError as exc:
        raise NelError(f"--sandbox {cfg.type}: {exc}") from None
    try:
        sandboxes.check()
    except SandboxError as exc:
        sandboxes.close()
        raise NelError(f"--sandbox {cfg.type}: the sandbox cannot run: {exc}") from None
    return sandboxes


if __name__ == "__main__":
    # Lets `python -m dagster_project.cli.commands_serve -b NAME ...` run the command on its
    # own (tests use it while sibling command modules are still being written).
    from benchmarks.errors import NelError

    _parser = argparse.ArgumentParser(prog="nel")
    register(_parser.add_subparsers(dest="command"))
    _args = _parser.parse_args(["serve", *sys.argv[1:]])
    try:
        sys.exit(_args.func(_args))
    except NelError as _exc:
        print(f"error: {_exc}", file=sys.stderr)
        sys.exit(2)
