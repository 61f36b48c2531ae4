"""`nel serve --slurm [CONFIG.yaml]`: the same `nel serve`, run as a SLURM job.

The job script comes from the SlurmLauncher's writer (nel_resources.launchers.slurm:
`SbatchHeader` from `cluster:` and its node pool, `render_script`) and runs `nel serve` with
every serve option of this command plus `--endpoint-file <output dir>/endpoint.txt`. The
serving process writes that file itself once its `/health` answers (benchmarks.serve_endpoint),
with `endpoint.json` beside it naming the job; this command waits for a file naming *its*
job while watching the job's state, and reports a job that ended first with its log's tail.

Layout under the output dir:
  endpoint.txt, endpoint.json      written by the serving job (removed when it stops)
  slurm/serve-<stamp>/serve.sbatch the job script
  slurm/serve-<stamp>/serve-<job id>.log

No Dagster here (`nel serve` must not pay its import time).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.errors import NelError
from benchmarks.uri_schemes import is_uri
from nel_resources.config import ConfigError

# Options of the submitting command only: the job's `nel serve` does not get them.
_SUBMIT_ONLY = frozenset({"slurm", "output_dir", "node_pool", "slurm_timeout", "no_wait",
                          "endpoint_file", "help"})
# What `nel serve --slurm` reads of a config: `cluster:` and `output.dir`. Anything else in
# the file would be silently ignored, so it is refused.
_CLUSTER_UNUSED = {
    "shards": "serving is not sharded",
    "auto_resume": "a server job is not resubmitted",
    "max_retries": "a server job is not resubmitted",
    "max_walltime": "a server job is not resubmitted",
    "hostname": "submitting over SSH to a login node (run nel on the submit host itself)",
    "username": "submitting over SSH to a login node (run nel on the submit host itself)",
    "conda_env": "activating a conda environment in the job (activate it before nel; the "
                 "job inherits the environment)",
    "eval_image": "running nel in a container image",
    "container_mounts": "container mounts",
    "shm_size": "container shared memory",
    "mount_home": "container home mounts",
    "slurm": "the `cluster.slurm` block (write its keys at the top of `cluster:`)",
}
LOG_TAIL_LINES = 20


def _say(msg: str) -> None:
    print(f"slurm: {msg}", file=sys.stderr, flush=True)


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


def _load_cluster(config: str) -> Any:
    """The config's `cluster:` and `output:` (a default slurm cluster without a file)."""
    from nel_resources.config import NelConfig
    from nel_resources.config.loading import load_config

    if not config:
        return NelConfig()  # `cluster:` defaults, no pool: the cluster's default partition
    cfg = load_config(config)
    where = cfg._where

    def refuse(path: tuple[str, ...], why: str) -> ConfigError:
        return ConfigError(f"{where}:{cfg.line_of(*path) or '?'}: key {'.'.join(path)}: {why}")

    if cfg.cluster.type != "slurm":
        raise refuse(("cluster", "type"), f"`nel serve --slurm` needs `cluster: {{type: slurm, "
                     f"node_pools: ...}}` (this config's cluster is {cfg.cluster.type!r})")
    for section in ("services", "sandboxes", "benchmarks", "comparison", "checkpoints", "data_dir"):
        if (section,) in cfg._lines:
            raise refuse((section,), "`nel serve --slurm` reads only `cluster:` and `output.dir` "
                         "of its config (what to serve comes from the command line); remove it")
    for path in cfg._lines:
        if len(path) == 2 and path[0] == "output" and path[1] != "dir":
            raise refuse(path, "`nel serve --slurm` reads only `output.dir`; remove it")
    for key, why in _CLUSTER_UNUSED.items():
        if ("cluster", key) in cfg._lines and not (key == "auto_resume" and not cfg.cluster.auto_resume):
            raise refuse(("cluster", key), f"not used by `nel serve --slurm`: {why}; remove it")
    return cfg


def _pool(cfg: Any, name: str | None) -> Any:
    pools = cfg.cluster.node_pools
    if name is not None:
        if name not in pools:
            raise NelError(f"--node-pool {name!r} is not one of cluster.node_pools "
                           f"({', '.join(pools) or 'none defined'})")
        pool = pools[name]
    elif len(pools) > 1:
        raise NelError(f"the config has {len(pools)} node pools ({', '.join(pools)}): name the "
                       "one to serve on with --node-pool")
    else:
        pool = next(iter(pools.values()), None)
    if pool is not None and pool.nodes != 1:
        raise NelError(f"node pool has nodes: {pool.nodes}; `nel serve` runs one server on one "
                       "node: use a pool with nodes: 1")
    return pool


def write_script(cfg: Any, pool: Any, run_dir: Path, argv: list[str], endpoint: Path,
                 benchmark: str) -> Path:
    """serve.sbatch: the cluster's `#SBATCH` lines and `exec nel serve ... --endpoint-file`."""
    from nel_resources.launchers.slurm import SbatchHeader, render_script

    c = cfg.cluster
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(benchmark).stem if benchmark.endswith(".py")
                  else benchmark.split(":")[0] if "://" not in benchmark else "gym")[:40]
    header = SbatchHeader(
        job_name=f"nel-serve-{slug}", log=str(run_dir / "serve-%j.log"), walltime=c.walltime,
        partition=pool.partition if pool else None, nodes=1,
        ntasks_per_node=pool.ntasks_per_node if pool else 1, gres=pool.gres if pool else None,
        gpus_per_node=pool.gpus_per_node if pool else None, account=c.account,
        comment=c.sbatch_comment,
        extra_flags={**c.sbatch_extra_flags, **(pool.sbatch_extra_flags if pool else {})})
    cmd = [sys.executable, "-m", "dagster_project.cli.main", "serve", *argv,
           "--endpoint-file", str(endpoint)]
    body = "\n".join([
        f"cd {shlex.quote(os.getcwd())}",
        'echo "nel: serve job ${SLURM_JOB_ID} on $(hostname)"',
        # exec: scancel's SIGTERM reaches the server itself, which removes endpoint.txt
        "exec " + " ".join(shlex.quote(a) for a in cmd)])
    run_dir.mkdir(parents=True, exist_ok=True)
    script = run_dir / "serve.sbatch"
    script.write_text(render_script(header, body, env=dict(c.container_env)))
    script.chmod(0o755)
    return script


def _log_tail(log: Path, n: int = LOG_TAIL_LINES) -> list[str]:
    try:
        return log.read_text(errors="replace").splitlines()[-n:]
    except OSError:
        return []


def _our_endpoint(endpoint: Path, job_id: str) -> str | None:
    """endpoint.txt's `host:port` once the job `job_id` wrote it (an earlier job's is not)."""
    from benchmarks.serve_endpoint import read_owner

    owner = read_owner(endpoint)
    if owner is None or str(owner.get("job_id")) != job_id:
        return None
    try:
        text = endpoint.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return text or None


def _claim(endpoint: Path, sl: Any) -> None:
    """Clear a stale endpoint.txt, unless a job that may still serve owns it."""
    from benchmarks.serve_endpoint import clear_endpoint, read_owner

    owner = read_owner(endpoint) or {}
    prev = str(owner.get("job_id") or "")
    if prev.isdigit():
        st = sl.states([prev]).get(prev)
        if st is not None and not st.done:
            raise NelError(f"{endpoint} belongs to SLURM job {prev}, which is {st.state}: stop it "
                           f"(scancel {prev}) or serve into another --output-dir")
    clear_endpoint(endpoint)


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
    from nel_resources.launchers.slurm import SlurmError, SlurmLauncher

    cfg = _load_cluster(args.slurm)
    pool = _pool(cfg, args.node_pool)
    _check_benchmark(args)
    submit = cfg.cluster.submit is not False
    if submit and (why := SlurmLauncher.unavailable_reason()):
        raise NelError(f"--slurm cannot submit from here: {why}")
    out = Path(args.output_dir or cfg.output.dir).expanduser().resolve()
    endpoint = out / "endpoint.txt"
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
    run_dir = out / "slurm" / f"serve-{stamp}"
    argv = job_argv(parser, args)
    if not submit:
        script = write_script(cfg, pool, run_dir, argv, endpoint, args.benchmark)
        print(f"wrote {script}")
        print(f"to submit: sbatch {script}  (the job writes {endpoint} once it serves)")
        return 0
    sl = SlurmLauncher()
    _claim(endpoint, sl)
    script = write_script(cfg, pool, run_dir, argv, endpoint, args.benchmark)
    try:
        job_id = sl.submit(script)
    except SlurmError as exc:
        where = f" (partition {pool.partition!r})" if pool is not None else ""
        raise NelError(f"SLURM refused the serve job{where}: {exc}") from None
    log = run_dir / f"serve-{job_id}.log"
    if args.host in ("127.0.0.1", "localhost", "::1"):
        _say(f"note: the server binds {args.host}, so only processes on its node reach it "
             "(--host 0.0.0.0 serves the other nodes)")
    if args.no_wait:
        _say(f"submitted serve job {job_id}; {endpoint} appears once it serves")
        _print_job(job_id, endpoint, log, None)
        return 0
    _say(f"submitted serve job {job_id}; waiting up to {args.slurm_timeout:.0f} s for "
         f"{endpoint} (log: {log})")
    previous = signal.getsignal(signal.SIGTERM)
    own_handler = previous in (signal.SIG_DFL, signal.SIG_IGN, None)
    if own_handler:
        signal.signal(signal.SIGTERM, _interrupt)  # `kill` cancels the job as Ctrl-C does
    try:
        return _wait_until_serving(sl, job_id, endpoint, log, args.slurm_timeout)
    except KeyboardInterrupt:
        sl.cancel([job_id])
        gone = sl.wait_gone([job_id])
        _say(f"interrupted: cancelled job {job_id}" + ("" if gone else " (squeue still lists it)"))
        raise
    finally:
        if own_handler:
            signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _wait_until_serving(sl: Any, job_id: str, endpoint: Path, log: Path, timeout_s: float) -> int:
    from nel_resources.launchers.slurm import TaskState, describe

    end = time.monotonic() + timeout_s
    seen = ""
    while True:
        served = _our_endpoint(endpoint, job_id)
        if served is not None:
            _print_job(job_id, endpoint, log, served)
            return 0
        st = sl.states([job_id]).get(job_id) or TaskState(job_id, "UNKNOWN")
        if st.state != seen:
            seen = st.state
            _say(f"job {job_id}: {describe(st)}")
        if st.done or st.state == "UNKNOWN":
            if (served := _our_endpoint(endpoint, job_id)) is not None:
                _print_job(job_id, endpoint, log, served)  # it wrote the file, then ended
                return 0
            tail = _log_tail(log)
            print(f"error: serve job {job_id} ended {describe(st)} before it served; "
                  + (f"the last {len(tail)} lines of {log}:" if tail else f"its log {log} is empty"),
                  file=sys.stderr)
            for line in tail:
                print(f"  | {line}", file=sys.stderr)
            return 1
        if time.monotonic() > end:
            sl.cancel([job_id])
            sl.wait_gone([job_id])
            print(f"error: serve job {job_id} did not serve within {timeout_s:.0f} s (it was "
                  f"{describe(st)}); cancelled it. Raise --slurm-timeout, or use --no-wait and "
                  f"watch {endpoint}", file=sys.stderr)
            return 1
        time.sleep(sl.poll_s)


def _print_job(job_id: str, endpoint_file: Path, log: Path, endpoint: str | None) -> None:
    """What a user (or a script: `key: value` lines) needs: where, which job, how to stop."""
    lines = []
    if endpoint is not None:
        lines += [f"endpoint: {endpoint}", f"gym: gym://{endpoint}"]
    lines += [f"endpoint_file: {endpoint_file}", f"job_id: {job_id}", f"log: {log}",
              f"stop: scancel {job_id}"]
    print("\n".join(lines), flush=True)
