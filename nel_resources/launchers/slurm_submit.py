"""`cluster.type: slurm`: SLURM array jobs whose tasks are exactly the missing or stale
(benchmark, model, shard) partitions (one array, or several when there are more partitions
than the cluster's MaxArraySize allows in one), then a merge job (`afterok` on every array)
that builds the bundles, reports and comparisons. With services on several node pools each
partition is instead one heterogeneous job (slurm_het: SLURM has no arrays of those) and the
merge job waits on all of them. Both ways are a `_Submitter` (`_ArraySubmitter`,
`_HetSubmitter`): the waiting, failure, auto_resume and Ctrl-C handling below is the same
for both. The files of a submission: slurm_scripts.

How the Dagster instance learns about remote work: every task runs `nel eval run` for its
one partition against the run's own on-disk instance (`<output>/.dagster`, on the shared
filesystem the nodes see), so each task's materialization of its `shard_results` partition
is written by the task itself, with the same run tags and metadata as a local run. Dagster
Pipes would need a Dagster run on the submit host to stay up for the job's lifetime and a
message channel from the nodes; the shared instance storage needs neither, survives the
submitting process (`--no-wait`, Ctrl-C) and is what `dagster dev` on that home reads. How a
task ended (SLURM state, exit code, elapsed time, and `sacct`'s CPU time and MaxRSS where
accounting is on) is only known after it ends, so it is recorded then, on the same partition
(`RunHooks.record_outcome`): by the merge job when every task succeeded, by the waiting CLI
when some did not.

No Dagster here: planning, recording and the summary come through the runner's `RunHooks`.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.errors import NelError
from nel_resources.config import NelConfig
from nel_resources.launchers.base import RunHooks
from nel_resources.launchers.slurm import (
    DEFAULT_MAX_ARRAY_SIZE,
    INFRA_STATES,
    SlurmError,
    SlurmLauncher,
    TaskState,
    array_spec,
    describe,
    metadata_of,
    render_script,
    walltime_seconds,
)
from nel_resources.launchers.slurm_het import describe_plan, het_plan, pool_header, services_of
from nel_resources.launchers.slurm_scripts import (
    Partition,
    split,
    write_het_scripts,
    write_merge_script,
    write_partitions,
    write_scripts,
)


def plan_partitions(hooks: RunHooks, resolved: Any, out: Path, *,
                    resume: bool) -> tuple[list[Partition], int, list[Any]]:
    """(stale partitions, fresh count, plan failures) of every benchmark: the same stale
    detection a local run does (`hooks.plan`)."""
    parts: list[Partition] = []
    fresh = 0
    failures: list[Any] = []
    for bench in resolved.benchmarks:
        try:
            tasks = hooks.plan(out, bench)
        except Exception as exc:  # the benchmark fails alone, as in a local run
            failures += [hooks.failure(bench.name, m, exc, "plan") for m in bench.models]
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
    """jobs.json: every array (with its partition list), heterogeneous job (with its
    partition list and index) and merge job of a submission."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / "jobs.json"
        self.arrays: list[dict[str, Any]] = []
        self.hetjobs: list[dict[str, Any]] = []
        self.merge: str | None = None

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        doc: dict[str, Any] = {"arrays": self.arrays, "merge": self.merge}
        if self.hetjobs:
            doc["hetjobs"] = self.hetjobs
        tmp.write_text(json.dumps(doc, indent=1))
        os.replace(tmp, self.path)

    def mark_recorded(self, job_ids: list[str]) -> None:
        """The CLI recorded these arrays' or heterogeneous jobs' outcomes: the merge job does
        not record them again."""
        for a in [*self.arrays, *self.hetjobs]:
            if a["job_id"] in job_ids:
                a["recorded"] = True
        self.save()

    def all_ids(self) -> list[str]:
        return ([a["job_id"] for a in self.arrays] + [h["job_id"] for h in self.hetjobs]
                + ([self.merge] if self.merge else []))


@dataclass
class _Batch:
    """What one attempt submitted: the jobs to wait on and each task's partition."""

    job_ids: list[str]
    by_task: dict[str, Partition]  # `123_4` (array task) or `123` (a heterogeneous job)
    what: str  # `array job 123` / `3 array jobs 1, 2, 3` / `4 heterogeneous jobs (123-126)`
    detail: str  # `7 tasks in arrays of at most 3, the cluster's MaxArraySize` / `4 tasks`
    unit: str  # how one task is named in messages: `task` / `job`


def run_on_slurm(cfg: NelConfig, hooks: RunHooks, argv: list[str], *, resume: bool = True,
                 wait: bool = True, launcher: SlurmLauncher | None = None) -> tuple[int, Any]:
    """Submit the stale partitions of `cfg`: array jobs plus an `afterok` merge job, or, with
    services on several node pools, one heterogeneous job per partition plus the merge job
    (slurm_het).

    One array holds at most the cluster's MaxArraySize tasks (its indices stay below it):
    more partitions than that are split into several arrays and the merge job waits on all.

    Returns:
        (exit status, the run summary or None): with `wait`, the summary of the finished run
        (read from the store as a local run reports it); without, 0 once submitted.

    Raises:
        NelError: a config error, or SLURM refused the submission (nothing was submitted).
        KeyboardInterrupt: after cancelling every job of this submission.
    """
    from nel_resources.launchers.registry import get_launcher

    resolved = hooks.validate(cfg)
    submit = cfg.cluster.submit is not False
    get_launcher("slurm").preflight(resolved)  # the client commands, when it submits
    out, home = hooks.prepare_output(cfg)
    parts, fresh, plan_failures = plan_partitions(hooks, resolved, out, resume=resume)
    if not parts:
        _say(f"every shard is up to date ({fresh}); nothing submitted")
        return hooks.finish(cfg, plan_failures, None, None)
    run_dir = _run_dir(out)
    plan = het_plan(cfg)
    if not submit:
        for line in write_unsubmitted(cfg, resolved, parts, run_dir, argv):
            print(line)
        return 0, None
    if plan is not None:
        group_of, parts = _het_groups(cfg, resolved, plan, parts)
        scripts = write_het_scripts(cfg, plan, run_dir, argv, set(group_of.values()))
        merge_script = write_merge_script(cfg, run_dir, argv)
    else:
        eval_script, merge_script = write_scripts(cfg, run_dir, argv)
    if launcher is None:
        from nel_resources.launchers.resource import SlurmLauncherResource

        launcher = SlurmLauncherResource().launcher()
    sl = launcher
    jobs = _Jobs(run_dir)
    sub: _Submitter
    if plan is not None:
        _check_pools(cfg, sl, run_dir, [plan.eval_pool, *sorted(set(plan.pool_of.values()))])
        sub = _HetSubmitter(sl, jobs, run_dir, merge_script, scripts, group_of)
        how = describe_plan(plan)
    else:
        sub = _ArraySubmitter(sl, jobs, run_dir, merge_script, eval_script, sl.max_array_size())
        how = ""
    hooks.record_planned(home, {p.model for p in parts})
    previous = signal.getsignal(signal.SIGTERM)
    if previous in (signal.SIG_DFL, signal.SIG_IGN, None):
        signal.signal(signal.SIGTERM, _interrupt)  # `kill` cancels the jobs as Ctrl-C does
    try:
        return _submit_and_wait(cfg, hooks, sub, parts, fresh, home, plan_failures, how, wait=wait)
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


def _run_dir(out: Path) -> Path:
    """`<output>/slurm/<stamp>`: one directory per submission (or dry run)."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
    return out / "slurm" / stamp


def _het_groups(cfg: NelConfig, resolved: Any, plan: Any, parts: list[Partition]
                ) -> tuple[dict[Partition, Any], list[Partition]]:
    """Each partition's node-pool group in a heterogeneous submission, and the partitions
    ordered so those of one script are next to each other (one range each to submit)."""
    order = list(cfg.cluster.node_pools)
    group_of = {p: plan.pools_for(services_of(resolved, p.benchmark, p.model), order) for p in parts}
    return group_of, sorted(parts, key=lambda p: (order.index(group_of[p][0]) if group_of[p] else -1,
                                                  group_of[p]))


def write_unsubmitted(cfg: NelConfig, resolved: Any, parts: list[Partition], run_dir: Path,
                      argv: list[str]) -> list[str]:
    """Write the scripts and partition files a submission of `parts` would submit, submit
    nothing, and return the lines saying what was written and how to submit it (`submit:
    false`, and `--dry-run` as NeMo Evaluator's dry run writes its sbatch scripts)."""
    plan = het_plan(cfg)
    if plan is None:
        eval_script, merge_script = write_scripts(cfg, run_dir, argv)
        return _write_only(run_dir, eval_script, merge_script, parts)
    group_of, parts = _het_groups(cfg, resolved, plan, parts)
    scripts = write_het_scripts(cfg, plan, run_dir, argv, set(group_of.values()))
    merge_script = write_merge_script(cfg, run_dir, argv)
    return _het_submission_lines(scripts, group_of, parts, write_partitions(run_dir, 0, parts),
                                 merge_script)


def write_for_dry_run(cfg: NelConfig, resolved: Any, parts: list[Partition],
                      argv: list[str]) -> list[str]:
    """`nel eval run --dry-run` of a slurm config: the scripts of the submission it plans,
    under `<output>/slurm/<stamp>/` (the jobs run `argv` without `--dry-run`); nothing is
    submitted (`scontrol` may be asked for the largest array size, as `submit: false` does)."""
    if not parts:
        return ["slurm: every shard is up to date; no script written"]
    out = Path(cfg.output.dir).expanduser().resolve()
    return write_unsubmitted(cfg, resolved, parts, _run_dir(out),
                             [a for a in argv if a != "--dry-run"])


def _het_submission_lines(scripts: dict[tuple[str, ...], Path],
                          group_of: dict[Partition, tuple[str, ...]], parts: list[Partition],
                          part_file: Path, merge_script: Path) -> list[str]:
    """Services on several pools: what was written, how to submit it."""
    lines = []
    for group, script in scripts.items():
        idx = [i for i, p in enumerate(parts) if group_of[p] == group]
        comps = "the eval pool only" if not group else f"{len(group) + 1} components: + {', '.join(group)}"
        lines.append(f"wrote {script} ({comps}; partitions {idx[0]}-{idx[-1]} of {part_file})")
        lines.append(f"to submit: for i in $(seq {idx[0]} {idx[-1]}); do sbatch {script} "
                     f"{part_file} $i; done")
    lines.append(f"wrote {merge_script} (run it after those jobs: --dependency=afterok:<id>:<id>...)")
    return lines


def _check_pools(cfg: NelConfig, sl: SlurmLauncher, run_dir: Path, pools: list[str]) -> None:
    """`sbatch --test-only` each node pool alone: a pool the cluster cannot satisfy (no such
    partition, more nodes than it has...) is refused naming the pool, before any submission."""
    for name in pools:
        probe = run_dir / f".probe-{name}.sbatch"
        probe.write_text(render_script(pool_header(cfg, name, "nel-probe", "/dev/null"), "true"))
        try:
            why = sl.test_only(probe)
        finally:
            probe.unlink(missing_ok=True)
        if why is not None:
            pool = cfg.cluster.node_pools[name]
            raise NelError(f"cluster.node_pools.{name} (partition {pool.partition}, {pool.nodes} "
                           f"node{'s' if pool.nodes != 1 else ''}) cannot be satisfied by this "
                           f"cluster: {why}; nothing was submitted")


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _write_only(run_dir: Path, eval_script: Path, merge_script: Path,
                parts: list[Partition]) -> list[str]:
    """`submit: false`: the partition files and the commands that would submit them, split
    by the cluster's MaxArraySize when `scontrol` answers here (else SLURM's default)."""
    per_array = DEFAULT_MAX_ARRAY_SIZE  # no cluster answers from here: SLURM's default limit
    if SlurmLauncher.unavailable_reason() is None:
        with contextlib.suppress(SlurmError):
            per_array = SlurmLauncher().max_array_size()
    chunks = split(parts, per_array)
    files = [write_partitions(run_dir, 0, parts) if len(chunks) == 1 else
             write_partitions(run_dir, 0, chunk, j) for j, chunk in enumerate(chunks)]
    lines = [f"wrote {eval_script} ({len(parts)} tasks in {len(chunks)} array"
             f"{'s' if len(chunks) > 1 else ''}: {', '.join(str(f) for f in files)})"]
    ids = ":".join(f"<array {j} id>" for j in range(len(chunks))) if len(chunks) > 1 else "<array id>"
    lines.append(f"wrote {merge_script} (run it after the arrays: --dependency=afterok:{ids})")
    for chunk, f in zip(chunks, files, strict=True):
        lines.append(f"to submit: sbatch --array={array_spec(len(chunk))} {eval_script} {f}")
    return lines


class _Submitter:
    """Submits one attempt's partitions (0, then each auto_resume) as SLURM jobs and the merge
    job `afterok` on all of them, recording each id in jobs.json as soon as SLURM gives it
    (so Ctrl-C, or a refused later job, cancels exactly what was submitted). Subclasses say
    which jobs: `_ArraySubmitter` (arrays of at most MaxArraySize tasks) or `_HetSubmitter`
    (one heterogeneous job per partition)."""

    unit = "task"  # how one task is named in messages

    def __init__(self, sl: SlurmLauncher, jobs: _Jobs, run_dir: Path, merge_script: Path) -> None:
        self.sl, self.jobs, self.run_dir, self.merge_script = sl, jobs, run_dir, merge_script

    def submit(self, attempt: int, parts: list[Partition]) -> _Batch:
        """Submit `parts` as attempt `attempt`, then its merge job (jobs.merge; None if SLURM
        refused it, e.g. because a job already failed so its afterok can never be met)."""
        batch = self._submit_jobs(attempt, parts)
        self.jobs.save()  # before the merge job can start (it reads the jobs from here)
        try:
            self.jobs.merge = self.sl.submit(self.merge_script, dependency=dependency(batch.job_ids))
        except SlurmError as exc:
            _say(f"the merge job was not submitted: {exc}")
            self.jobs.merge = None
        self.jobs.save()
        return batch

    def _submit_jobs(self, attempt: int, parts: list[Partition]) -> _Batch:
        raise NotImplementedError

    def _each(self, entries: list[dict[str, Any]], record: list[dict[str, Any]],
              submit: Callable[[int], str]) -> list[str]:
        """Submit job i of this attempt with `submit(i)` for each of `entries` (its jobs.json
        entry), appending the entry with its id to `record` and saving jobs.json at once. If
        SLURM refuses one, those this attempt already submitted are cancelled (no
        half-submitted attempt)."""
        ids: list[str] = []
        for i, entry in enumerate(entries):
            try:
                job_id = submit(i)
            except SlurmError as exc:
                if not ids:
                    raise
                self.sl.cancel(ids)
                raise NelError(f"{exc} (after {len(ids)} of {len(entries)} jobs of this attempt; "
                               "those were cancelled)") from None
            ids.append(job_id)
            record.append({"job_id": job_id, **entry})
            self.jobs.save()
        return ids


class _ArraySubmitter(_Submitter):
    """Arrays of at most `per_array` (the cluster's MaxArraySize) tasks of one script."""

    def __init__(self, sl: SlurmLauncher, jobs: _Jobs, run_dir: Path, merge_script: Path,
                 eval_script: Path, per_array: int) -> None:
        super().__init__(sl, jobs, run_dir, merge_script)
        self.eval_script, self.per_array = eval_script, per_array

    def _submit_jobs(self, attempt: int, parts: list[Partition]) -> _Batch:
        chunks = split(parts, self.per_array)
        files = [write_partitions(self.run_dir, attempt, chunk, j if len(chunks) > 1 else None)
                 for j, chunk in enumerate(chunks)]
        ids = self._each([{"partitions": f.name} for f in files], self.jobs.arrays,
                         lambda j: self.sl.submit(self.eval_script, array=array_spec(len(chunks[j])),
                                                  args=[str(files[j])]))
        by_task = {f"{job}_{i}": p for job, chunk in zip(ids, chunks, strict=True) for i, p in enumerate(chunk)}
        tasks = f"{len(parts)} task{'s' if len(parts) != 1 else ''}"
        if len(ids) == 1:
            return _Batch(ids, by_task, f"array job {ids[0]}", tasks, self.unit)
        return _Batch(ids, by_task, f"{len(ids)} array jobs {', '.join(ids)}",
                      f"{tasks} in arrays of at most {self.per_array}, the cluster's MaxArraySize", self.unit)


class _HetSubmitter(_Submitter):
    """One job per partition (SLURM has no arrays of heterogeneous jobs), each with the script
    of the node pools its services need (slurm_het)."""

    unit = "job"

    def __init__(self, sl: SlurmLauncher, jobs: _Jobs, run_dir: Path, merge_script: Path,
                 scripts: dict[tuple[str, ...], Path], group_of: dict[Partition, tuple[str, ...]]) -> None:
        super().__init__(sl, jobs, run_dir, merge_script)
        self.scripts, self.group_of = scripts, group_of

    def _submit_jobs(self, attempt: int, parts: list[Partition]) -> _Batch:
        part_file = write_partitions(self.run_dir, attempt, parts)
        ids = self._each([{"partitions": part_file.name, "index": i} for i in range(len(parts))],
                         self.jobs.hetjobs,
                         lambda i: self.sl.submit(self.scripts[self.group_of[parts[i]]],
                                                  args=[str(part_file), str(i)]))
        span = ids[0] if len(ids) == 1 else f"{ids[0]}-{ids[-1]}"
        return _Batch(ids, dict(zip(ids, parts, strict=True)),
                      f"{len(ids)} heterogeneous job{'s' if len(ids) != 1 else ''} ({span})",
                      f"{len(parts)} task{'s' if len(parts) != 1 else ''}", self.unit)


def dependency(job_ids: list[str]) -> str:
    """`afterok:<a>:<b>...`: the merge job runs once every task of every job succeeded."""
    return "afterok:" + ":".join(job_ids)


def _submit_and_wait(cfg: NelConfig, hooks: RunHooks, sub: _Submitter, parts: list[Partition], fresh: int,
                     home: Path, plan_failures: list[Any], how: str, *, wait: bool) -> tuple[int, Any]:
    c, sl, jobs, run_dir = cfg.cluster, sub.sl, sub.jobs, sub.run_dir
    batch = sub.submit(0, parts)
    # Hundreds of heterogeneous jobs would make an unreadable line: their ids are in jobs.json.
    after = dependency(batch.job_ids) if len(batch.job_ids) <= 8 else f"afterok on all {len(batch.job_ids)}"
    _say(f"submitted {batch.what} ({batch.detail}; {fresh} shard{'s' if fresh != 1 else ''} up to date"
         f"{'; ' + how if how else ''}) and merge job {jobs.merge} ({after}); scripts and logs in {run_dir}")
    if not wait:
        print(f"{batch.what}, merge job {jobs.merge}")
        return 0, None
    attempt, used_s = 0, 0
    missing: list[tuple[Partition, TaskState]] = []
    while True:
        def show(st: TaskState, batch: _Batch = batch) -> None:
            p = batch.by_task.get(st.job_id)
            if p is not None:
                _say(f"{p.label()} ({batch.unit} {st.job_id}): {describe(st)}")

        states = sl.wait(batch.job_ids, on_change=show)
        failed = [(p, states.get(t) or TaskState(t, "UNKNOWN")) for t, p in batch.by_task.items()
                  if not (t in states and states[t].ok)]
        used_s += sum(st.elapsed_s or 0 for t, st in states.items() if t in batch.by_task)
        retry = [p for p, st in failed if st.state in INFRA_STATES]
        within = c.max_walltime is None or used_s < walltime_seconds(c.max_walltime)
        if retry and c.auto_resume and attempt < c.max_retries and within:
            sl.cancel([jobs.merge or ""])  # its afterok can no longer be met
            record_outcomes(hooks, home, batch.by_task, states)
            jobs.mark_recorded(batch.job_ids)
            attempt += 1
            missing += [(p, st) for p, st in failed if p not in retry]
            batch = sub.submit(attempt, retry)
            _say(f"auto_resume {attempt}/{c.max_retries}: resubmitted {len(retry)} task(s) "
                 f"({', '.join(p.label() for p in retry)}) as {batch.what} ({batch.detail}), "
                 f"merge job {jobs.merge}")
            continue
        if retry:
            _say(f"not resubmitted ({', '.join(p.label() for p in retry)}): "
                 + _no_resume_reason(c, attempt, used_s))
        missing += failed
        break
    lost = {p for p, _ in missing}
    ran = [p for p in parts if p not in lost]
    if missing:
        sl.cancel([jobs.merge or ""])
        record_outcomes(hooks, home, batch.by_task, states)
        for p, st in missing:
            _say(f"{p.label()} is missing: {batch.unit} {st.job_id} ended {describe(st)} "
                 f"(log: {run_dir / 'logs'})")
            for line in task_log_tail(run_dir, st.job_id):
                print(f"  | {line}", file=sys.stderr, flush=True)
        return hooks.finish(cfg, plan_failures, ran, parts)
    if jobs.merge is None:  # the store still has every shard: the summary builds the bundles
        return hooks.finish(cfg, plan_failures, ran, parts)
    merge = sl.wait([jobs.merge])
    st = merge.get(jobs.merge)
    _say(f"merge job {jobs.merge}: {describe(st) if st else 'no longer known to SLURM'}")
    if st is None or not st.ok:
        _say(f"the merge job failed: see {run_dir / 'logs'}")
    return hooks.finish(cfg, plan_failures, ran, parts)


def task_log_tail(run_dir: Path, task_id: str, n: int = 12) -> list[str]:
    """The last `n` non-blank lines of a task's log (`eval-<array>_<index>.log`, or a
    heterogeneous job's `eval-<job>.log`): why it failed, e.g. a server that never became
    healthy and the last lines of that server's own log."""
    try:
        text = (run_dir / "logs" / f"eval-{task_id}.log").read_text(errors="replace")
    except OSError:
        return []
    return [ln for ln in text.splitlines() if ln.strip()][-n:]


def _no_resume_reason(c: Any, attempt: int, used_s: int) -> str:
    """Why tasks the cluster ended are not resubmitted (auto_resume off, retries spent, or
    max_walltime reached)."""
    if not c.auto_resume:
        return "auto_resume is off"
    if attempt >= c.max_retries:
        return f"max_retries ({c.max_retries}) spent"
    return f"the tasks' summed run time ({used_s} s) reached max_walltime {c.max_walltime}"


def record_outcomes(hooks: RunHooks, home: Path, by_task: dict[str, Partition],
                    states: dict[str, TaskState], launcher: SlurmLauncher | None = None) -> int:
    """How each task ended (SLURM job id, state, exit code, elapsed seconds, sacct figures),
    recorded on its partition through `hooks.record_outcome`. `by_task`: task id (`123_4`,
    or a heterogeneous job's `123`) -> partition. Returns how many were recorded."""
    sl = launcher or SlurmLauncher()
    acct = sl.accounting(sorted({t.split("_")[0] for t in states}),
                         expect=[t for t, st in states.items() if st.done])
    n = 0
    for tid, st in states.items():
        p = by_task.get(tid)
        if p is None:
            continue
        hooks.record_outcome(home, p.asset_name, p.model, p.shard, metadata_of(acct.get(tid, st)))
        n += 1
    return n
