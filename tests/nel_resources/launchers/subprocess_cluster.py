"""A cluster type written the way a new one is added (the proof that it takes one module and
one `LAUNCHERS` line): `type: subprocess` runs each stale partition as a local worker
process (`python -m nel_assets.engine.remote_shard`, the same worker a docker container
runs), all at once, and hands back how each ended. Registered by the tests only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import ClassVar

from nel_resources.launchers.base import COMMON_KEYS, LaunchContext, Launcher
from nel_resources.launchers.partitions import PartitionJob, PartitionResult, last_line

_PREFIX = "NEL_SHARD_OUTCOME "
_TARGET = "tests.nel_resources.launchers.subprocess_cluster:SubprocessCluster"


class SubprocessCluster(Launcher):
    """Each partition as a worker process on this host."""

    kind = "subprocess"
    keys: ClassVar[frozenset[str]] = COMMON_KEYS
    runs = "partitions"

    def run(self, jobs: list[PartitionJob], ctx: LaunchContext) -> list[PartitionResult]:
        """Start every worker, then collect each one's outcome line (or its last error line)."""
        procs = []
        for job in jobs:
            env = {**os.environ, "NEL_SHARD_IDX": str(job.shard), "NEL_TOTAL_SHARDS": str(job.total)}
            # The worker reads the run's config (`type: subprocess`): its process registers the
            # type as this one did (a product type is in the table for every process).
            boot = (f"from nel_resources.launchers.registry import LAUNCHERS; "
                    f"LAUNCHERS['subprocess'] = {_TARGET!r}; "
                    "from nel_assets.engine.remote_shard import main; raise SystemExit(main())")
            cmd = [sys.executable, "-c", boot, "--config", job.config_path,
                   "--benchmark", job.benchmark, "--model", job.model, "--where", "subprocess"]
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
        results = []
        for job, proc in zip(jobs, procs, strict=True):
            out, err = proc.communicate(timeout=600)
            lines = [ln for ln in out.splitlines() if ln.startswith(_PREFIX)]
            if proc.returncode == 0 and lines:
                results.append(PartitionResult(job, outcome=json.loads(lines[-1][len(_PREFIX):])))
            else:
                results.append(PartitionResult(job, error=f"worker exited {proc.returncode}: "
                                               f"{last_line(err)}", details=err[-4000:]))
        return results
