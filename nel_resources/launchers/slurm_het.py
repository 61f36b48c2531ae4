"""Heterogeneous SLURM jobs: `cluster.type: slurm` when the services sit on different node
pools (`services.<n>.node_pool`).

The eval client (`nel eval run --slurm-task`) runs on the first pool of `cluster.node_pools`,
as in NeMo Evaluator; each launched service (`llama_cpp`, ...) whose pool is another one runs
on a component of its own: one `#SBATCH hetjob`-separated block per pool, with that pool's
partition/nodes/ntasks_per_node/gres/gpus_per_node/sbatch_extra_flags. The batch script (on
component 0) starts each such service with `srun --het-group=K nel eval run ...
--slurm-service NAME`; that process starts the server on its node, waits until it answers and
writes its URL to `<run dir>/services/<job id>/NAME.url` (or `NAME.error`, one line). The eval
client waits for those files and talks to the URLs; when it ends, the script stops the steps
(and SLURM ends every step with the job anyway).

SLURM refuses job arrays of heterogeneous jobs, so here every stale (benchmark, model, shard)
partition is one job: `sbatch <script> partitions-<k>.json <index>`, and the merge job waits
on all of them (`afterok:<id>:<id>...`). A partition's job has a component only for the pools
of the launched services it uses (its model's service and its judges): a partition of a model
served elsewhere starts no server it does not talk to.
"""

from __future__ import annotations

import os
import shlex
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.errors import NelError
from nel_resources.config import NelConfig
from nel_resources.config.services import LAUNCHED_TYPES
from nel_resources.launchers.pyxis import HET_GROUP_ENV
from nel_resources.launchers.slurm import SbatchHeader, render_het_script, render_script
from nel_resources.launchers.slurm_nodes import node_address

# A component's services write these into the job's services directory; the job script
# writes STOP_FILE when the eval client ended (each service then stops and exits).
URL_SUFFIX, ERROR_SUFFIX, STOP_FILE = ".url", ".error", ".stop"
# How many of a server's last log lines its `.error` file carries.
ERROR_TAIL_LINES = 5
# How long the job script lets the services stop before it cancels their steps.
STOP_GRACE_S = 30


@dataclass(frozen=True)
class HetPlan:
    """Where things run: the eval client's pool and each launched service off that pool."""

    eval_pool: str
    pool_of: Mapping[str, str]  # launched service name -> its (non-eval) node pool

    def pools_for(self, services: Sequence[str], order: Sequence[str]) -> tuple[str, ...]:
        """The non-eval pools `services` need (their Dynamo roles' too), in `cluster.node_pools` order."""
        wanted = {p for k, p in self.pool_of.items() if k.split("@")[0] in services}
        return tuple(p for p in order if p in wanted)


def _role_pools(svc: Any) -> dict[str, str]:
    """The node pools of a disaggregated Dynamo service's roles (0.3.0 places each role's
    workers on its `prefill.node_pool` / `decode.node_pool`)."""
    if svc.type != "dynamo":
        return {}
    return {r: str(c.node_pool) for r, c in (("prefill", svc.prefill), ("decode", svc.decode))
            if c is not None and c.node_pool}


def het_plan(cfg: NelConfig) -> HetPlan | None:
    """The heterogeneous layout of `cfg`, or None when its services name at most one pool
    (then one array job does it: slurm_submit). A Dynamo role on another pool than the eval
    client's is a component of its own, named `<service>@<role>`."""
    named = {s.node_pool for s in cfg.services.values() if s.node_pool}
    named |= {p for s in cfg.services.values() for p in _role_pools(s).values()}
    if len(named) < 2 or not cfg.cluster.node_pools:  # only slurm clusters have node pools
        return None
    eval_pool = next(iter(cfg.cluster.node_pools))
    pool_of = {name: str(s.node_pool) for name, s in cfg.services.items()
               if s.node_pool and s.node_pool != eval_pool and s.type in LAUNCHED_TYPES}
    for name, s in cfg.services.items():
        if name not in pool_of:  # a deployment on another pool takes its roles with it
            pool_of.update({f"{name}@{r}": p for r, p in _role_pools(s).items() if p != eval_pool})
    return HetPlan(eval_pool, pool_of)


def services_of(resolved: Any, benchmark: str, model: str) -> tuple[str, ...]:
    """The services one (benchmark, model) partition talks to: its model's, its judges'
    and its solver's tool services."""
    bench = resolved.benchmark(benchmark)
    if bench is None:
        return ()
    names: set[str] = set()
    for run in bench.runs:
        if run.model == model:
            names.add(run.service.name)
            names.update(j.service_name for j in run.judges)
            names.update(run.tool_services)
    return tuple(sorted(names))


def pool_header(cfg: NelConfig, pool_name: str, job_name: str, log: str, *,
                servers: bool = False) -> SbatchHeader:
    """The `#SBATCH` lines of `cluster:` with node pool `pool_name`; `servers`: the job
    starts the launched services placed there, so it asks for the nodes a multi-node one
    needs (launchers.slurm_multinode.job_nodes)."""
    from nel_resources.launchers.slurm_multinode import job_nodes

    c = cfg.cluster
    pool = c.node_pools[pool_name]
    return SbatchHeader(job_name=job_name, log=log, walltime=c.walltime, partition=pool.partition,
                        nodes=job_nodes(cfg, pool_name) if servers else pool.nodes, ntasks_per_node=pool.ntasks_per_node, gres=pool.gres,
                        gpus_per_node=pool.gpus_per_node, account=c.account,
                        comment=c.sbatch_comment, extra_flags={**c.sbatch_extra_flags,
                                                               **pool.sbatch_extra_flags})


def script_name(pools: tuple[str, ...]) -> str:
    """`eval.sbatch` (the eval pool alone) or `eval-het-<pool>[-<pool>...].sbatch`."""
    return "eval.sbatch" if not pools else f"eval-het-{'-'.join(pools)}.sbatch"


def write_het_script(cfg: NelConfig, plan: HetPlan, pools: tuple[str, ...], run_dir: Path,
                     nel_command: Callable[[list[str]], str], preamble: list[str]) -> Path:
    """The job script of the partitions needing `pools` besides the eval pool; its
    arguments are a partition list and an index into it."""
    log = str(run_dir / "logs" / "eval-%j.log")
    env = dict(cfg.cluster.container_env)
    task = nel_command(["--slurm-task"]) + ' "$1" --slurm-index "$2"'
    lines = [*preamble,
             'echo "nel: partition $2 of $1, job ${SLURM_JOB_ID} on $(hostname)"']
    if not pools:
        path = run_dir / script_name(pools)
        path.write_text(render_script(pool_header(cfg, plan.eval_pool, "nel-eval", log, servers=True),
                                      "\n".join([*lines, task]), env=env))
        path.chmod(0o755)
        return path
    svc_dir = shlex.quote(str(run_dir / "services")) + '/"${SLURM_JOB_ID}"'
    lines += [f"svc_dir={svc_dir}", 'mkdir -p "$svc_dir"', "pids=()",
              '# Dynamo workers on another pool find NATS and etcd through it (services.dynamo_remote)',
              'export NEL_SLURM_SERVICES_DIR="$svc_dir"',
              "# When the eval client ends, each service stops its server and exits; one that is",
              f"# still there after {STOP_GRACE_S} s has its step cancelled (and SLURM ends every step",
              "# with the job anyway).",
              "stop_services() {",
              '  [[ ${#pids[@]} -gt 0 ]] || return 0',
              f'  touch "$svc_dir/{STOP_FILE}"',
              f'  ( sleep {STOP_GRACE_S}; kill "${{pids[@]}}" 2>/dev/null ) &',
              '  wait "${pids[@]}" 2>/dev/null || true',
              "}",
              "trap stop_services EXIT"]
    for k, pool in enumerate(pools, start=1):
        for name in sorted(n for n, p in plan.pool_of.items() if p == pool):
            svc = cfg.services[name.split("@")[0]]
            what = f"{svc.type} {name.split('@')[1]} workers" if "@" in name else svc.type
            lines += [f"# services.{name} ({what}) on node pool {pool}: het group {k}",
                      # HET_GROUP_ENV: a step the service starts (its Pyxis container) runs
                      # on this component too, not on component 0 (srun's default)
                      f"{HET_GROUP_ENV}={k} srun --het-group={k} --nodes=1 --ntasks=1 --overlap "
                      + nel_command(["--slurm-service", name]) + ' --slurm-services "$svc_dir" &',
                      "pids+=($!)"]
    lines.append(task + ' --slurm-services "$svc_dir"')
    headers = [pool_header(cfg, plan.eval_pool, "nel-eval", log, servers=True),
               *(pool_header(cfg, p, "nel-eval", log) for p in pools)]
    path = run_dir / script_name(pools)
    path.write_text(render_het_script(headers, "\n".join(lines), env=env))
    path.chmod(0o755)
    return path


# -- inside the jobs -------------------------------------------------------------------------

def serve_service(cfg: NelConfig, name: str, svc_dir: Path) -> int:
    """`--slurm-service NAME`: start launched service NAME on this node, write its URL to
    `svc_dir/NAME.url` once it answers, serve until the job script writes `svc_dir/.stop`
    (or SIGTERM/SIGINT), then stop it. A start that fails, or a server that dies, writes
    `NAME.error` (one line) and returns 1."""
    from nel_resources.launchers.pyxis import service_prefix
    from nel_resources.services.launch import make_server

    base, _, role = name.partition("@")
    if base not in cfg.services or cfg.services[base].type not in LAUNCHED_TYPES or (
            role and role not in _role_pools(cfg.services[base])):
        raise NelError(f"--slurm-service {name!r}: not a launched service of this config")
    svc = cfg.services[base]
    svc_dir.mkdir(parents=True, exist_ok=True)

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    # Steps may start with SIGTERM ignored; srun forwards SIGTERM when the job script stops it.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    if role:  # the workers of one role of a Dynamo deployment
        from nel_resources.services.dynamo_remote import serve_role

        return serve_role(base, svc, role, svc_dir, svc_dir / STOP_FILE, service_prefix(cfg.cluster, svc))
    # A loopback host would be unreachable from the eval node: bind the node's address.
    loopback = svc.host in ("127.0.0.1", "localhost", "::1")
    addr = node_address() if loopback or svc.host in ("0.0.0.0", "::") else svc.host
    bind = addr if loopback else svc.host
    url_file, err_file = svc_dir / f"{name}{URL_SUFFIX}", svc_dir / f"{name}{ERROR_SUFFIX}"
    try:
        # svc_dir is the job's own directory already: the plain `<name>.log` there
        bound = svc.model_copy(update={"host": bind})
        server = make_server(name, bound, svc_dir, prefix=service_prefix(cfg.cluster, bound),
                             log_name=f"{name}.log")
    except NelError as exc:  # its command cannot be built here (e.g. the GGUF file is missing)
        _write(err_file, _one_line(exc))
        return 1
    try:
        try:
            server.start()
        except NelError as exc:
            # The eval client reports this file: give it the server's own last lines too.
            tail = [ln for ln in _log_lines(server.log_path) if ln.strip()][-ERROR_TAIL_LINES:]
            _write(err_file, "\n".join([f"{_one_line(exc).split('; log ')[0]} (log {server.log_path})",
                                        *(f"  {ln}" for ln in tail)]))
            return 1
        url = f"http://{addr}:{server.port}/v1"
        print(f"nel: services.{name} serves at {url} (pid {server.pid}, log {server.log_path})", flush=True)
        _write(url_file, url)
        stop_file = svc_dir / STOP_FILE
        while not stop_file.exists():
            if server.process is None or not server.process.is_running():
                url_file.unlink(missing_ok=True)
                _write(err_file, f"the {svc.type} server exited (log {server.log_path})")
                return 1
            time.sleep(0.5)
        print(f"nel: services.{name} stopping (the eval client ended)", flush=True)
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        url_file.unlink(missing_ok=True)  # first: no one may take a stopping server's URL
        server.stop()


def _log_lines(path: Path) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()
    except OSError:
        return []


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text + "\n")
    os.replace(tmp, path)


def wait_for_services(cfg: NelConfig, names: Sequence[str], svc_dir: Path,
                      poll_s: float = 0.5) -> dict[str, str]:
    """The URLs the services' components wrote, waiting at most their `startup_timeout`
    (plus a minute for the step to start).

    Raises:
        NelError: a service wrote an error, or wrote nothing in time (one line).
    """
    deadline = time.monotonic() + max(cfg.services[n].startup_timeout for n in names) + 60
    urls: dict[str, str] = {}
    while True:
        for name in names:
            if name in urls:
                continue
            err = svc_dir / f"{name}{ERROR_SUFFIX}"
            if err.exists():
                raise NelError(f"services.{name} did not start on node pool "
                               f"{cfg.services[name].node_pool}: {err.read_text().strip()}")
            url = svc_dir / f"{name}{URL_SUFFIX}"
            if url.exists():
                urls[name] = url.read_text().strip()
        if len(urls) == len(names):
            return urls
        if time.monotonic() > deadline:
            missing = ", ".join(n for n in names if n not in urls)
            raise NelError(f"no URL from {missing} in {svc_dir} within its startup_timeout: "
                           "see the job log")
        time.sleep(poll_s)


def elsewhere_for(cfg: NelConfig, plan: HetPlan, needed: Sequence[str],
                  urls: Mapping[str, str]) -> dict[str, str | None]:
    """What the eval client must not start itself: every service of another pool (at its
    URL when this partition uses it, else not at all). A Dynamo role of another pool maps
    to its pool (the deployment beside the eval client leaves those workers to the role's
    component); a deployment this partition does not use is not started at all."""
    away: dict[str, str | None] = {}
    for key, pool in plan.pool_of.items():
        base = key.split("@")[0]
        if "@" not in key:
            away[key] = urls.get(key) if key in needed else None
        elif base in needed:
            away[key] = pool
        else:
            away[base] = None
    return away


def describe_plan(plan: HetPlan) -> str:
    """`eval on pool cpu; services.tiny on pool gpu`."""
    placed = "; ".join(f"services.{n} on pool {p}" for n, p in sorted(plan.pool_of.items()))
    return f"eval on pool {plan.eval_pool}" + (f"; {placed}" if placed else "")
