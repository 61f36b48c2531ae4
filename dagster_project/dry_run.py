"""`nel eval run --dry-run`: the plan of a run, from the same checks and the same planner
as a real run, without sending a request, starting a model server or writing anything (but
the sbatch scripts of a `cluster.type: slurm` config, as NeMo Evaluator's dry run writes them).
Checks that need what only the run has are listed, not made (nel_resources.checks.deferred).

No Dagster import: the planner reads the stored shard fingerprints directly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dagster_project import exit_codes
from nel_resources.config import NelConfig
from nel_resources.wire.endpoint_url import redact_url


@dataclass
class PlannedShard:
    """One (benchmark, model, shard) partition and what a run would do with it."""

    benchmark: str
    model: str
    shard: int
    total: int
    n_problems: int | None  # None: not known until the data is here
    action: str  # "run" or "skip"
    reason: str  # why it runs (missing / stale / failed samples) or "up to date"


@dataclass
class DryRunPlan:
    """What `nel eval run` would do with a config."""

    output_dir: str
    services: dict[str, dict[str, Any]]
    benchmarks: list[dict[str, Any]] = field(default_factory=list)
    shards: list[PlannedShard] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: checks only the run can make (data, Docker, AWS, agent programs): listed, not made
    deferred: list[str] = field(default_factory=list)
    #: `cluster.type: slurm`: what the dry run wrote (the sbatch scripts) and how to submit it
    written: list[str] = field(default_factory=list)
    # the eval client's Pyxis container step (`cluster.eval_image` on SLURM), if any
    eval_container: str | None = None

    @property
    def exit_status(self) -> int:
        """0 when the run would start; EVAL_FAILED when a benchmark could not be planned."""
        return exit_codes.EVAL_FAILED if self.errors else exit_codes.OK

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (`--dry-run --json`)."""
        return {"dry_run": True, "output_dir": self.output_dir, "services": self.services,
                "benchmarks": self.benchmarks, "shards": [asdict(s) for s in self.shards],
                "would_run": sum(s.action == "run" for s in self.shards),
                "up_to_date": sum(s.action == "skip" for s in self.shards),
                "deferred_checks": self.deferred, "written": self.written, "errors": self.errors,
                "exit_status": self.exit_status, "eval_container": self.eval_container}


def _service_summary(cfg: NelConfig, name: str) -> dict[str, Any]:
    svc = cfg.services[name]
    launched = svc.type not in ("api", "gym")
    return {"type": svc.type, "model": svc.model, "protocol": svc.protocol,
            "url": redact_url(svc.url) if svc.url and not launched else None,
            "launch": "started by nel when a shard runs (not in a dry run)" if launched else None,
            "command": _launch_command(cfg, name) if launched else None,
            "generation": svc.generation.to_request()}


def _launch_command(cfg: NelConfig, name: str) -> str | None:
    """The command a launched server would run with (and where), for the plan."""
    import shlex

    from benchmarks.errors import NelError
    from nel_resources.config.services import LAUNCHED_TYPES
    from nel_resources.launchers.pyxis import service_prefix
    from nel_resources.services.launch import service_command

    svc = cfg.services[name]
    if svc.type not in LAUNCHED_TYPES:
        return None
    # in its image when it has one (the Pyxis step each SLURM task starts it with)
    step = service_prefix(cfg.cluster, svc, {"SLURM_JOB_ID": "<job>", "HOME": str(Path.home())})
    if svc.type == "dynamo":  # several processes: NATS, etcd, the frontend, the workers
        from nel_resources.services.dynamo_commands import describe

        return describe(name, svc, svc.port or 8000, in_image=bool(step), step=step,
                        where=_role_pools_away(cfg, name))
    try:
        cmd = " ".join(shlex.quote(a) for a in [*step, *service_command(name, svc, svc.port or 8000)])
    except NelError as exc:
        return f"(cannot be built here: {exc})"
    from nel_resources.services.launch import in_container

    if in_container(svc, cfg.cluster.type):
        from nel_resources.services.container_server import docker_run_command, server_image

        try:
            run = docker_run_command("docker", f"nel-{name}-<run>", server_image(name, svc), svc,
                                     service_command(name, svc, svc.port or 8000),
                                     cfg.cluster.shm_size)
        except NelError as exc:
            return f"(cannot be built here: {exc})"
        return " ".join(shlex.quote(a) for a in run) + "  (a container on the Docker engine)"
    pool = cfg.cluster.node_pools.get(svc.node_pool or "") if cfg.cluster.type == "slurm" else None
    if pool is None:
        return cmd
    from nel_resources.launchers.slurm_multinode import job_nodes

    if svc.num_nodes > 1:  # one srun step over the job's nodes, the head on the eval node
        cmd = f"{cmd} ({svc.num_nodes} nodes, one srun step; head on the eval client's node)"
    nodes = job_nodes(cfg, svc.node_pool or "", [name])
    asks = ", ".join(f"{k} {v}" for k, v in (("partition", pool.partition), ("nodes", nodes),
                                               ("gres", pool.gres), ("gpus_per_node", pool.gpus_per_node))
                     if v is not None)
    return f"{cmd}  (in each SLURM task on node pool {svc.node_pool}: {asks})"


def _role_pools_away(cfg: NelConfig, name: str) -> dict[str, str]:
    """Roles of Dynamo service `name` on a component of their own: role -> node pool."""
    from nel_resources.launchers.slurm_het import het_plan

    plan = het_plan(cfg) if cfg.cluster.type == "slurm" else None
    return {k.split("@")[1]: p for k, p in (plan.pool_of.items() if plan else ())
            if k.startswith(f"{name}@")}


def plan_run(cfg: NelConfig, *, resume: bool = True, shard_only: tuple[int, int] | None = None,
             argv: list[str] | None = None) -> DryRunPlan:
    """Validate `cfg` as a run does, then plan every (benchmark, model, shard) (only shard
    `shard_only[0]` when this process is one shard of a distributed run, as the run would).
    A `cluster.type: slurm` config also gets the sbatch scripts of that plan written (the jobs
    run `argv` without `--dry-run`), as NeMo Evaluator's dry run writes them; nothing is
    submitted.

    Raises:
        NelError: a config error (the same ones a run raises before doing anything).
    """
    from nel_resources.checks.deferred import deferring_external_checks

    with deferring_external_checks() as deferred:
        plan, resolved = _plan(cfg, resume=resume, shard_only=shard_only)
    plan.deferred = [d.line() for d in deferred]
    if cfg.cluster.type == "slurm" and argv is not None:
        plan.written = _write_slurm_scripts(cfg, resolved, plan, argv)
    return plan


def _write_slurm_scripts(cfg: NelConfig, resolved: Any, plan: DryRunPlan,
                         argv: list[str]) -> list[str]:
    """The sbatch scripts of the planned partitions (those that would run)."""
    from nel_resources.launchers.slurm_scripts import Partition
    from nel_resources.launchers.slurm_submit import write_for_dry_run

    asset = {b.name: b.asset_name for b in resolved.benchmarks}
    parts = [Partition(s.benchmark, asset[s.benchmark], s.model, s.shard, s.total, s.reason)
             for s in plan.shards if s.action == "run"]
    return write_for_dry_run(cfg, resolved, parts, argv)


def _plan_unknown(plan: DryRunPlan, bench: Any, spec: Any, shard_only: tuple[int, int] | None,
                  until: str) -> None:
    """Plan every shard of `bench` with its problem count unknown (counted once `until`)."""
    plan.benchmarks.append({
        "name": bench.name, "models": sorted(spec.models), "shards": spec.shards,
        "repeats": bench.repeats, "max_problems": bench.max_problems,
        "problem_range": bench.problem_range, "shuffle_seed": None, "problems": None})
    for model in sorted(spec.models):
        for s in range(spec.shards):
            if shard_only is None or s == shard_only[0]:
                plan.shards.append(PlannedShard(bench.name, model, s, spec.shards, None, "run",
                                                f"missing (problems counted once {until})"))


def _served_problems(name: str, params: dict[str, Any] | None) -> bool:
    """Whether benchmark `name` is a `gym://` server whose problems only the server has (no
    `data=` rows file)."""
    from benchmarks.remote import parse_gym_query
    from benchmarks.uri_schemes import is_uri

    if not is_uri(name, "gym"):
        return False
    return parse_gym_query(name)[1].get("data") is None and not (params or {}).get("data")


def _plan(cfg: NelConfig, *, resume: bool,
          shard_only: tuple[int, int] | None) -> tuple[DryRunPlan, Any]:
    from benchmarks.errors import DataMissingError, NelError
    from dagster_project.run_validation import is_config_error, validate_before_run
    from nel_assets.engine.evaluation import evaluate as ev
    from nel_resources.checks.deferred import external, has_deferred
    from nel_resources.storage.store import ResultStore

    resolved = validate_before_run(cfg)
    out = Path(cfg.output.dir).expanduser().resolve()
    used = sorted({s for b in cfg.benchmarks for s in b.service_names(cfg.services)})
    plan = DryRunPlan(str(out), {n: _service_summary(cfg, n) for n in used if n in cfg.services})
    if cfg.cluster.type == "slurm" and cfg.cluster.eval_image:
        import shlex

        from nel_resources.launchers.pyxis import eval_prefix

        plan.eval_container = " ".join(shlex.quote(a) for a in eval_prefix(cfg.cluster, cfg.output.dir))
    store = ResultStore(out)  # read only: nothing is created by planning
    for bench, spec in zip(cfg.benchmarks, resolved.benchmarks, strict=True):
        if spec.name in resolved.unrunnable:  # the run fails it alone, as here
            plan.errors.append(f"{bench.name}: cannot run: {resolved.unrunnable[spec.name]}")
            continue
        if _served_problems(bench.name, bench.params):
            # gym:// without a rows file: the server has the problems. A dry run sends no
            # request; the run asks the server (and refuses one that serves none).
            external("server", NelError(f"{bench.name}: its problems are the server's "
                                        "(/dataset_size, /seed_session), asked when the run "
                                        "starts"))
            _plan_unknown(plan, bench, spec, shard_only, "the server is asked")
            continue
        try:
            tasks = ev.plan(store, spec)
        except DataMissingError as exc:  # the run needs the data; the plan says where to put it
            if not has_deferred("data", repr(bench.name)):  # once per benchmark
                external("data", exc)
            _plan_unknown(plan, bench, spec, shard_only, "the data is here")
            continue
        except Exception as exc:  # the run fails this benchmark alone; say why
            if is_config_error(bench.name, exc):
                raise  # the run refuses the whole config for it: so does the plan
            from dagster_project import run_log

            plan.errors.append(f"{bench.name}: cannot be planned: "
                               f"{run_log.one_line(type(exc).__name__, str(exc))}")
            continue
        first = [t for t in tasks if t.model == (tasks[0].model if tasks else None)]
        plan.benchmarks.append({
            "name": bench.name, "models": sorted({t.model for t in tasks}),
            "shards": spec.shards, "repeats": bench.repeats,
            "max_problems": bench.max_problems, "problem_range": bench.problem_range,
            "shuffle_seed": bench.shuffle_seed if bench.problem_range is None else None,
            "problems": sum(len(t.indices) for t in first)})
        for t in tasks:
            if shard_only is not None and t.shard != shard_only[0]:
                continue
            why = t.reason if resume else "--fresh"
            plan.shards.append(PlannedShard(bench.name, t.model, t.shard, t.total, len(t.indices),
                                            "run" if why else "skip", why or "up to date"))
    return plan, resolved


def print_plan(plan: DryRunPlan, *, where: str) -> None:
    """The plan as plain lines on stdout."""
    written = "only the SLURM scripts below are written" if plan.written else "nothing is written"
    print(f"dry run of {where}: the config is valid; no request is sent, no model server "
          f"is started, {written}")
    print(f"output: {plan.output_dir}")
    for name, s in plan.services.items():
        target = s["url"] or s["launch"]
        print(f"service {name}: {s['type']} {s['model'] or '(server default model)'} at {target}")
        if s.get("command"):
            print(f"  command: {s['command']}")
    if plan.eval_container:
        print(f"eval client: nel eval run in each SLURM task as: {plan.eval_container} nel ...")
    for b in plan.benchmarks:
        if b["problems"] is None:
            until = ("the run asks the server" if _served_problems(b["name"], None)
                     else "its data is here")
            print(f"benchmark {b['name']}: problems unknown until {until} (see the "
                  f"checks below) x {b['repeats']} repeat(s), {b['shards']} shard(s), models "
                  f"{', '.join(b['models']) or '-'}")
            continue
        if b["problem_range"] is not None:
            pick = f"problems {b['problem_range'][0]}:{b['problem_range'][1]}"
        elif b["shuffle_seed"] is not None:
            pick = f"shuffled with seed {b['shuffle_seed']}"
        else:
            pick = "in dataset order (first N)"
        print(f"benchmark {b['name']}: {b['problems']} problems ({pick}) x {b['repeats']} "
              f"repeat(s), {b['shards']} shard(s), models {', '.join(b['models']) or '-'}")
    for s in plan.shards:
        verb = "would run" if s.action == "run" else "skip"
        n = "?" if s.n_problems is None else s.n_problems
        print(f"  {verb}: {s.benchmark} model={s.model} shard={s.shard}/{s.total} "
              f"({n} problems): {s.reason}")
    d = plan.to_dict()
    print(f"{d['would_run']} partition(s) would run, {d['up_to_date']} up to date")
    for line in plan.deferred:
        print(f"  {line}")
    for line in plan.written:
        print(line)
    for e in plan.errors:
        print(f"error: {e}")
