"""`nel eval run` with `cluster.type: slurm`: one SLURM array job whose tasks are exactly the
missing or stale (benchmark, model, shard) partitions, then a merge job (`afterok` on the
array) that builds the bundles, reports and comparisons.

Layout of one submission, `<output>/slurm/<stamp>/`:
  partitions-<k>.json  the array index -> partition list of attempt k (0, then auto-resumes)
  eval.sbatch          the array script: task i runs `nel eval run ... --slurm-task <list>`
  merge.sbatch         the merge script: `nel eval run ... --slurm-merge <dir>`
  jobs.json            the job ids submitted so far (the merge job reads the arrays' ids)
  logs/                one log per task and one for the merge

How the Dagster instance learns about remote work: every task runs `nel eval run` for its
one partition against the run's own on-disk instance (`<output>/.dagster`, on the shared
filesystem the nodes see), so each task's materialization of its `shard_results` partition
is written by the task itself, with the same run tags and metadata as a local run. Dagster
Pipes would need a Dagster run on the submit host to stay up for the job's lifetime and a
message channel from the nodes; the shared instance storage needs neither, survives the
submitting process (`--no-wait`, Ctrl-C) and is what `dagster dev` on that home reads. How a
task ended (SLURM state, exit code, elapsed time, and `sacct`'s CPU time and MaxRSS where
accounting is on) is only known after it ends, so it is recorded then, as an
`AssetObservation` of the same partition: by the merge job when every task succeeded, by
the waiting CLI when some did not.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shlex
import signal
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.errors import NelError
from nel_resources.config import ConfigError, NelConfig
from nel_resources.launchers.slurm import (
    INFRA_STATES,
    SbatchHeader,
    SlurmError,
    SlurmLauncher,
    TaskState,
    array_spec,
    describe,
    metadata_of,
    render_script,
    task_index,
    walltime_seconds,
)

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
    """The node pool the array's tasks run on: the one the services or sandboxes name, else
    the first (as NeMo Evaluator picks it). check_supported refuses more than one."""
    used = [s.node_pool for s in cfg.services.values() if s.node_pool]
    used += [s.node_pool for s in cfg.sandboxes.values() if s.node_pool]
    pools = list(cfg.cluster.node_pools)
    return used[0] if used else pools[0]


def header_for(cfg: NelConfig, job_name: str, log: str) -> SbatchHeader:
    """The `#SBATCH` lines of `cluster:` and its node pool."""
    c = cfg.cluster
    pool = c.node_pools[eval_pool(cfg)]
    return SbatchHeader(job_name=job_name, log=log, walltime=c.walltime, partition=pool.partition,
                        nodes=pool.nodes, ntasks_per_node=pool.ntasks_per_node, gres=pool.gres,
                        gpus_per_node=pool.gpus_per_node, account=c.account,
                        comment=c.sbatch_comment, extra_flags={**c.sbatch_extra_flags,
                                                               **pool.sbatch_extra_flags})


def _nel_command(argv: list[str], extra: list[str]) -> str:
    """The job's `nel eval run` line: the submitting command's own arguments (so -O
    overrides and flags hold), run with this interpreter from the same directory."""
    keep = [a for a in argv if a not in _SUBMIT_ONLY_FLAGS]
    if keep[:2] != ["eval", "run"]:
        keep = ["eval", "run", *keep]
    if "--no-progress" not in keep:
        keep.append("--no-progress")  # a job's log is no terminal
    args = [sys.executable, "-m", "dagster_project.cli.main", *keep, *extra]
    return " ".join(shlex.quote(a) for a in args)


def write_scripts(cfg: NelConfig, run_dir: Path, argv: list[str]) -> tuple[Path, Path]:
    """Write eval.sbatch (the array; its argument is a partition list) and merge.sbatch."""
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in cfg.cluster.container_env.items()}
    cd = "\n".join([*_service_comments(cfg), f"cd {shlex.quote(os.getcwd())}"])
    eval_body = "\n".join([
        cd, 'echo "nel: array task ${SLURM_ARRAY_TASK_ID} of job ${SLURM_ARRAY_JOB_ID} on $(hostname)"',
        _nel_command(argv, ["--slurm-task"]) + ' "$1"'])
    merge_body = "\n".join([cd, _nel_command(argv, ["--slurm-merge", str(run_dir)])])
    eval_script = run_dir / "eval.sbatch"
    merge_script = run_dir / "merge.sbatch"
    eval_script.write_text(render_script(header_for(cfg, "nel-eval", str(run_dir / "logs" / "eval-%A_%a.log")),
                                         eval_body, env=env))
    merge_script.write_text(render_script(header_for(cfg, "nel-merge", str(run_dir / "logs" / "merge-%j.log")),
                                          merge_body, env=env))
    for p in (eval_script, merge_script):
        p.chmod(0o755)
    return eval_script, merge_script


def _service_comments(cfg: NelConfig) -> list[str]:
    """What the job starts besides nel: each launched service's command (nel starts it inside
    the job, waits for its health check and stops it when the task ends)."""
    from nel_resources.config.services import LAUNCHED_TYPES

    lines = []
    for name, svc in cfg.services.items():
        if svc.type in LAUNCHED_TYPES:
            from nel_resources.services.launch import service_command

            try:
                cmd = " ".join(shlex.quote(a) for a in service_command(name, svc, svc.port or 8000))
            except NelError as exc:
                cmd = f"(cannot be built here: {exc})"
            lines.append(f"# nel launches services.{name} ({svc.type}) in the job: {cmd}")
    return lines


def write_partitions(run_dir: Path, attempt: int, parts: list[Partition]) -> Path:
    """The array index -> partition list of one attempt."""
    path = run_dir / f"partitions-{attempt}.json"
    path.write_text(json.dumps([asdict(p) for p in parts], indent=1))
    return path


def read_partitions(path: Path) -> list[Partition]:
    """The list `write_partitions` wrote."""
    return [Partition(**d) for d in json.loads(path.read_text())]


def plan_partitions(resolved: Any, store: Any, *, resume: bool) -> tuple[list[Partition], int, list[Any]]:
    """(stale partitions, fresh count, plan failures) of every benchmark: the same stale
    detection a local run does (nel_assets.engine.evaluate.plan)."""
    from dagster_project import run_log
    from dagster_project.checkpoint import BenchFailure
    from nel_assets.engine import evaluate as ev

    parts: list[Partition] = []
    fresh = 0
    failures: list[Any] = []
    for bench in resolved.benchmarks:
        try:
            tasks = ev.plan(store, bench)
        except Exception as exc:  # the benchmark fails alone, as in a local run
            failures += [BenchFailure(bench.name, m, run_log.one_line(type(exc).__name__, str(exc)), "plan")
                         for m in bench.models]
            continue
        for t in tasks:
            why = t.reason if resume else "--fresh"
            if why is None:
                fresh += 1
            elif t.indices:
                parts.append(Partition(bench.name, bench.asset_name, t.model, t.shard, t.total, why))
    return parts, fresh, failures


def _say(msg: str) -> None:
    print(f"slurm: {msg}", file=sys.stderr, flush=True)


class _Jobs:
    """jobs.json: every array (with its partition list) and merge job of a submission."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / "jobs.json"
        self.arrays: list[dict[str, Any]] = []
        self.merge: str | None = None

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"arrays": self.arrays, "merge": self.merge}, indent=1))
        os.replace(tmp, self.path)

    def all_ids(self) -> list[str]:
        return [a["job_id"] for a in self.arrays] + ([self.merge] if self.merge else [])


def run_on_slurm(cfg: NelConfig, argv: list[str], *, resume: bool = True, wait: bool = True,
                 launcher: SlurmLauncher | None = None) -> tuple[int, Any]:
    """Submit the stale partitions of `cfg` as one array plus an `afterok` merge job.

    Returns:
        (exit status, the run summary or None): with `wait`, the summary of the finished run
        (read from the store as a local run reports it); without, 0 once submitted.

    Raises:
        NelError: a config error, or SLURM refused the submission (nothing was submitted).
        KeyboardInterrupt: after cancelling every job of this submission.
    """
    from dagster_project import runner
    from nel_resources.store import ResultStore

    resolved = runner.validate_before_run(cfg)
    submit = cfg.cluster.submit is not False
    if submit and (why := SlurmLauncher.unavailable_reason()):
        raise ConfigError(f"cluster.type slurm cannot submit from here: {why}")
    out, home = runner.prepare_output(cfg)
    store = ResultStore(out)
    parts, fresh, plan_failures = plan_partitions(resolved, store, resume=resume)
    if not parts:
        _say(f"every shard is up to date ({fresh}); nothing submitted")
        return _finish(cfg, plan_failures)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
    run_dir = out / "slurm" / stamp
    eval_script, merge_script = write_scripts(cfg, run_dir, argv)
    part_file = write_partitions(run_dir, 0, parts)
    if not submit:
        print(f"wrote {eval_script} (array of {len(parts)} tasks: {part_file})")
        print(f"wrote {merge_script} (run it after the array: --dependency=afterok:<array id>)")
        print(f"to submit: sbatch --array={array_spec(len(parts))} {eval_script} {part_file}")
        return 0, None
    if launcher is None:
        from nel_resources.launchers.resource import SlurmLauncherResource

        launcher = SlurmLauncherResource().launcher()
    sl = launcher
    limit = sl.max_array_size()
    if len(parts) >= limit:
        raise NelError(f"{len(parts)} partitions to run, but the cluster's MaxArraySize is {limit}: "
                       "use fewer shards per run (or raise MaxArraySize in slurm.conf); nothing "
                       "was submitted")
    _record_planned(home, parts)
    jobs = _Jobs(run_dir)
    previous = signal.getsignal(signal.SIGTERM)
    if previous in (signal.SIG_DFL, signal.SIG_IGN, None):
        signal.signal(signal.SIGTERM, _interrupt)  # `kill` cancels the jobs as Ctrl-C does
    try:
        return _submit_and_wait(cfg, sl, jobs, run_dir, eval_script, merge_script, parts, fresh,
                                home, plan_failures, wait=wait)
    except KeyboardInterrupt:
        ids = jobs.all_ids()
        if ids:
            sl.cancel(ids)
            gone = sl.wait_gone(ids)
            _say(f"interrupted: cancelled job{'s' if len(ids) > 1 else ''} {', '.join(ids)}"
                 + ("" if gone else " (squeue still lists some)"))
        raise
    finally:
        if previous in (signal.SIG_DFL, signal.SIG_IGN, None):
            signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _submit_array(sl: SlurmLauncher, jobs: _Jobs, eval_script: Path, merge_script: Path,
                  part_file: Path, n: int) -> str:
    array_id = sl.submit(eval_script, array=array_spec(n), args=[str(part_file)])
    jobs.arrays.append({"job_id": array_id, "partitions": part_file.name})
    jobs.save()  # before the merge job can start (it reads the arrays from here)
    try:
        jobs.merge = sl.submit(merge_script, dependency=f"afterok:{array_id}")
    except SlurmError as exc:  # e.g. the array already failed: its afterok can never be met
        _say(f"the merge job was not submitted: {exc}")
        jobs.merge = None
    jobs.save()
    return array_id


def _submit_and_wait(cfg: NelConfig, sl: SlurmLauncher, jobs: _Jobs, run_dir: Path,
                     eval_script: Path, merge_script: Path, parts: list[Partition], fresh: int,
                     home: Path, plan_failures: list[Any], *, wait: bool) -> tuple[int, Any]:
    c = cfg.cluster
    array_id = _submit_array(sl, jobs, eval_script, merge_script, run_dir / "partitions-0.json", len(parts))
    _say(f"submitted array job {array_id} ({len(parts)} task{'s' if len(parts) != 1 else ''}; "
         f"{fresh} shard{'s' if fresh != 1 else ''} up to date) and merge job {jobs.merge} "
         f"(afterok:{array_id}); scripts and logs in {run_dir}")
    if not wait:
        print(f"array job {array_id}, merge job {jobs.merge}")
        return 0, None
    current, attempt, used_s = parts, 0, 0
    missing: list[tuple[Partition, TaskState]] = []
    while True:
        by_index = dict(enumerate(current))

        def show(st: TaskState, by_index: dict[int, Partition] = by_index) -> None:
            i = task_index(st.job_id)
            if i is not None and i in by_index:
                _say(f"{by_index[i].label()} (task {st.job_id}): {describe(st)}")

        states = sl.wait([array_id], on_change=show)
        ended = {task_index(t): st for t, st in states.items()}
        failed = [(p, ended.get(i) or TaskState(f"{array_id}_{i}", "UNKNOWN")) for i, p in by_index.items()
                  if not (ended.get(i) and ended[i].ok)]
        used_s += sum(st.elapsed_s or 0 for st in states.values())
        retry = [p for p, st in failed if st.state in INFRA_STATES]
        within = c.max_walltime is None or used_s < walltime_seconds(c.max_walltime)
        if retry and c.auto_resume and attempt < c.max_retries and within:
            sl.cancel([jobs.merge or ""])  # its afterok can no longer be met
            _record_outcomes(home, dict(by_index), states)
            attempt += 1
            missing += [(p, st) for p, st in failed if p not in retry]
            current = retry
            part_file = write_partitions(run_dir, attempt, retry)
            array_id = _submit_array(sl, jobs, eval_script, merge_script, part_file, len(retry))
            _say(f"auto_resume {attempt}/{c.max_retries}: resubmitted {len(retry)} task(s) as "
                 f"array job {array_id}, merge job {jobs.merge}")
            continue
        missing += failed
        break
    lost = {p for p, _ in missing}
    ran = [p for p in parts if p not in lost]
    if missing:
        sl.cancel([jobs.merge or ""])
        _record_outcomes(home, dict(enumerate(current)), states)
        for p, st in missing:
            _say(f"{p.label()} is missing: task {st.job_id} ended {describe(st)} "
                 f"(log: {run_dir / 'logs'})")
        return _finish(cfg, plan_failures, ran)
    if jobs.merge is None:  # the store still has every shard: the summary builds the bundles
        return _finish(cfg, plan_failures, ran)
    merge = sl.wait([jobs.merge])
    st = merge.get(jobs.merge)
    _say(f"merge job {jobs.merge}: {describe(st) if st else 'no longer known to SLURM'}")
    if st is None or not st.ok:
        _say(f"the merge job failed: see {run_dir / 'logs'}")
    return _finish(cfg, plan_failures, ran)


def _finish(cfg: NelConfig, plan_failures: list[Any], ran: list[Partition] | None = None) -> tuple[int, Any]:
    """The run's summary, read from the store as a local run reports it (nothing is
    evaluated here: a shard still missing is a failure naming it); `ran` are the partitions
    the tasks evaluated."""
    from dagster_project.runner import run_eval

    summary = run_eval(cfg, progress=False, merge_only=set())
    for oc in summary.benchmarks:
        done = [p for p in ran or [] if p.benchmark == oc.benchmark]
        oc.shards_run = [(p.model, p.shard) for p in done]
        oc.run_reasons = {f"{p.model}/{p.shard}": p.reason for p in done}
        oc.shards_fresh = max(0, oc.shards_total - len(done))
    known = {(f.benchmark, f.model) for f in summary.failures}
    summary.failures += [f for f in plan_failures if (f.benchmark, f.model) not in known]
    return summary.exit_status, summary


def _record_planned(home: Path, parts: list[Partition]) -> None:
    """The model partitions exist in the instance before any task starts (tasks add them too;
    doing it once here keeps the tasks from racing on it)."""
    import dagster as dg

    from nel_assets.factory import MODEL_PARTITIONS

    instance = dg.DagsterInstance.from_config(str(home))
    existing = set(instance.get_dynamic_partitions(MODEL_PARTITIONS.name))
    new = sorted({p.model for p in parts} - existing)
    if new:
        instance.add_dynamic_partitions(MODEL_PARTITIONS.name, new)


def _record_outcomes(home: Path, by_index: dict[int, Partition],
                     states: dict[str, TaskState], launcher: SlurmLauncher | None = None) -> int:
    """How each task ended, as an AssetObservation of its partition (metadata: SLURM job id,
    state, exit code, elapsed seconds, sacct figures). Returns how many were recorded."""
    import dagster as dg

    sl = launcher or SlurmLauncher()
    acct = sl.accounting(sorted({t.split("_")[0] for t in states}),
                         expect=[t for t, st in states.items() if st.done])
    instance = dg.DagsterInstance.from_config(str(home))
    n = 0
    for tid, st in states.items():
        i = task_index(tid)
        if i is None or i not in by_index:
            continue
        p = by_index[i]
        final = acct.get(tid, st)
        instance.report_runless_asset_event(dg.AssetObservation(
            asset_key=dg.AssetKey([p.asset_name, "shard_results"]),
            partition=dg.MultiPartitionKey({"model": p.model, "shard": str(p.shard)}),
            metadata=metadata_of(final)))
        n += 1
    return n


# -- inside the jobs -------------------------------------------------------------------------

def task_partition(part_file: Path, env: dict[str, str] | None = None) -> Partition:
    """The partition of this array task (SLURM_ARRAY_TASK_ID indexes the list)."""
    e = os.environ if env is None else env
    raw = e.get("SLURM_ARRAY_TASK_ID", "")
    if not raw.isdigit():
        raise NelError("--slurm-task runs inside a SLURM array task (SLURM_ARRAY_TASK_ID is not set)")
    parts = read_partitions(part_file)
    i = int(raw)
    if i >= len(parts):
        raise NelError(f"array task {i} has no partition in {part_file} ({len(parts)} listed)")
    return parts[i]


def run_task(cfg: NelConfig, part_file: Path, *, resume: bool = True) -> Any:
    """One array task: evaluate its one partition into the shared store and instance."""
    from dagster_project.runner import run_eval

    p = task_partition(part_file)
    print(f"nel: {p.label()} ({p.reason})", flush=True)
    return run_eval(cfg, resume=resume, progress=False, only={(p.benchmark, p.model, p.shard)})


def run_merge(cfg: NelConfig, run_dir: Path, *, resume: bool = True) -> Any:
    """The merge job: bundles, reports and comparisons of every partition the arrays ran,
    then each task's SLURM outcome recorded on its partition."""
    from dagster_project.runner import dagster_home_for, run_eval

    doc = json.loads((run_dir / "jobs.json").read_text())
    arrays = [(a["job_id"], read_partitions(run_dir / a["partitions"])) for a in doc["arrays"]]
    pairs = {(p.benchmark, p.model) for _, parts in arrays for p in parts}
    summary = run_eval(cfg, resume=resume, progress=False, merge_only=pairs)
    sl = SlurmLauncher()
    home = dagster_home_for(cfg)
    for job_id, parts in arrays:
        states = sl.states([job_id])
        _record_outcomes(home, dict(enumerate(parts)), states, sl)
    return summary
