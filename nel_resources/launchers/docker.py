"""`cluster.type: docker`: each stale partition runs as a container of nel's image.

The containers run at once (`docker run -d`), each with its shard in NEL_SHARD_IDX /
NEL_TOTAL_SHARDS, the output directory (the shared Parquet store) mounted at the same path,
and the host's network, so a model endpoint on 127.0.0.1 is reachable. The runner records
each finished partition in Dagster and merges (bundles, reports) as a local run does.

Keys honoured (NeMo Evaluator's docker cluster, plus nel's `docker:` block):
`image` (none or `local`: nel's image is built here, `nel:local`), `container_env` (passed
by name, so values never appear on a command line), `container_mounts`, `mount_home`,
`shm_size`, `docker.network` (default `host`), `docker.gpus`, `docker.max_parallel`.

No Dagster here.
"""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from benchmarks.errors import NelError
from nel_resources.config.deployment import ClusterConfig
from nel_resources.images.container_image import docker_bin
from nel_resources.launchers.base import (
    COMMON_KEYS,
    CONTAINER_KEYS,
    LaunchContext,
    Launcher,
    Refusal,
)
from nel_resources.launchers.forwarded_env import referenced_env
from nel_resources.launchers.partitions import (
    PartitionJob,
    PartitionResult,
    last_line,
    read_outcome,
)

if TYPE_CHECKING:
    from nel_resources.config import NelConfig

#: nel's image when `cluster.image` is unset or `local`: built here from deploy/docker/Dockerfile.
LOCAL_TAG = "nel:local"
#: The keys of `cluster.docker` nel reads; any other is refused (DockerCluster.refusal).
DOCKER_KEYS = {"network": "the container network (default host)",
               "gpus": "docker run --gpus", "max_parallel": "containers at once"}
_WORKER = ["python", "-m", "nel_assets.engine.evaluation.remote_shard"]


def docker_block_refusal(cluster: ClusterConfig) -> tuple[str, str] | None:
    """(key, one-line reason) for a `cluster.docker` key nel does not read, else None."""
    for key, value in cluster.docker.items():
        if key not in DOCKER_KEYS:
            return key, f"the docker setting {key!r} (nel reads {', '.join(DOCKER_KEYS)})"
        if key == "max_parallel" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            return key, f"max_parallel {value!r} (it must be a positive integer)"
    return None


def resolve_image(cluster: ClusterConfig) -> str:
    """The image the shards run in; nel's own is built (cheaply when unchanged) first."""
    if cluster.image and cluster.image != "local":
        return cluster.image
    from nel_resources.launchers.nel_image import build_nel_image

    build_nel_image(LOCAL_TAG)
    return LOCAL_TAG


def forwarded_env(config_path: Path, cluster: ClusterConfig) -> dict[str, str]:
    """Variables the containers get: `container_env`, NEL_DATA_DIR, and every `${VAR}` (and
    `api_key_env`) the effective config refers to that is set here (API keys by reference)."""
    env = referenced_env(config_path)
    env.update(cluster.container_env)
    return env


def mounts(output_dir: Path, cluster: ClusterConfig, read_only: Iterable[Path]) -> list[str]:
    """`-v` specs: the output (read-write, same path), what the run reads (read-only, same
    path: data, BYOB modules), the home directory (`mount_home`) and `container_mounts`."""
    specs = [f"{output_dir}:{output_dir}"]
    for p in sorted({Path(p).resolve() for p in read_only}):
        if p.exists() and not p.is_relative_to(output_dir):
            specs.append(f"{p}:{p}:ro")
    home = os.environ.get("HOME")
    if cluster.mount_home and home and Path(home).is_dir():
        specs.append(f"{home}:{home}")
    specs.extend(cluster.container_mounts)
    return specs


class DockerLauncher:
    """Runs partition jobs as containers of one image; see the module docstring."""

    def __init__(self, cluster: ClusterConfig, image: str, output_dir: Path,
                 read_only: Iterable[Path] = ()) -> None:
        self.cluster = cluster
        self.image = image
        self.output_dir = output_dir
        self.read_only = list(read_only)
        self.run_id = uuid.uuid4().hex[:8]

    def command(self, job: PartitionJob, name: str, env_names: Iterable[str]) -> list[str]:
        """The `docker run` command of one job (values of env vars are not in it)."""
        d = self.cluster.docker
        cmd = [docker_bin(), "run", "-d", "--name", name, "--label", f"nel.run={self.run_id}",
               "--network", str(d.get("network", "host")),
               "-e", f"NEL_SHARD_IDX={job.shard}", "-e", f"NEL_TOTAL_SHARDS={job.total}"]
        for n in env_names:
            cmd += ["-e", n]  # the value comes from this process's environment
        for spec in mounts(self.output_dir, self.cluster, self.read_only):
            cmd += ["-v", spec]
        if self.cluster.shm_size:
            cmd += ["--shm-size", self.cluster.shm_size]
        if d.get("gpus") is not None:
            cmd += ["--gpus", str(d["gpus"])]
        if os.getuid() != 0:  # files in the shared store belong to the user, not root
            cmd += ["--user", f"{os.getuid()}:{os.getgid()}", "-e", "HOME=/tmp"]
        cmd += [self.image, *_WORKER, "--config", job.config_path, "--benchmark", job.benchmark,
                "--model", job.model, "--where", f"docker container {name}"]
        if job.base_url:
            cmd += ["--base-url", job.base_url]
        return cmd

    def run(self, jobs: list[PartitionJob]) -> list[PartitionResult]:
        """Run every job (at most `docker.max_parallel` at once); one result per job, in
        order. A failed container fails its job only. Containers are removed at the end,
        and on an interrupt."""
        env_vars = forwarded_env(Path(jobs[0].config_path), self.cluster) if jobs else {}
        env = {**os.environ, **env_vars}
        limit = int(self.cluster.docker.get("max_parallel") or len(jobs) or 1)
        results: list[PartitionResult] = []
        started: list[str] = []
        try:
            for i in range(0, len(jobs), limit):
                batch = jobs[i:i + limit]
                names = [f"nel-{self.run_id}-{j.benchmark}-{j.shard}-{k}"[:120]
                         for k, j in enumerate(batch, start=i)]
                names = [re.sub(r"[^a-zA-Z0-9_.-]", "-", n) for n in names]
                running: list[tuple[PartitionJob, str | None, str]] = []
                for job, name in zip(batch, names, strict=True):
                    proc = subprocess.run(self.command(job, name, env_vars), capture_output=True,
                                          text=True, env=env)
                    if proc.returncode != 0:
                        running.append((job, None, f"docker run failed: {last_line(proc.stderr)}"))
                        continue
                    started.append(name)
                    running.append((job, name, ""))
                results += [self._wait(job, name, err) for job, name, err in running]
        finally:
            self._remove(started)
        return results

    def _wait(self, job: PartitionJob, name: str | None, err: str) -> PartitionResult:
        if name is None:
            return PartitionResult(job, error=err)
        docker = docker_bin()
        wait = subprocess.run([docker, "wait", name], capture_output=True, text=True)
        logs = subprocess.run([docker, "logs", name], capture_output=True, text=True)
        status = wait.stdout.strip()
        outcome = read_outcome(logs.stdout)
        if status == "0" and outcome is not None:
            return PartitionResult(job, outcome=outcome, details=logs.stderr[-4000:])
        why = last_line(logs.stderr, f"exit status {status or '?'}")
        return PartitionResult(job, error=f"container {name} exited with {status or '?'}: {why}",
                               details=logs.stdout[-2000:] + logs.stderr[-6000:])

    def _remove(self, names: list[str]) -> None:
        if names:
            subprocess.run([docker_bin(), "rm", "-f", *names], capture_output=True, text=True)



def check_docker_usable() -> None:
    """NelError (one line) when the Docker engine cannot be reached from here."""
    proc = subprocess.run([docker_bin(), "version", "--format", "{{.Server.Version}}"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise NelError(f"cluster.type docker: the Docker engine is not reachable "
                       f"({last_line(proc.stderr)}); start it or set DOCKER_HOST")


class DockerCluster(Launcher):
    """`cluster.type: docker` behind the Launcher interface: the engine and image checked
    first, then every stale partition as a container (DockerLauncher)."""

    kind = "docker"
    keys: ClassVar[frozenset[str]] = COMMON_KEYS | CONTAINER_KEYS | {"image"}
    runs = "partitions"

    def __init__(self) -> None:
        # The image each `cluster.image` runs, resolved (nel's own built) once per process.
        self._images: dict[str | None, str] = {}

    def refusal(self, cfg: NelConfig) -> Refusal | None:
        """Another type's block, or a `cluster.docker` key nel does not read."""
        if (bad := super().refusal(cfg)) is not None:
            return bad
        if (block := docker_block_refusal(cfg.cluster)) is not None:
            return Refusal.unbuilt(("cluster", "docker", block[0]), block[1], f"remove `{block[0]}`")
        return None

    def preflight(self, resolved: Any) -> None:
        """The Docker engine reachable and the image there (nel's own built when it is not)."""
        cluster = resolved.cluster
        check_docker_usable()
        self._images[cluster.image] = resolve_image(cluster)

    def run(self, jobs: list[PartitionJob], ctx: LaunchContext) -> list[PartitionResult]:
        """Every job as a container of the run's image."""
        cluster = ctx.cluster
        check_docker_usable()
        image = self._images.get(cluster.image) or resolve_image(cluster)
        return DockerLauncher(cluster, image, ctx.output_dir, ctx.read_only).run(jobs)
