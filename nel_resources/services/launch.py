"""Model services nel starts and stops itself (llama.cpp, vLLM, SGLang, TRT-LLM, Dynamo).

A launched service lives for the duration of a run: started before the first shard that
needs it, health-checked with a timeout, its log kept under `<output>/logs/`, and torn
down (process group) on success, failure and Ctrl-C. Two ways in:

- `LaunchedModelService`, a Dagster resource: runs launched from the UI, the daemon or
  `dagster job execute` start the server on first use and stop it when the run ends;
- `launched_services`, a context manager: `nel eval run` keeps one server up across all
  the in-process runs it makes, instead of one start per shard.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import dagster as dg

from benchmarks.errors import NelError
from nel_resources.config import ServiceConfig
from nel_resources.config.services import LAUNCHED_TYPES
from nel_resources.launchers.pyxis import service_prefix
from nel_resources.runtime.processes import (
    HealthCheckError,
    ManagedProcess,
    ProcessExitedError,
    free_port,
)
from nel_resources.specs import ResolvedConfig


def service_command(name: str, svc: ServiceConfig, port: int) -> list[str]:
    """The command line that serves `svc` on 127.0.0.1:`port` (or `svc.host`)."""
    if svc.command:
        return [a.replace("{port}", str(port)).replace("{host}", svc.host) for a in svc.command]
    model = svc.model_path or svc.model
    if not model:
        raise NelError(f"service {name!r} (type {svc.type}) needs `model_path` (or `model`)")
    extra = list(svc.extra_args)
    if model.startswith("hf://"):
        model = resolve_hf_model(model)
    if svc.type == "llama_cpp":
        if not Path(model).expanduser().exists():
            raise NelError(f"service {name!r}: GGUF file not found: {model}")
        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(Path(model).expanduser()),
               "--model_alias", svc.model or Path(model).stem, "--host", svc.host, "--port", str(port)]
        if "--n_threads" not in extra:
            # One thread: two starve the server's HTTP loop on these 2-core machines.
            cmd += ["--n_threads", "1"]
        if "--logits_all" not in extra:
            # Prompt log-probabilities (echo + logprobs, log-likelihood scoring) need the logits
            # of every prompt token. Said explicitly: it is llama-cpp-python's server default
            # today (so it costs nothing more), but without it logprobs requests fail.
            cmd += ["--logits_all", "true"]
        return cmd + extra
    tp, pp, dp = svc.tensor_parallel_size, svc.pipeline_parallel_size, svc.data_parallel_size
    # Each server's documented launcher and flag spellings; pipeline/data parallel sizes only
    # when the config sets them (the servers' own default is 1).
    if svc.type == "vllm":
        return ["vllm", "serve", model, "--host", svc.host, "--port", str(port),
                "--tensor-parallel-size", str(tp),
                *(["--pipeline-parallel-size", str(pp)] if pp else []),
                *(["--data-parallel-size", str(dp)] if dp else []),
                *(["--served-model-name", svc.model] if svc.model else []), *extra]
    if svc.type == "sglang":
        return [sys.executable, "-m", "sglang.launch_server", "--model-path", model, "--host", svc.host,
                "--port", str(port), "--tp-size", str(tp),
                *(["--pp-size", str(pp)] if pp else []), *(["--dp-size", str(dp)] if dp else []),
                *(["--served-model-name", svc.model] if svc.model else []), *extra]
    if svc.type == "trt_llm":
        if dp:
            raise NelError(f"service {name!r}: trtllm-serve has no data parallelism; remove "
                           "`data_parallel_size`")
        return ["trtllm-serve", model, "--host", svc.host, "--port", str(port), "--tp_size", str(tp),
                *(["--pp_size", str(pp)] if pp else []), *extra]
    raise NelError(f"service {name!r}: type {svc.type!r} is not launched by nel")


def health_path(svc: ServiceConfig) -> str:
    """The path nel polls until the server is up: `health_path`, else `/health` for vLLM,
    SGLang and TRT-LLM (each documents it), `/v1/models` for llama.cpp's server and for a
    custom `command`."""
    if svc.health_path:
        return svc.health_path if svc.health_path.startswith("/") else f"/{svc.health_path}"
    return "/health" if svc.type in ("vllm", "sglang", "trt_llm") and not svc.command else "/v1/models"


def server_log_name(name: str, environ: Mapping[str, str] | None = None) -> str:
    """`<name>.log`; inside a SLURM job `<name>.slurm-<task>.log` (`<array>_<index>` for an
    array task, as SLURM and nel's messages name it, else the job id), so the servers of the
    tasks of one run (each task starts its own) keep their logs side by side."""
    env = os.environ if environ is None else environ
    task = slurm_task_id(env)
    return f"{name}.slurm-{task}.log" if task else f"{name}.log"


def slurm_task_id(env: Mapping[str, str]) -> str:
    """`<array job>_<index>` in an array task, the job id in another job, "" outside SLURM."""
    array, index = env.get("SLURM_ARRAY_JOB_ID", ""), env.get("SLURM_ARRAY_TASK_ID", "")
    if array.isdigit() and index.isdigit():
        return f"{array}_{index}"
    job = env.get("SLURM_JOB_ID", "")
    return job if job.isdigit() else ""


def resolve_hf_model(uri: str) -> str:
    """Download `hf://org/repo/path/in/repo.gguf` once into the hub cache; return its path."""
    parts = uri[len("hf://"):].split("/")
    if len(parts) < 3:
        raise NelError(f"bad model path {uri!r}: expected hf://ORG/REPO/FILE")
    repo, filename = "/".join(parts[:2]), "/".join(parts[2:])
    try:
        from huggingface_hub import hf_hub_download

        return hf_hub_download(repo, filename)
    except Exception as exc:
        raise NelError(
            f"cannot download {uri} ({type(exc).__name__}); set NEL_MODEL_PATH (or the "
            "service's model_path) to a local GGUF file"
        ) from None


class LaunchedService:
    """One launched server process: start it, wait until it answers, stop its process group.

    Args:
        name: service name (used for the log file and in errors).
        svc: the service config (`type` one of LAUNCHED_TYPES, or a `command`).
        log_dir: where the log is kept after the server stops.
        log_name: its file name (default `server_log_name`: `<name>.log`, or per SLURM task).
        prefix: what runs the server (`srun ... --container-image=...` for a service with an
            `image` inside a SLURM job: nel_resources.launchers.pyxis); empty: nel's child.
    """

    def __init__(self, name: str, svc: ServiceConfig, log_dir: Path, log_name: str | None = None,
                 prefix: Sequence[str] = ()) -> None:
        self.name = name
        self.svc = svc
        self.log_dir = Path(log_dir)
        self.port = svc.port or free_port(svc.host)
        self.argv = [*prefix, *service_command(name, svc, self.port)]
        self.log_path = self.log_dir / (log_name or server_log_name(name))
        self.url = f"http://{svc.host}:{self.port}/v1"
        self.health_url = f"http://{svc.host}:{self.port}{health_path(svc)}"
        self.process: ManagedProcess | None = None

    @property
    def pid(self) -> int | None:
        """PID (= process-group id) of the server, once started."""
        return None if self.process is None else self.process.pid

    def start(self) -> str:
        """Start the server and block until `/v1/models` answers; returns the base URL.

        Raises:
            NelError: the command is missing, the server exited, or it stayed unhealthy
                past `startup_timeout` (the message carries the log tail).
        """
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.process = ManagedProcess(self.argv, log_path=self.log_path, env=self.svc.env or None,
                                      name=self.name)
        try:
            self.process.start()
        except FileNotFoundError:
            self.process = None
            raise NelError(f"service {self.name!r}: cannot start {self.argv[0]!r} (is it installed?)") from None
        try:
            self.process.wait_healthy(self.health_url, timeout=self.svc.startup_timeout)
        except (HealthCheckError, ProcessExitedError) as exc:
            self.stop()
            raise NelError(f"service {self.name!r} did not become healthy: {exc}") from None
        except BaseException:
            # Ctrl-C during the (possibly long) health wait must not leave the server behind.
            self.stop()
            raise
        return self.url

    def stop(self) -> None:
        """Stop the server's process group (idempotent); the log file is kept."""
        if self.process is not None:
            self.process.stop()


def in_container(svc: ServiceConfig, cluster_type: str) -> bool:
    """Whether the server of `svc` runs as a container: on `cluster.type: docker`, for a
    service with an `image` or a type with a default image (vLLM, SGLang, TRT-LLM); a
    llama.cpp service without `image` stays a process on the host."""
    from nel_resources.services.container_server import DEFAULT_IMAGES

    return cluster_type == "docker" and (
        bool(svc.image) or (svc.command is None and svc.type in DEFAULT_IMAGES))


def make_server(name: str, svc: ServiceConfig, log_dir: Path, *, container: bool = False,
                shm_size: str | None = None, prefix: Sequence[str] = (),
                away: Mapping[str, str] | None = None, log_name: str | None = None,
                cluster: Any = None) -> Any:
    """A `LaunchedService` (behind `prefix`: Pyxis on SLURM), a `ContainerService` (same
    face) when `container` (`cluster.type: docker`), a `DynamoServer` (same face) for a
    `type: dynamo` service (`away`: its roles on other node pools, nel_resources.services.dynamo),
    or a `MultiNodeService` for `num_nodes > 1` (over the nodes of the SLURM job, `cluster`
    its `cluster:`)."""
    if svc.type == "dynamo":
        from nel_resources.services.dynamo import DynamoServer
        from nel_resources.services.dynamo_remote import rendezvous_here

        where = rendezvous_here(away)
        return DynamoServer(name, svc, log_dir, log_name, prefix=prefix, away=away,
                            rendezvous=where[0] if where else None, infra_host=where[1] if where else None)
    if svc.num_nodes > 1:
        if cluster is None:  # never silently on one node
            raise NelError(f"service {name!r}: num_nodes {svc.num_nodes} runs only in the SLURM "
                           "jobs `nel eval run` submits (cluster.type: slurm)")
        from nel_resources.services.multinode_server import MultiNodeService

        return MultiNodeService(name, svc, log_dir, cluster)
    if container:
        from nel_resources.services.container_server import ContainerService

        return ContainerService(name, svc, log_dir, shm_size=shm_size)
    return LaunchedService(name, svc, log_dir, log_name, prefix=prefix)


@contextmanager
def launched_service(name: str, svc: ServiceConfig, log_dir: Path, *, container: bool = False,
                     shm_size: str | None = None, prefix: Sequence[str] = (),
                     away: Mapping[str, str] | None = None,
                     cluster: Any = None) -> Iterator[str]:
    """Start one service (a container on Docker, behind `prefix` on SLURM, over several
    nodes: see make_server), wait until it answers, yield its base URL, then stop it."""
    server = make_server(name, svc, log_dir, container=container, shm_size=shm_size, prefix=prefix,
                         away=away, cluster=cluster)
    try:
        yield server.start()
    finally:
        server.stop()


class _OnDemandService:
    """What a `LaunchedModelService` resource gives the assets: a ModelService look-alike
    whose server starts on the first `url` access and stops when the run ends.

    Starting lazily matters: a shard step requires every service of its benchmark, but
    only talks to the one serving its model partition.
    """

    def __init__(self, name: str, svc: ServiceConfig, log_dir: Path, log: Any = None, *,
                 container: bool = False, shm_size: str | None = None) -> None:
        self.name = name
        self._svc = svc
        self._log_dir = log_dir
        self._log = log
        self._container = container
        self._shm_size = shm_size
        self._server: Any = None
        self._lock = threading.Lock()

    def service(self) -> ServiceConfig:
        """The service config."""
        return self._svc

    @property
    def url(self) -> str:
        """Base URL of the running server (started now if it is not yet)."""
        with self._lock:
            if self._server is None:
                server = make_server(self.name, self._svc, self._log_dir,
                                     container=self._container, shm_size=self._shm_size)
                if self._log is not None:
                    self._log.info(f"starting {self._svc.type} service {self.name!r}: "
                                   f"{' '.join(server.argv)} (log {server.log_path})")
                self._server = server
                server.start()
                if self._log is not None:
                    self._log.info(f"service {self.name!r} healthy at {server.url} (pid {server.pid})")
            return self._server.url

    @property
    def pid(self) -> int | None:
        """PID of the server, if it was started."""
        return None if self._server is None else self._server.pid

    def client(self) -> Any:
        """A new model client for this service (starts the server if needed)."""
        from nel_resources.proxy.service_client import client_for_service

        return client_for_service(self._svc, self.url)

    def stop(self) -> None:
        """Stop the server if it was started."""
        with self._lock:
            if self._server is not None:
                self._server.stop()


class LaunchedModelService(dg.ConfigurableResource):
    """A model service nel starts itself (llama.cpp, vLLM, SGLang, TRT-LLM), as a resource.

    Its lifetime is the run: the server starts the first time a step asks for its URL and
    its process group is stopped when the run's resources are torn down, whether the run
    succeeded, failed or was interrupted. The log is kept in `log_dir`.
    """

    name: str
    service_json: str
    log_dir: str
    #: run the server as a container (`cluster.type: docker`), with this `--shm-size`
    container: bool = False
    shm_size: str | None = None

    @classmethod
    def from_config(cls, name: str, svc: ServiceConfig, log_dir: str | Path, *,
                    container: bool = False, shm_size: str | None = None) -> LaunchedModelService:
        """Build the resource (API keys never enter Dagster config)."""
        data = svc.model_dump(mode="json")
        data["api_key"] = None
        return cls(name=name, service_json=ServiceConfig.model_validate(data).model_dump_json(),
                   log_dir=str(log_dir), container=container, shm_size=shm_size)

    @contextmanager
    def yield_for_execution(self, context: dg.InitResourceContext) -> Iterator[_OnDemandService]:  # type: ignore[override]
        """Yield an on-demand handle; stop its server when the run ends."""
        handle = _OnDemandService(self.name, ServiceConfig.model_validate_json(self.service_json),
                                  Path(self.log_dir), context.log, container=self.container,
                                  shm_size=self.shm_size)
        try:
            yield handle
        finally:
            handle.stop()


def launched_resources(resolved: ResolvedConfig, resources: dict[str, Any],
                       log_dir: str | Path) -> dict[str, Any]:
    """`resources` with every launched service's ModelService replaced by a
    LaunchedModelService (for Definitions: the UI, the daemon and CI jobs)."""
    out = dict(resources)
    for spec in resolved.services.values():
        if spec.config.type in LAUNCHED_TYPES:
            out[spec.resource_key] = LaunchedModelService.from_config(
                spec.name, spec.config, log_dir,
                container=in_container(spec.config, resolved.cluster.type),
                shm_size=resolved.cluster.shm_size)
    return out


def roles_away(name: str, elsewhere: Mapping[str, str | None]) -> dict[str, str]:
    """Roles of Dynamo service `name` that components of a heterogeneous SLURM job run
    (`elsewhere` lists them as `<name>@<role>` -> their node pool)."""
    from nel_resources.services.dynamo import role_key

    return {r: str(pool) for r in ("prefill", "decode")
            if (pool := elsewhere.get(role_key(name, r))) is not None}


@contextmanager
def launched_services(resolved: ResolvedConfig, resources: dict[str, Any],
                      elsewhere: Mapping[str, str | None] | None = None) -> Iterator[dict[str, str]]:
    """Start every launched service the config's benchmarks use; point their resources at
    the running servers. Yields {service name: base URL}.

    `elsewhere` names services another process runs (a component of a heterogeneous SLURM
    job): their resources point at the given URL, and one given None is not started."""
    from nel_resources.resources import ModelService

    urls: dict[str, str] = {}
    away = dict(elsewhere or {})
    with ExitStack() as stack:
        for name in sorted(resolved.used_services):
            spec = resolved.services[name]
            if spec.config.type not in LAUNCHED_TYPES:
                continue
            if name in away:
                if away[name] is None:
                    continue
                url = str(away[name])
            else:
                url = stack.enter_context(launched_service(
                    name, spec.config, Path(resolved.output_dir) / "logs",
                    container=in_container(spec.config, resolved.cluster.type),
                    shm_size=resolved.cluster.shm_size,
                    prefix=service_prefix(resolved.cluster, spec.config),  # in its image, on SLURM
                    away=roles_away(name, away), cluster=resolved.cluster))
            urls[name] = url
            key = spec.resource_key
            old: ModelService = resources[key]
            resources[key] = ModelService(name=old.name, service_json=old.service_json, url=url)
        yield urls
