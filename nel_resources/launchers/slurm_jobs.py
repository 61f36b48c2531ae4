"""Inside the jobs `cluster.type: slurm` submits (nel_resources.launchers.slurm_submit):
an array task or heterogeneous job evaluates its one partition into the shared store and
the run's on-disk Dagster instance (`--slurm-task`), and the merge job builds the bundles,
reports and comparisons, then records each task's SLURM outcome on its partition
(`--slurm-merge`). The evaluation and the Dagster records are the runner's, reached through
`RunHooks` (`evaluate`, `validate`, `dagster_home`, `record_outcome`): no Dagster here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.errors import NelError
from nel_resources.config import NelConfig
from nel_resources.launchers.base import RunHooks
from nel_resources.launchers.slurm import SlurmLauncher
from nel_resources.launchers.slurm_het import (
    elsewhere_for,
    het_plan,
    services_of,
    wait_for_services,
)
from nel_resources.launchers.slurm_scripts import Partition, read_partitions, task_partition
from nel_resources.launchers.slurm_submit import record_outcomes
from nel_resources.launchers.states import PartitionState

__all__ = ["run_merge", "run_task"]


def run_task(cfg: NelConfig, part_file: Path, hooks: RunHooks, *, resume: bool = True,
             index: int | None = None, svc_dir: Path | None = None) -> Any:
    """One task: evaluate its one partition into the shared store and instance. In a
    heterogeneous job (`index` given), the services of other pools are not started here:
    their components write their URLs into `svc_dir`, waited for first."""
    p = task_partition(part_file, index=index)
    print(f"nel: {p.label()} ({p.reason})", flush=True)
    plan = het_plan(cfg)
    elsewhere: dict[str, str | None] | None = None
    if plan is not None:
        needed = services_of(hooks.validate(cfg), p.benchmark, p.model)
        remote = [n for n in needed if n in plan.pool_of]
        urls = wait_for_services(cfg, remote, svc_dir) if remote and svc_dir is not None else {}
        if remote and svc_dir is None:
            raise NelError(f"{', '.join(remote)} run on another node pool: --slurm-services is needed")
        for name, url in urls.items():
            print(f"nel: services.{name} at {url} (node pool {plan.pool_of[name]})", flush=True)
        elsewhere = elsewhere_for(cfg, plan, needed, urls)
    return hooks.evaluate(cfg, resume=resume, only={(p.benchmark, p.model, p.shard)}, elsewhere=elsewhere)


def submitted_jobs(run_dir: Path, doc: dict[str, Any] | None = None,
                   ) -> list[tuple[str, dict[str, Partition]]]:
    """The jobs of one submission (its jobs.json), in order: (job id, {task id: partition});
    an array's tasks are `<job>_<index>`, a heterogeneous job is one task of its own id."""
    doc = doc if doc is not None else json.loads((run_dir / "jobs.json").read_text())
    submitted: list[tuple[str, dict[str, Partition]]] = []
    for a in doc["arrays"]:
        parts = read_partitions(run_dir / a["partitions"])
        submitted.append((a["job_id"], {f"{a['job_id']}_{i}": p for i, p in enumerate(parts)}))
    for h in doc.get("hetjobs", []):
        p = read_partitions(run_dir / h["partitions"])[int(h["index"])]
        submitted.append((h["job_id"], {h["job_id"]: p}))
    return submitted


def partition_states(out: Path, launcher: SlurmLauncher | None = None) -> list[PartitionState]:
    """How the partitions of the last submission from `out` stand, as SLURM says (its state
    word: PENDING, RUNNING, COMPLETED, FAILED, TIMEOUT, ...; a partition resubmitted by
    auto_resume is its last task's). [] when nothing was submitted from `out`."""
    runs = sorted(p for p in (out / "slurm").glob("*/jobs.json") if not p.parent.name.startswith("serve-"))
    if not runs:
        return []
    by_task = {t: p for _, tasks in submitted_jobs(runs[-1].parent) for t, p in tasks.items()}
    sl = launcher or SlurmLauncher()
    jobs = sorted({t.split("_")[0] for t in by_task})
    states = sl.states(jobs)
    if any(t not in states for t in by_task):  # forgotten by slurmctld (MinJobAge): ask sacct
        states = {**sl.accounting(jobs, timeout_s=0), **states}
    found: dict[tuple[str, str, int], PartitionState] = {}
    for tid, p in by_task.items():  # later attempts come later: their state wins
        st = states.get(tid)
        found[(p.benchmark, p.model, p.shard)] = PartitionState(
            p.benchmark, p.model, p.shard, st.state if st else "UNKNOWN", "slurm",
            f"job {tid}" + (f" exit {st.exit_code}" if st and st.exit_code else ""))
    return sorted(found.values(), key=lambda s: (s.benchmark, s.model, s.shard))


def run_merge(cfg: NelConfig, run_dir: Path, hooks: RunHooks, *, resume: bool = True) -> Any:
    """The merge job: bundles, reports and comparisons of every partition the tasks ran,
    then each task's SLURM outcome recorded on its partition."""
    doc = json.loads((run_dir / "jobs.json").read_text())
    submitted = submitted_jobs(run_dir, doc)
    pairs = {(p.benchmark, p.model) for _, by_task in submitted for p in by_task.values()}
    summary = hooks.evaluate(cfg, resume=resume, merge_only=pairs)
    # Jobs of an attempt auto_resume replaced were recorded by the CLI when it resubmitted.
    todo = [(job, by_task) for (job, by_task), rec in zip(submitted, [*doc["arrays"], *doc.get("hetjobs", [])],
                                                          strict=True) if not rec.get("recorded")]
    sl = SlurmLauncher()
    states = sl.states([job for job, _ in todo])
    record_outcomes(hooks, hooks.dagster_home(cfg),
                    {t: p for _, by_task in todo for t, p in by_task.items()}, states, sl)
    return summary
