"""`cluster.type: ray`: each stale partition runs as a Ray task.

Without an address nel starts a private local Ray cluster in-process (`ray.init()` with its
own temp dir, no dashboard) and shuts it down after the run; it never touches other Ray
processes on the machine. With `cluster.ray.address` (or RAY_ADDRESS, which `ray job submit`
sets for the driver, as NeMo Evaluator's Ray pattern runs) nel connects to that cluster; its
workers need nel installed and the output directory on a shared filesystem. An address that
cannot be reached is one line, before any shard runs.

A task does not inherit the driver's environment (a cluster's workers are started by its
raylets), so the variables the effective config refers to (`${VAR}`, `api_key_env`,
NEL_DATA_DIR) travel with each task as an argument and are set around the shard's work: not
through a runtime_env, which Ray shows in its dashboard, API keys included.

Keys of `cluster.ray`: `address`, `num_cpus` (per task, default 1), `num_gpus` (per task),
`max_retries` (Ray's retries of a task whose worker died; default 0: a failed shard is
reported and the next `nel eval run` reruns it).

No Dagster here.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn
from urllib.parse import urlsplit

from benchmarks.errors import NelError
from nel_resources.config.deployment import ClusterConfig
from nel_resources.launchers.base import COMMON_KEYS, LaunchContext, Launcher, Refusal
from nel_resources.launchers.forwarded_env import referenced_env
from nel_resources.launchers.partitions import PartitionJob, PartitionResult, last_line

if TYPE_CHECKING:
    from nel_resources.config import NelConfig

_log = logging.getLogger("nel.ray")

RAY_KEYS = {"address": "a Ray cluster to connect to", "num_cpus": "CPUs per task",
            "num_gpus": "GPUs per task", "max_retries": "retries of a task whose worker died"}


def ray_block_refusal(cluster: ClusterConfig) -> tuple[str, str] | None:
    """(key, one-line reason) for a `cluster.ray` key nel does not read or a bad value."""
    for key, value in cluster.ray.items():
        if key not in RAY_KEYS:
            return key, f"the Ray setting {key!r} (nel reads {', '.join(RAY_KEYS)})"
        if key == "address" and not isinstance(value, str):
            return key, f"address {value!r} (write host:port or ray://host:port)"
        if key in ("num_cpus", "num_gpus") and (isinstance(value, bool) or not isinstance(value, int | float) or value < 0):
            return key, f"{key} {value!r} (it must be a number >= 0)"
        if key == "max_retries" and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            return key, f"max_retries {value!r} (it must be an integer >= 0)"
    return None


def ray_address(cluster: ClusterConfig) -> str | None:
    """The cluster to connect to (config, else RAY_ADDRESS); None: a private local one."""
    addr = cluster.ray.get("address") or os.environ.get("RAY_ADDRESS") or None
    return None if addr in (None, "local") else str(addr)


def check_job_output_dir(output_dir: str) -> None:
    """NelError (one line) when nel runs as a `ray job submit` driver and the output dir is
    inside the job's working_dir copy: the driver's cwd, an unpacked copy on the head node
    only (tasks on other nodes would write elsewhere), which Ray deletes when it is unused."""
    job = os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR")  # set by Ray for a job's driver only
    if not job:
        return
    try:
        runtime_env = json.loads(job).get("runtime_env") or {}
    except (ValueError, AttributeError):  # not the JSON object Ray writes: not a job of ours to judge
        return
    if not isinstance(runtime_env, dict) or not runtime_env.get("working_dir"):
        return
    out, cwd = Path(output_dir).expanduser().resolve(), Path.cwd().resolve()
    if out == cwd or cwd in out.parents:
        raise NelError(f"output.dir {out} is inside this Ray job's working_dir copy ({cwd}), which "
                       "Ray deletes: give output.dir (or -o) an absolute path on storage the cluster's nodes share")


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """NelError (one line) when nothing listens at a Ray address (`auto` is Ray's own)."""
    if address == "auto":
        return
    parts = urlsplit(address if "://" in address else f"ray://{address}")
    host, port = parts.hostname, parts.port
    if not host or not port:
        raise NelError(f"cluster.ray.address {address!r}: write host:port or ray://host:port")
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        raise NelError(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}; "
                       "start it (ray start --head) or fix cluster.ray.address") from None


#: What Ray Client's proxy answers when the per-driver server it starts on the head died or
#: did not answer in time: the head was busy, not the driver wrong (seen in CI on a loaded
#: 2-core machine, never on an idle one), so the connection is tried again. The psutil names
#: are the proxy asking after a per-driver server that crashed as it started (gRPC's fork
#: check, `next_worker->state == KICKED`, in its log).
_CLIENT_SERVER_START_FAILED = ("Starting Ray client server failed", "Proxy failed to Connect to backend",
                               "psutil.ZombieProcess", "psutil.NoSuchProcess")


def connect(ray: Any, address: str, attempts: int = 3, pause_s: float = 2.0) -> None:
    """`ray.init` on a running cluster; NelError (one line) when the driver cannot join it.

    Ray's native client logs each refused handshake (a wrong token: ~20 s of one-line
    warnings on stderr) before ray.init gives up; nel's line comes last and says what to fix.
    A `ray://` address whose head failed to start this driver's client server is tried up to
    `attempts` times, `pause_s` apart, with a warning each time."""
    for attempt in range(1, attempts + 1):
        try:
            ray.init(address=address, log_to_driver=False)
            return
        except Exception as exc:  # ConnectionError, RuntimeError, AuthenticationError: all one line
            text = str(exc)
            if attempt < attempts and any(m in text for m in _CLIENT_SERVER_START_FAILED):
                _log.warning("Ray Client at %s: the head did not start this driver's server "
                             "(attempt %d of %d); trying again", address, attempt, attempts)
                with suppress(Exception):  # a half-open client session, if any
                    ray.shutdown()
                time.sleep(pause_s)
                continue
            _refuse(address, exc)


def _refuse(address: str, exc: Exception) -> NoReturn:
    """The one line for a driver that cannot join the cluster at `address`."""
    reason = last_line(str(exc).split(". ")[0], type(exc).__name__)
    raise NelError(
        f"cannot join the Ray cluster at {address}: {reason}; nel must run on one of its nodes "
        "(or through `ray job submit`) and, when the cluster uses token authentication, with its "
        "token (RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH)") from None


@contextmanager
def ray_session(cluster: ClusterConfig, n_tasks: int) -> Iterator[Any]:
    """`ray`, initialised: connected to the configured cluster, or a private local one
    sized for `n_tasks` concurrent tasks; always shut down (and its temp dir removed)."""
    try:
        import ray
    except ImportError:
        raise NelError("cluster.type ray needs Ray: pip install 'nel[ray]'") from None
    address = ray_address(cluster)
    tmp = None
    if address is not None:
        check_reachable(address)
        connect(ray, address)
    else:
        # A short path: Ray's unix sockets live under it (108-byte limit).
        tmp = tempfile.mkdtemp(prefix="nelray", dir="/tmp")
        per_task = float(cluster.ray.get("num_cpus", 1))
        cpus = max(os.cpu_count() or 1, int(per_task * n_tasks + 0.999), 1)
        ray.init(num_cpus=cpus, include_dashboard=False, _temp_dir=tmp, log_to_driver=False,
                 configure_logging=False)
    try:
        yield ray
    finally:
        ray.shutdown()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def run_in_env(work: Callable[[PartitionJob], dict[str, Any]], env: Mapping[str, str],
               job: PartitionJob) -> dict[str, Any]:
    """The Ray task: `work(job)` with the runner's forwarded variables set, then restored
    (a worker process runs other tasks after this one)."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        return work(job)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class RayLauncher:
    """Runs partition jobs as Ray tasks of `work(job) -> outcome dict` (the shard worker)."""

    def __init__(self, cluster: ClusterConfig, work: Callable[[PartitionJob], dict[str, Any]]) -> None:
        self.cluster = cluster
        self.work = work

    def run(self, jobs: list[PartitionJob]) -> list[PartitionResult]:
        """Every job at once; one result per job, in order. A task that raises (or whose
        worker dies) fails its job only."""
        if not jobs:
            return []
        with ray_session(self.cluster, len(jobs)) as ray:
            opts: dict[str, Any] = {"num_cpus": self.cluster.ray.get("num_cpus", 1),
                                    "max_retries": int(self.cluster.ray.get("max_retries", 0))}
            if self.cluster.ray.get("num_gpus"):
                opts["num_gpus"] = self.cluster.ray.get("num_gpus")
            task = ray.remote(run_in_env).options(**opts)
            env = referenced_env(Path(jobs[0].config_path))
            refs = [task.remote(self.work, env, j) for j in jobs]
            results: list[PartitionResult] = []
            for job, ref in zip(jobs, refs, strict=True):
                try:
                    results.append(PartitionResult(job, outcome=ray.get(ref)))
                except Exception as exc:  # RayTaskError wraps the worker's own exception
                    cause = getattr(exc, "cause", None) or exc
                    line = last_line(str(cause).split("\n\n")[0], type(cause).__name__)
                    results.append(PartitionResult(job, error=f"Ray task failed: {type(cause).__name__}: {line}",
                                                   details=str(exc)[-6000:]))
            return results


class RayCluster(Launcher):
    """`cluster.type: ray` behind the Launcher interface: the address checked first, then
    every stale partition as a Ray task of the injected shard worker (RayLauncher)."""

    kind = "ray"
    keys: ClassVar[frozenset[str]] = COMMON_KEYS
    runs = "partitions"

    def refusal(self, cfg: NelConfig) -> Refusal | None:
        """Another type's block, or a `cluster.ray` key nel does not read or a bad value."""
        if (bad := super().refusal(cfg)) is not None:
            return bad
        if (block := ray_block_refusal(cfg.cluster)) is not None:
            return Refusal.unbuilt(("cluster", "ray", block[0]), block[1], f"remove `{block[0]}`")
        return None

    def preflight(self, resolved: Any) -> None:
        """In a `ray job submit` driver, the output dir outside the job's working_dir copy;
        a configured address reachable."""
        cluster = resolved.cluster
        check_job_output_dir(resolved.output_dir)
        address = ray_address(cluster)
        if address is not None:
            check_reachable(address)

    def run(self, jobs: list[PartitionJob], ctx: LaunchContext) -> list[PartitionResult]:
        """Every job as a Ray task of `ctx.work`."""
        if ctx.work is None:
            raise NelError("cluster.type ray: the runner gave no shard worker to run")
        return RayLauncher(ctx.cluster, ctx.work).run(jobs)
