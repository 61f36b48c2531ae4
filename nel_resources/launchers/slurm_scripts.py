"""The files of one `cluster.type: slurm` submission, `<output>/slurm/<stamp>/`:

  partitions-<k>.json  the array index -> partition list of attempt k (0, then auto-resumes);
                       `partitions-<k>-<j>.json` for array j when attempt k was split
  eval.sbatch          the array script: task i runs `nel eval run ... --slurm-task <list>`
                       (`eval-het-<pools>.sbatch`: a heterogeneous job's, slurm_het)
  merge.sbatch         the merge script: `nel eval run ... --slurm-merge <dir>`
  jobs.json            the job ids submitted so far (slurm_submit), each array with its
                       partition file (the merge job reads them from here)
  logs/                one log per task and one for the merge

No Dagster here.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.errors import NelError
from nel_resources.config import NelConfig, ServiceConfig
from nel_resources.launchers.pyxis import eval_prefix, service_prefix
from nel_resources.launchers.slurm import SbatchHeader, render_script
from nel_resources.launchers.slurm_het import HetPlan, het_plan, pool_header, write_het_script

# Flags of the submitting command that mean nothing inside a task or the merge job.
_SUBMIT_ONLY_FLAGS = {"--no-wait", "--json", "--background"}


@dataclass(frozen=True)
class Partition:
    """One array task: a (benchmark, model, shard) partition and why it runs."""

    benchmark: str
    asset_name: str
    model: str
    shard: int
    total: int
    reason: str

    def label(self) -> str:
        """`gsm8k/model shard 2`."""
        return f"{self.benchmark}/{self.model} shard {self.shard}"


def eval_pool(cfg: NelConfig) -> str:
    """The node pool the eval client (array tasks, merge job) runs on: the one the services
    or sandboxes name, else the first (as NeMo Evaluator picks it); with services on several
    pools (a heterogeneous job, slurm_het), the first."""
    used = [s.node_pool for s in cfg.services.values() if s.node_pool]
    used += [s.node_pool for s in cfg.sandboxes.values() if s.node_pool]
    pools = list(cfg.cluster.node_pools)
    return used[0] if used and len(set(used)) == 1 else pools[0]


def header_for(cfg: NelConfig, job_name: str, log: str, *, servers: bool = False) -> SbatchHeader:
    """The `#SBATCH` lines of `cluster:` and the eval client's node pool (`servers`: the
    job starts the launched services, so it asks for the nodes a multi-node one needs)."""
    return pool_header(cfg, eval_pool(cfg), job_name, log, servers=servers)


def _nel_command(cfg: NelConfig, argv: list[str], extra: list[str]) -> str:
    """The job's `nel eval run` line: the submitting command's own arguments (so -O
    overrides and flags hold), run with this interpreter from the same directory; with
    `cluster.eval_image`, the image's `nel` in a Pyxis container step (launchers.pyxis).
    A service component of a heterogeneous job (`--slurm-service`) stays on the host: it
    starts its server (in the service's own image) with `srun`, which a container lacks."""
    keep = [a for a in argv if a not in _SUBMIT_ONLY_FLAGS]
    if keep[:2] != ["eval", "run"]:
        keep = ["eval", "run", *keep]
    if "--no-progress" not in keep:
        keep.append("--no-progress")  # a job's log is no terminal
    contained = [] if "--slurm-service" in extra else eval_prefix(cfg.cluster, cfg.output.dir)
    nel = ["nel"] if contained else [sys.executable, "-m", "dagster_project.cli.main"]
    args = [*contained, *nel, *keep, *extra]
    return " ".join(shlex.quote(a) for a in args)


def _preamble(cfg: NelConfig) -> list[str]:
    return [*_service_comments(cfg), f"cd {shlex.quote(os.getcwd())}"]


def write_merge_script(cfg: NelConfig, run_dir: Path, argv: list[str]) -> Path:
    """merge.sbatch: bundles, reports and comparisons once every task succeeded."""
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    body = "\n".join([*_preamble(cfg), _nel_command(cfg, argv, ["--slurm-merge", str(run_dir)])])
    path = run_dir / "merge.sbatch"
    path.write_text(render_script(header_for(cfg, "nel-merge", str(run_dir / "logs" / "merge-%j.log")),
                                  body, env=dict(cfg.cluster.container_env)))
    path.chmod(0o755)
    return path


def write_het_scripts(cfg: NelConfig, plan: HetPlan, run_dir: Path, argv: list[str],
                      groups: set[tuple[str, ...]]) -> dict[tuple[str, ...], Path]:
    """One job script per set of pools some partitions need (slurm_het)."""
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    return {g: write_het_script(cfg, plan, g, run_dir, lambda extra: _nel_command(cfg, argv, extra),
                                _preamble(cfg)) for g in sorted(groups)}


def write_scripts(cfg: NelConfig, run_dir: Path, argv: list[str]) -> tuple[Path, Path]:
    """Write eval.sbatch (the array; its argument is a partition list) and merge.sbatch."""
    merge_script = write_merge_script(cfg, run_dir, argv)
    eval_body = "\n".join([
        *_preamble(cfg),
        'echo "nel: array task ${SLURM_ARRAY_TASK_ID} of job ${SLURM_ARRAY_JOB_ID} on $(hostname)"',
        _nel_command(cfg, argv, ["--slurm-task"]) + ' "$1"'])
    eval_script = run_dir / "eval.sbatch"
    eval_script.write_text(render_script(header_for(cfg, "nel-eval", str(run_dir / "logs" / "eval-%A_%a.log"),
                                                    servers=True),
                                         eval_body, env=dict(cfg.cluster.container_env)))
    eval_script.chmod(0o755)
    return eval_script, merge_script


def _service_comments(cfg: NelConfig) -> list[str]:
    """What the job starts besides nel: each launched service's command (nel starts it inside
    the job, waits for its health check and stops it when the task ends)."""
    from nel_resources.config.services import LAUNCHED_TYPES

    lines = []
    for name, svc in cfg.services.items():
        if svc.type in LAUNCHED_TYPES:
            from nel_resources.services.launch import service_command

            # as the job runs it: in the service's image when it has one (its srun line)
            step = service_prefix(cfg.cluster, svc, {"SLURM_JOB_ID": "<job>", "HOME": str(Path.home())})
            plan = het_plan(cfg)
            try:
                if svc.type == "dynamo":  # NATS, etcd, the frontend, the workers (services.dynamo)
                    from nel_resources.services.dynamo_commands import describe

                    away = {k.split("@")[1]: p for k, p in (plan.pool_of.items() if plan else ())
                            if k.startswith(f"{name}@")}
                    cmd = describe(name, svc, svc.port or 8000, in_image=bool(step), step=step, where=away)
                else:
                    cmd = " ".join(shlex.quote(a) for a in [*step, *service_command(name, svc, svc.port or 8000)])
            except NelError as exc:
                cmd = f"(cannot be built here: {exc})"
            where = (f"on its own component (node pool {plan.pool_of[name]}, bound to the node's "
                     "address)" if plan is not None and name in plan.pool_of else "in the job")
            if svc.num_nodes > 1:
                lines += _multinode_comments(cfg, name, svc)
                continue
            lines.append(f"# nel launches services.{name} ({svc.type}) {where}: {cmd}")
    return lines


def _multinode_comments(cfg: NelConfig, name: str, svc: ServiceConfig) -> list[str]:
    """A multi-node server: the step over the job's nodes and the script each node runs."""
    from nel_resources.launchers import slurm_multinode as mn
    from nel_resources.services.launch import service_command

    try:
        command = service_command(name, svc, svc.port or 8000)
    except NelError as exc:
        return [f"# nel launches services.{name} ({svc.type}) over {svc.num_nodes} nodes "
                f"(cannot be built here: {exc})"]
    env = {"SLURM_JOB_ID": "<job>", "HOME": str(Path.home())}
    logs = Path(cfg.output.dir).expanduser().resolve() / "logs"
    shown = mn.describe(name, svc, command, logs, mn.pyxis_options(cfg.cluster, svc, logs, env))
    return [f"# nel launches services.{name} ({svc.type}) over {svc.num_nodes} nodes of the job, "
            "its head on this node:", *(f"#   {ln}" for ln in shown)]


def write_partitions(run_dir: Path, attempt: int, parts: list[Partition], array: int | None = None) -> Path:
    """The array index -> partition list of one array: `partitions-<attempt>.json`, or
    `partitions-<attempt>-<array>.json` when the attempt was split into several arrays."""
    path = run_dir / (f"partitions-{attempt}.json" if array is None else f"partitions-{attempt}-{array}.json")
    path.write_text(json.dumps([asdict(p) for p in parts], indent=1))
    return path


def read_partitions(path: Path) -> list[Partition]:
    """The list `write_partitions` wrote."""
    return [Partition(**d) for d in json.loads(path.read_text())]


def split(parts: list[Partition], per_array: int) -> list[list[Partition]]:
    """`parts` in consecutive chunks of at most `per_array` (one chunk per array job)."""
    if per_array < 1:
        raise ValueError("an array holds at least one task")
    return [parts[i:i + per_array] for i in range(0, len(parts), per_array)]


def task_partition(part_file: Path, env: dict[str, str] | None = None,
                   index: int | None = None) -> Partition:
    """The partition of this task: `index` (a heterogeneous job's argument), else the array
    task's SLURM_ARRAY_TASK_ID, indexes the list."""
    e = os.environ if env is None else env
    raw = str(index) if index is not None else e.get("SLURM_ARRAY_TASK_ID", "")
    if not raw.isdigit():
        raise NelError("--slurm-task runs inside a SLURM array task (SLURM_ARRAY_TASK_ID is not set)")
    parts = read_partitions(part_file)
    i = int(raw)
    if i >= len(parts):
        raise NelError(f"array task {i} has no partition in {part_file} ({len(parts)} listed)")
    return parts[i]
