"""`cluster.type: subprocess`: each stale partition runs as its own `nel` worker process on
this host, `workers` at a time.

The worker is the one a docker container runs (`python -m nel_assets.engine.evaluation.remote_shard`
with its shard in NEL_SHARD_IDX / NEL_TOTAL_SHARDS), started by this interpreter with this
process's environment and working directory, in its own session: it commits its shard to
the shared Parquet store and prints its outcome; the runner then records each partition in
Dagster and merges as for a local run. A worker that fails fails its partition alone (its
siblings' results are kept), so the next `nel eval run` submits only it. Each worker's
output is kept in `<output>/launch/subprocess/<benchmark>-<model>-<shard>.log`; the states
(PENDING, RUNNING, COMPLETED, FAILED) in `<output>/launch/states.json`.

Keys, in the `cluster.subprocess:` block:
  `workers`: worker processes at once (a positive integer; default: the CPU count).

    cluster:
      type: subprocess
      shards: 4
      subprocess: {workers: 2}

No Dagster here.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from benchmarks.errors import NelError
from nel_resources.launchers.base import COMMON_KEYS, LaunchContext, Launcher, Refusal
from nel_resources.launchers.partitions import (
    PartitionJob,
    PartitionResult,
    last_line,
    read_outcome,
)

if TYPE_CHECKING:
    from nel_resources.config import NelConfig

#: The keys of `cluster.subprocess` and what they set.
SUBPROCESS_KEYS = {"workers": "worker processes at once"}
_WORKER_MODULE = "nel_assets.engine.evaluation.remote_shard"


def workers_of(block: dict[str, Any]) -> int:
    """How many workers run at once (`workers`, else the CPU count)."""
    return int(block.get("workers") or os.cpu_count() or 1)


class SubprocessCluster(Launcher):
    """Partitions as worker processes of this host; see the module docstring."""

    kind = "subprocess"
    keys: ClassVar[frozenset[str]] = COMMON_KEYS
    runs = "partitions"

    def refusal(self, cfg: NelConfig) -> Refusal | None:
        """Another type's block, or a `cluster.subprocess` key nel does not read or a bad
        `workers`."""
        if (bad := super().refusal(cfg)) is not None:
            return bad
        for key, value in cfg.cluster.block(self.kind).items():
            at = ("cluster", self.kind, key)
            if key not in SUBPROCESS_KEYS:
                return Refusal.unbuilt(at, f"the subprocess setting {key!r} (nel reads "
                                       f"{', '.join(SUBPROCESS_KEYS)})", f"remove `{key}`")
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                return Refusal(at, f"workers {value!r}: write a positive integer (worker "
                               "processes at once)")
        return None

    def preflight(self, resolved: Any) -> None:
        """The worker's interpreter finds nel's shard worker (a worker started with this
        environment would fail at once otherwise)."""
        probe = f"import importlib.util as u, sys; sys.exit(u.find_spec({_WORKER_MODULE!r}) is None)"
        proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                              cwd=os.getcwd())
        if proc.returncode != 0:
            raise NelError(f"cluster.type subprocess: {sys.executable} cannot import {_WORKER_MODULE} "
                           f"({last_line(proc.stderr, 'not found')}); install nel there or set PYTHONPATH")

    def run(self, jobs: list[PartitionJob], ctx: LaunchContext) -> list[PartitionResult]:
        """Every job as a worker process, `workers` at a time; one result per job, in order.
        An interrupt stops the running workers (their process groups)."""
        if not jobs:
            return []
        log_dir = ctx.output_dir / "launch" / self.kind
        log_dir.mkdir(parents=True, exist_ok=True)
        pool = _Workers(ctx, log_dir)
        ex = ThreadPoolExecutor(max_workers=workers_of(ctx.cluster.block(self.kind)))
        try:
            return list(ex.map(pool.run_one, jobs))
        finally:
            pool.stop_all()  # before the pool waits: after an interrupt, none is left running
            ex.shutdown(wait=True, cancel_futures=True)


class _Workers:
    """The running worker processes of one `run` (so an interrupt can stop them)."""

    def __init__(self, ctx: LaunchContext, log_dir: Path) -> None:
        self.ctx = ctx
        self.log_dir = log_dir
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[bytes]] = set()
        self._stopping = False

    def run_one(self, job: PartitionJob) -> PartitionResult:
        """Start `job`'s worker, wait for it, read its outcome."""
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{job.benchmark}-{job.model}-{job.shard}")
        log = self.log_dir / f"{name}.log"
        cmd = [sys.executable, "-m", _WORKER_MODULE, "--config", job.config_path,
               "--benchmark", job.benchmark, "--model", job.model]
        if job.base_url:
            cmd += ["--base-url", job.base_url]
        env = {**os.environ, "NEL_SHARD_IDX": str(job.shard), "NEL_TOTAL_SHARDS": str(job.total)}
        with self._lock:
            if self._stopping:
                return PartitionResult(job, error="not started: the run was interrupted")
            with open(log, "wb") as err:
                # Its own session: an interrupt stops the whole worker tree, and a terminal's
                # Ctrl-C reaches this process only.
                proc = subprocess.Popen([*cmd, "--where", f"subprocess worker {name}"], env=env,
                                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                                        start_new_session=True)
            self._running.add(proc)
        self.ctx.report(job, "RUNNING", f"pid {proc.pid}")
        out, _ = proc.communicate()
        with self._lock:
            self._running.discard(proc)
        stdout = out.decode(errors="replace")
        stderr = log.read_text(errors="replace")
        outcome = read_outcome(stdout)
        if proc.returncode == 0 and outcome is not None:
            return PartitionResult(job, outcome=outcome, details=stderr[-4000:])
        why = last_line(stderr, f"exit status {proc.returncode}")
        return PartitionResult(job, error=f"worker exited with {proc.returncode}: {why} (log {log})",
                               details=stdout[-2000:] + stderr[-6000:])

    def stop_all(self) -> None:
        """Stop every worker still running (after an interrupt; none after a normal end)."""
        with self._lock:
            self._stopping = True
            running = list(self._running)
        for proc in running:
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # workers may ignore SIGTERM (see DESIGN)

