"""Inside the jobs `cluster.type: slurm` submits (nel_resources.launchers.slurm_submit):
an array task or heterogeneous job evaluates its one partition into the shared store and
the run's on-disk Dagster instance (`--slurm-task`), and the merge job builds the bundles,
reports and comparisons, then records each task's SLURM outcome on its partition
(`--slurm-merge`). These drive Dagster runs, so they live here; the submission itself and
the job files are in nel_resources.launchers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.errors import NelError
from nel_resources.config import NelConfig
from nel_resources.launchers.slurm import SlurmLauncher
from nel_resources.launchers.slurm_het import (
    elsewhere_for,
    het_plan,
    services_of,
    wait_for_services,
)
from nel_resources.launchers.slurm_scripts import Partition, read_partitions, task_partition
from nel_resources.launchers.slurm_submit import record_outcomes

__all__ = ["run_merge", "run_task"]


def run_task(cfg: NelConfig, part_file: Path, *, resume: bool = True, index: int | None = None,
             svc_dir: Path | None = None) -> Any:
    """One task: evaluate its one partition into the shared store and instance. In a
    heterogeneous job (`index` given), the services of other pools are not started here:
    their components write their URLs into `svc_dir`, waited for first."""
    from dagster_project.runner import run_eval

    p = task_partition(part_file, index=index)
    print(f"nel: {p.label()} ({p.reason})", flush=True)
    plan = het_plan(cfg)
    elsewhere: dict[str, str | None] | None = None
    if plan is not None:
        from dagster_project import runner

        needed = services_of(runner.validate_before_run(cfg), p.benchmark, p.model)
        remote = [n for n in needed if n in plan.pool_of]
        urls = wait_for_services(cfg, remote, svc_dir) if remote and svc_dir is not None else {}
        if remote and svc_dir is None:
            raise NelError(f"{', '.join(remote)} run on another node pool: --slurm-services is needed")
        for name, url in urls.items():
            print(f"nel: services.{name} at {url} (node pool {plan.pool_of[name]})", flush=True)
        elsewhere = elsewhere_for(cfg, plan, needed, urls)
    return run_eval(cfg, resume=resume, progress=False, only={(p.benchmark, p.model, p.shard)},
                    elsewhere=elsewhere)


def run_merge(cfg: NelConfig, run_dir: Path, *, resume: bool = True) -> Any:
    """The merge job: bundles, reports and comparisons of every partition the tasks ran,
    then each task's SLURM outcome recorded on its partition."""
    from dagster_project.run_output import dagster_home_for
    from dagster_project.runner import run_eval

    doc = json.loads((run_dir / "jobs.json").read_text())
    submitted: list[tuple[str, dict[str, Partition]]] = []
    for a in doc["arrays"]:
        parts = read_partitions(run_dir / a["partitions"])
        submitted.append((a["job_id"], {f"{a['job_id']}_{i}": p for i, p in enumerate(parts)}))
    for h in doc.get("hetjobs", []):
        p = read_partitions(run_dir / h["partitions"])[int(h["index"])]
        submitted.append((h["job_id"], {h["job_id"]: p}))
    pairs = {(p.benchmark, p.model) for _, by_task in submitted for p in by_task.values()}
    summary = run_eval(cfg, resume=resume, progress=False, merge_only=pairs)
    # Jobs of an attempt auto_resume replaced were recorded by the CLI when it resubmitted.
    todo = [(job, by_task) for (job, by_task), rec in zip(submitted, [*doc["arrays"], *doc.get("hetjobs", [])],
                                                          strict=True) if not rec.get("recorded")]
    sl = SlurmLauncher()
    states = sl.states([job for job, _ in todo])
    from dagster_project.cluster_launch import RunnerHooks

    record_outcomes(RunnerHooks(), dagster_home_for(cfg),
                    {t: p for _, by_task in todo for t, p in by_task.items()}, states, sl)
    return summary
