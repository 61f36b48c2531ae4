"""The command lines of an NVIDIA Dynamo deployment (`services.<n>.type: dynamo`), as NeMo
Evaluator 0.3.0 writes them (orchestration/slurm_gen.py, `_dynamo_*`):

1. `nats-server -js` (the request plane) and `etcd --listen-client-urls ...
   --advertise-client-urls ...` (discovery);
2. `python3 -m dynamo.frontend --http-port PORT`: the OpenAI-compatible endpoint;
3. the workers, `python3 -m dynamo.sglang --model-path M --served-model-name S --host 0.0.0.0
   --port PORT+1 [--tp-size N] [--pp-size N] [--dp-size N] [extra_args]`: one aggregated worker
   (Dynamo's `backend` component), or, disaggregated, `prefill.num_workers` workers with
   `--disaggregation-mode prefill --disaggregation-bootstrap-port PORT+2` and
   `decode.num_workers` with `--disaggregation-mode decode`, each role with its own sizes,
   `extra_args` and `extra_env`.

Every process gets `DYN_REQUEST_PLANE=nats`, `NATS_SERVER`, `ETCD_ENDPOINTS` and
`DYN_SKIP_SGLANG_LOG_FORMATTING=1` (0.3.0's exports), plus the service's `extra_env`.

Where nel differs, and why: 0.3.0 takes NATS's and etcd's default ports (4222, 2379) and
etcd's default data and peer settings; nel gives each deployment free ports, its own
JetStream store and etcd data directory (`-p`, `-sd`, `--listen-peer-urls`, `--data-dir`,
all documented flags), so two runs on one node cannot collide. The frontend binds the
service's `host` (`--http-host`, Dynamo's documented flag; nel binds 127.0.0.1 unless told).
A second worker started on the same node takes the next two ports, as two sglang servers
on one node must.

No Dagster here.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from nel_resources.config.services import DynamoWorkerConfig, ServiceConfig

#: Variables every Dynamo process reads (passed into Pyxis containers by name too).
INFRA_ENV_KEYS = ("DYN_REQUEST_PLANE", "NATS_SERVER", "ETCD_ENDPOINTS", "DYN_SKIP_SGLANG_LOG_FORMATTING")
# 0.3.0's offsets from the frontend port: the worker's own port and the prefill worker's
# KV bootstrap port.
WORKER_PORT_OFFSET, BOOTSTRAP_PORT_OFFSET = 1, 2


@dataclass(frozen=True)
class Worker:
    """One worker process to start: its role (`backend` when aggregated, else `prefill` or
    `decode`), its index within the role, and the role's settings."""

    role: str
    index: int
    sizes: DynamoWorkerConfig
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """`decode-0`: names its log file and its messages."""
        return f"{self.role}-{self.index}"

    def gpus(self) -> int:
        """GPUs this worker needs: tensor x pipeline x data parallel sizes."""
        s = self.sizes
        return (s.tensor_parallel_size or 1) * (s.pipeline_parallel_size or 1) * (s.data_parallel_size or 1)


def workers(svc: ServiceConfig, roles: tuple[str, ...] | None = None) -> list[Worker]:
    """The workers of `svc` (only those of `roles` when given), in start order: prefill before
    decode, as 0.3.0 fans them out."""
    if svc.prefill is None or svc.decode is None:
        # nel's `tensor_parallel_size` defaults to 1 where 0.3.0's is unset (no `--tp-size`)
        tp = svc.tensor_parallel_size
        given = "tensor_parallel_size" in svc.model_fields_set or tp > 1
        sizes = DynamoWorkerConfig(tensor_parallel_size=tp if given else None,
                                   pipeline_parallel_size=svc.pipeline_parallel_size,
                                   data_parallel_size=svc.data_parallel_size, num_nodes=svc.num_nodes,
                                   extra_args=list(svc.extra_args))
        found = [Worker("backend", 0, sizes)]
    else:
        found = [Worker(role, i, cfg, dict(cfg.extra_env))
                 for role, cfg in (("prefill", svc.prefill), ("decode", svc.decode))
                 for i in range(cfg.num_workers)]
    return [w for w in found if roles is None or w.role in roles]


def expected_counts(svc: ServiceConfig) -> tuple[int, int]:
    """(prefill, decode-or-backend) workers the frontend must count before it is ready:
    0.3.0's health rule (one `backend` when aggregated; every configured worker of each role
    when disaggregated)."""
    if svc.prefill is None or svc.decode is None:
        return 0, 1
    return svc.prefill.num_workers, svc.decode.num_workers


def python(in_image: bool) -> str:
    """`python3` inside a Dynamo image (as 0.3.0 runs it); nel's own interpreter otherwise,
    so a `dynamo` package installed beside nel is the one that runs."""
    return "python3" if in_image else sys.executable


def infra_env(host: str, nats_port: int, etcd_port: int) -> dict[str, str]:
    """The variables 0.3.0 exports for every Dynamo process."""
    return {"DYN_REQUEST_PLANE": "nats", "NATS_SERVER": f"nats://{host}:{nats_port}",
            "ETCD_ENDPOINTS": f"http://{host}:{etcd_port}", "DYN_SKIP_SGLANG_LOG_FORMATTING": "1"}


def nats_command(host: str, port: int | str, store_dir: str) -> list[str]:
    """`nats-server -js` with JetStream (Dynamo needs it), on `host:port`, storing in `store_dir`."""
    return ["nats-server", "-js", "-a", host, "-p", str(port), "-sd", store_dir]


def etcd_command(host: str, port: int | str, peer_port: int | str, data_dir: str) -> list[str]:
    """`etcd` serving clients on `host:port` (0.3.0's two URL flags), its peer port and data
    directory its own."""
    return ["etcd", "--listen-client-urls", f"http://{host}:{port}",
            "--advertise-client-urls", f"http://{host}:{port}",
            "--listen-peer-urls", f"http://{host}:{peer_port}", "--data-dir", data_dir]


def frontend_command(py: str, host: str, port: int) -> list[str]:
    """`python3 -m dynamo.frontend --http-port PORT` (and the address it binds)."""
    return [py, "-m", "dynamo.frontend", "--http-host", host, "--http-port", str(port)]


def worker_command(py: str, svc: ServiceConfig, worker: Worker, port: int, slot: int = 0) -> list[str]:
    """`python3 -m dynamo.sglang ...` for `worker`, the `slot`-th worker on its node (ports
    PORT+1+2*slot and, for prefill, PORT+2+2*slot: 0.3.0's for the first)."""
    s = worker.sizes
    model = svc.model_path or svc.model or ""
    cmd = [py, "-m", f"dynamo.{svc.engine}", "--model-path", model,
           *(["--served-model-name", svc.model] if svc.model else []),
           "--host", "0.0.0.0", "--port", str(port + WORKER_PORT_OFFSET + 2 * slot)]
    for flag, value in (("--tp-size", s.tensor_parallel_size), ("--pp-size", s.pipeline_parallel_size),
                        ("--dp-size", s.data_parallel_size)):
        if value:
            cmd += [flag, str(value)]
    if worker.role in ("prefill", "decode"):
        cmd += ["--disaggregation-mode", worker.role]
    if worker.role == "prefill":
        cmd += ["--disaggregation-bootstrap-port", str(port + BOOTSTRAP_PORT_OFFSET + 2 * slot)]
    return cmd + list(s.extra_args)


def describe(name: str, svc: ServiceConfig, port: int, *, in_image: bool = False,
             step: list[str] | None = None, where: Mapping[str, str] | None = None) -> str:
    """The whole deployment on one line, for the dry-run plan and the job script: each
    process's command (behind `step`, the Pyxis `srun` when the service has an image), `;`
    between them; `where` names the node pool of a role that runs on a component of its own."""
    py = python(in_image)
    pre = " ".join(shlex.quote(a) for a in step or [])
    head = f"{pre} " if pre else ""

    def line(argv: list[str]) -> str:
        return head + " ".join(shlex.quote(a) for a in argv)

    # NATS's and etcd's ports are picked free when the deployment starts
    parts = [line(nats_command(svc.host, "<free port>", "<logs>/<name>.nats")),
             line(etcd_command(svc.host, "<free port>", "<free port>", "<logs>/<name>.etcd")),
             line(frontend_command(py, svc.host, port))]
    slots: dict[str, int] = {}
    for w in workers(svc):
        pool = (where or {}).get(w.role)
        slot = slots.get(pool or "", 0)
        slots[pool or ""] = slot + 1
        parts.append(line(worker_command(py, svc, w, port, slot)) + (f"  (on node pool {pool})" if pool else ""))
    return " ; ".join(parts)
