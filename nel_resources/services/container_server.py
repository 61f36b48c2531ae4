"""Launched model servers run as containers (`cluster.type: docker`), one per service.

The server's own command line (`service_command`: `vllm serve ...`, SGLang's and TRT-LLM's
launchers) runs in the service's `image` (NeMo Evaluator's default images when unset),
on the host network so the health check, nel and the shard containers all reach it at
127.0.0.1:<port>. GPUs are asked for as Docker device requests (`--gpus "device=0,1"`):
`services.<n>.gpus` (a count or device ids, NeMo Evaluator's key), else tensor x pipeline x
data parallel. The container's log is saved beside the results when it stops; it is removed
on success, failure and Ctrl-C.
"""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from pathlib import Path

from benchmarks.errors import NelError
from nel_resources.config import ServiceConfig
from nel_resources.runtime.processes import HealthCheckError, free_port, wait_http_ok

#: NeMo Evaluator 0.3.0's deployment images (its containers.toml), plus TRT-LLM's release
#: image; `services.<n>.image` pins another.
DEFAULT_IMAGES: dict[str, str] = {
    "vllm": "vllm/vllm-openai:latest",
    "sglang": "lmsysorg/sglang:latest",
    "trt_llm": "nvcr.io/nvidia/tensorrt-llm/release:latest",
}


def server_image(name: str, svc: ServiceConfig) -> str:
    """The image the server of `svc` runs in.

    Raises:
        NelError: a llama.cpp (or custom `command`) service without `image`: nel has no
            default image for it.
    """
    if svc.image:
        return svc.image
    if svc.command is None and svc.type in DEFAULT_IMAGES:
        return DEFAULT_IMAGES[svc.type]
    raise NelError(f"service {name!r}: a {svc.type} server in a container needs `image` "
                   "(nel has no default image for it)")


def gpu_devices(svc: ServiceConfig) -> list[str]:
    """The GPU ids the server's container asks for: `gpus` (ids, or a count from 0),
    else one per tensor x pipeline x data parallel rank (none for llama.cpp)."""
    if isinstance(svc.gpus, list):
        return [str(g) for g in svc.gpus]
    if isinstance(svc.gpus, int):
        return [str(i) for i in range(svc.gpus)]
    if svc.type == "llama_cpp" or svc.command is not None:
        return []
    n = svc.tensor_parallel_size * (svc.pipeline_parallel_size or 1) * (svc.data_parallel_size or 1)
    return [str(i) for i in range(n)]


def in_container_argv(argv: list[str]) -> list[str]:
    """The server command as the image runs it: nel's interpreter path means the image's
    `python3` (SGLang's launcher is a module)."""
    return ["python3", *argv[1:]] if argv and argv[0] == sys.executable else list(argv)


def docker_run_command(docker: str, container: str, image: str, svc: ServiceConfig,
                       argv: list[str], shm_size: str | None = None) -> list[str]:
    """`docker run -d ...` for the server: host network, GPU device request, the service's
    env (by name: values stay off the command line), its `container_mounts`, the model
    file's directory read-only when `model_path` is local, and the server's own argv as
    entrypoint + arguments (so the image's entrypoint does not prepend another command)."""
    cmd = [docker, "run", "-d", "--name", container, "--label", "nel.role=model-server",
           "--network", "host"]
    devices = gpu_devices(svc)
    if devices:
        # The quotes are part of the value: the CLI reads `--gpus` as CSV, and ids are
        # comma-separated.
        cmd += ["--gpus", f'"device={",".join(devices)}"']
    if shm_size:
        cmd += ["--shm-size", shm_size]
    for key in sorted(svc.env):
        cmd += ["-e", key]
    local = Path(svc.model_path).expanduser() if svc.model_path else None
    if local is not None and local.exists():
        where = local.resolve().parent if local.is_file() else local.resolve()
        cmd += ["-v", f"{where}:{where}:ro"]
    for spec in svc.container_mounts:
        cmd += ["-v", spec]
    run = in_container_argv(argv)
    return [*cmd, "--entrypoint", run[0], image, *run[1:]]


class ContainerService:
    """One launched server in a container: the same face as `LaunchedService` (start ->
    base URL, stop, `log_path`, `argv`), with a container instead of a process group."""

    def __init__(self, name: str, svc: ServiceConfig, log_dir: Path, log_name: str | None = None,
                 shm_size: str | None = None) -> None:
        from nel_resources.images.container_image import docker_bin
        from nel_resources.services.launch import health_path, service_command

        self.name = name
        self.svc = svc
        self.log_dir = Path(log_dir)
        self.port = svc.port or free_port(svc.host)
        self.argv = service_command(name, svc, self.port)
        self.image = server_image(name, svc)
        self.container = re.sub(r"[^a-zA-Z0-9_.-]", "-", f"nel-{name}-{uuid.uuid4().hex[:8]}")
        self.docker = docker_bin()
        self.command = docker_run_command(self.docker, self.container, self.image, svc,
                                          self.argv, shm_size)
        self.log_path = self.log_dir / (log_name or f"{name}.docker.log")
        self.url = f"http://{svc.host}:{self.port}/v1"
        self.health_url = f"http://{svc.host}:{self.port}{health_path(svc)}"
        self._started = False

    @property
    def pid(self) -> int | None:
        """No host process: the server is the container `self.container`."""
        return None

    def start(self) -> str:
        """Run the container and block until the health endpoint answers; the base URL.

        Raises:
            NelError: `docker run` failed, the container exited, or it stayed unhealthy past
                `startup_timeout` (each with the last lines of its log).
        """
        import os

        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.svc.env}
        proc = subprocess.run(self.command, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            why = (proc.stderr.strip().splitlines() or ["?"])[-1]
            raise NelError(f"service {self.name!r}: docker run {self.image} failed: {why}")
        self._started = True
        try:
            wait_http_ok(self.health_url, timeout=self.svc.startup_timeout, alive=self._running)
        except HealthCheckError as exc:
            tail = self._save_log()
            self.stop()
            raise NelError(f"service {self.name!r} (container {self.container}) did not become "
                           f"healthy: {exc}; last lines of its log: {tail}") from None
        except BaseException:
            self.stop()  # Ctrl-C during a long load must not leave the container behind
            raise
        return self.url

    def _running(self) -> bool:
        out = subprocess.run([self.docker, "inspect", "-f", "{{.State.Running}}", self.container],
                             capture_output=True, text=True)
        return out.stdout.strip() == "true"

    def _save_log(self) -> str:
        """Write the container's log next to the results; its last lines, for errors."""
        out = subprocess.run([self.docker, "logs", self.container], capture_output=True, text=True)
        text = out.stdout + out.stderr
        self.log_path.write_text(text, encoding="utf-8")
        return " | ".join(text.strip().splitlines()[-5:]) or "(empty)"

    def stop(self) -> None:
        """Keep the log, remove the container (idempotent)."""
        if not self._started:
            return
        self._started = False
        try:
            self._save_log()
        finally:
            subprocess.run([self.docker, "rm", "-f", self.container], capture_output=True, text=True)
