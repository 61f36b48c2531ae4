"""The single-node SLURM cluster for the `slurm` sandbox (and launcher) tests: installed and
started by the project's own `deploy/slurm/start_slurm.sh`. Skips locally when it cannot
start; fails in CI."""

from __future__ import annotations

import os
import subprocess

from tests.support.realcomponents import REPO_ROOT, require_real_component


def start_slurm_cluster(*, accounting: bool = False) -> str:
    """Start the cluster if needed (idempotent: under a second when it is up; the first call
    installs Debian's slurm packages) and return its SLURM_CONF.

    `accounting` adds MariaDB + slurmdbd so `sacct` answers; switching it on restarts
    slurmctld once (queued and running jobs survive), later starts keep it on.
    """
    script = REPO_ROOT / "deploy" / "slurm" / "start_slurm.sh"
    env = {**os.environ, **({"NEL_SLURM_ACCOUNTING": "1"} if accounting else {})}
    try:
        proc = subprocess.run(["bash", str(script)], capture_output=True, text=True,
                              env=env, timeout=1200)
    except subprocess.TimeoutExpired:
        require_real_component("deploy/slurm/start_slurm.sh did not finish in 20 minutes")
    if proc.returncode != 0:
        require_real_component(f"the SLURM cluster did not start: {proc.stderr.strip()[-2000:]}")
    for line in proc.stdout.splitlines():
        if line.startswith("export SLURM_CONF="):
            return line.split("=", 1)[1]
    require_real_component(f"start_slurm.sh printed no SLURM_CONF: {proc.stdout!r}")
