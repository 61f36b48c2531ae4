"""`SlurmLauncherResource`: the SLURM launcher as a Dagster resource.

`nel eval run` with `cluster.type: slurm` and anything launched from the Dagster UI or a
sensor get the same launcher: its settings are plain config (shown in the UI), the SLURM
client commands do the work (nel_resources.launchers.slurm).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dagster as dg

from nel_resources.launchers.slurm import SlurmLauncher, TaskState


class SlurmLauncherResource(dg.ConfigurableResource):
    """Submit, watch, cancel and account SLURM jobs from the Dagster process's host.

    Attributes:
        slurm_conf: the cluster's slurm.conf (default: `$SLURM_CONF`, else the commands'
            own default).
        poll_seconds: seconds between two looks at the queue while waiting.
    """

    slurm_conf: str | None = None
    poll_seconds: float = 0.5

    def launcher(self) -> SlurmLauncher:
        """A plain SlurmLauncher with these settings (usable outside Dagster)."""
        env = dict(os.environ)
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        return SlurmLauncher(env=env, poll_s=self.poll_seconds)

    def submit(self, script: str | Path, *, array: str | None = None, dependency: str | None = None,
               args: list[str] | None = None) -> str:
        """`sbatch --parsable`; returns the job id."""
        return self.launcher().submit(Path(script), array=array, dependency=dependency, args=args or [])

    def wait(self, job_ids: list[str]) -> dict[str, TaskState]:
        """Block until every task of `job_ids` ended."""
        return self.launcher().wait(job_ids)

    def cancel(self, job_ids: list[str]) -> None:
        """`scancel` the jobs."""
        self.launcher().cancel(job_ids)

    def accounting(self, job_ids: list[str]) -> dict[str, dict[str, Any]]:
        """Per task: state, exit code, elapsed seconds and sacct figures, as asset metadata."""
        from nel_resources.launchers.slurm import metadata_of

        return {t: metadata_of(st) for t, st in self.launcher().accounting(job_ids).items()}
