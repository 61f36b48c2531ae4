"""Launched model servers on Kubernetes (`cluster.type: k8s`): a Deployment and a Service
per vLLM / SGLang / TRT-LLM service the run uses, which the shard pods call.

The server container runs the server's own command line (nel_resources/services/launch:
`vllm serve ...`) in the service's image (NeMo Evaluator's defaults when unset), listening on
all interfaces, with its GPUs as `nvidia.com/gpu` requests and limits, shared memory as a
memory-backed `/dev/shm` (`cluster.k8s.shm_size`), a startup probe that allows
`startup_timeout` and a readiness probe on the health endpoint. Each shard pod waits in an
init container until the server is ready; the pods' config names it as an `api` service at
the Service's cluster DNS name. Rendering only: no Kubernetes client here.
"""

from __future__ import annotations

import math
from typing import Any

from nel_resources.config import ServiceConfig
from nel_resources.launchers.k8s import K8sSettings, dns_label

#: The in-cluster port every server listens on (the Service forwards it).
SERVER_PORT = 8000
# Keys of a launched service that mean nothing to the pods, which call it as an `api`.
_SERVER_ONLY = frozenset({
    "model_path", "port", "host", "tensor_parallel_size", "extra_args", "startup_timeout",
    "command", "env", "health_path", "served_model_name", "pipeline_parallel_size",
    "data_parallel_size", "num_nodes", "gpus", "image", "setup_commands", "container_mounts",
    "pre_cmd", "ray_binary", "node_pool", "engine", "prefill", "decode", "benchmark",
    "server_cmd", "nat_config_file", "class_path", "config",
})
# Polls the server's health URL until it answers 200 (the init container of a shard pod);
# argv: URL, seconds. Python, as nel's image has it.
WAIT_SCRIPT = (
    "import sys, time, urllib.request\n"
    "url, end, why = sys.argv[1], time.time() + float(sys.argv[2]), 'no answer'\n"
    "while True:\n"
    "    try:\n"
    "        if urllib.request.urlopen(url, timeout=5).status == 200: break\n"
    "    except Exception as exc: why = exc\n"
    "    if time.time() > end: sys.exit(f'{url} not ready: {why}')\n"
    "    time.sleep(5)\n"
)


def server_name(run_id: str, service: str) -> str:
    """The Deployment's and Service's name (DNS-safe, <= 63 characters)."""
    return dns_label(f"nel-{dns_label(run_id, 40)}-{service}", 63)


def server_host(run_id: str, service: str, namespace: str) -> str:
    """`<name>.<namespace>.svc.cluster.local:<port>`: where the pods reach the server."""
    return f"{server_name(run_id, service)}.{namespace}.svc.cluster.local:{SERVER_PORT}"


def api_service(data: dict[str, Any], run_id: str, service: str, namespace: str) -> dict[str, Any]:
    """A launched service's config entry as the pods see it: an `api` service at the
    in-cluster Service (same model name, protocol, generation and client settings)."""
    out = {k: v for k, v in data.items() if k not in _SERVER_ONLY}
    path = {"completions": "/v1/completions", "responses": "/v1/responses"}.get(
        str(data.get("protocol")), "/v1/chat/completions")
    out.update(type="api", url=f"http://{server_host(run_id, service, namespace)}{path}")
    return out


def wait_container(run_id: str, service: str, svc: ServiceConfig, settings: K8sSettings) -> dict[str, Any]:
    """The init container of a shard pod that waits for the server to be ready."""
    from nel_resources.services.launch import health_path

    url = f"http://{server_host(run_id, service, settings.namespace)}{health_path(svc)}"
    return {"name": dns_label(f"wait-{service}", 63), "image": settings.image,
            "command": ["python3", "-c", WAIT_SCRIPT, url, f"{svc.startup_timeout:g}"]}


def server_manifests(run_id: str, service: str, svc: ServiceConfig,
                     settings: K8sSettings) -> list[dict[str, Any]]:
    """The Deployment and the Service of one launched server."""
    from nel_resources.services.container_server import (
        gpu_devices,
        in_container_argv,
        server_image,
    )
    from nel_resources.services.launch import health_path, service_command

    name = server_name(run_id, service)
    # All interfaces: the shard pods connect from their own addresses.
    argv = in_container_argv(service_command(service, svc.model_copy(update={"host": "0.0.0.0"}),
                                             SERVER_PORT))
    labels = {"app.kubernetes.io/name": "nel", "app.kubernetes.io/instance": dns_label(run_id, 40),
              "app.kubernetes.io/component": "model-server", "nel/service": dns_label(service)}
    gpus = len(gpu_devices(svc))
    resources: dict[str, Any] = {}
    if gpus:
        resources = {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}
    def probe() -> dict[str, Any]:  # a fresh dict each: YAML would write a shared one as an alias
        return {"httpGet": {"path": health_path(svc), "port": SERVER_PORT}}

    container: dict[str, Any] = {
        "name": "server", "image": server_image(service, svc), "command": argv[:1], "args": argv[1:],
        "ports": [{"containerPort": SERVER_PORT, "name": "http"}],
        "env": [{"name": k, "value": v} for k, v in sorted(svc.env.items())],
        "resources": resources,
        # Loading weights may take `startup_timeout`; readiness then gates the shards.
        "startupProbe": {**probe(), "periodSeconds": 10,
                         "failureThreshold": max(1, math.ceil(svc.startup_timeout / 10))},
        "readinessProbe": {**probe(), "periodSeconds": 5},
    }
    pod: dict[str, Any] = {"containers": [container]}
    if settings.shm_size:
        container["volumeMounts"] = [{"name": "shm", "mountPath": "/dev/shm"}]
        pod["volumes"] = [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": settings.shm_size}}]
    if settings.node_selector:
        pod["nodeSelector"] = dict(settings.node_selector)
    if settings.service_account:
        pod["serviceAccountName"] = settings.service_account
    meta = {"name": name, "namespace": settings.namespace, "labels": labels}
    return [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
         "spec": {"replicas": 1, "selector": {"matchLabels": dict(labels)},
                  "template": {"metadata": {"labels": dict(labels)}, "spec": pod}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {**meta, "labels": dict(labels)},
         "spec": {"selector": dict(labels),
                  "ports": [{"name": "http", "port": SERVER_PORT, "targetPort": SERVER_PORT}]}},
    ]
