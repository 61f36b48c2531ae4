"""Kubernetes manifests for a run's stale (model, shard) partitions: one Indexed Job per
benchmark (a pod per stale shard), a merge Job, and the ConfigMap holding the configs the
pods run. Rendering only: no Kubernetes client, no Dagster.

Each pod runs `nel eval run` for one shard (the shard comes from the Indexed Job's
`JOB_COMPLETION_INDEX`, mapped onto the stale shard numbers, into `NEL_SHARD_IDX` and
`NEL_TOTAL_SHARDS`, which `nel_assets.engine.evaluation.sharding.shard_from_env` reads) and writes into
the shared results volume; the merge Job then runs `nel eval run` once more without a shard,
which finds every shard fresh and materializes the bundles, reports and comparisons. With
`NEL_DAGSTER_POSTGRES_URL` in the `nel-dagster` Secret every pod records into one shared
Dagster instance.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.errors import NelError

__all__ = ["K8sSettings", "StaleShards", "render_run", "settings_from"]

_DNS_RE = re.compile(r"[^a-z0-9-]+")
_QUANTITY_RE = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")


def dns_label(text: str, limit: int = 63) -> str:
    """`text` as a Kubernetes name (lower-case alphanumerics and '-', at most `limit`)."""
    s = _DNS_RE.sub("-", text.lower()).strip("-")
    return (s[:limit].rstrip("-")) or "nel"


@dataclass(frozen=True, slots=True)
class K8sSettings:
    """`cluster.k8s:` keys (all optional)."""

    image: str = "nel:latest"
    namespace: str = "default"
    results_claim: str = "nel-results"  # a ReadWriteMany PersistentVolumeClaim
    results_path: str = "/results"
    parallelism: int | None = None  # pods at once per benchmark (default: all shards)
    service_account: str | None = None
    secret: str = "nel-secrets"  # holds the API keys named by services' api_key_env
    dagster_secret: str = "nel-dagster"  # key postgres_url: the shared Dagster instance
    cpu: str = "1"
    memory: str = "2Gi"
    gpus: int = 0
    backoff_limit: int = 3
    node_selector: dict[str, str] = field(default_factory=dict)
    shm_size: str | None = None  # a memory-backed /dev/shm for launched model servers


_INT_KEYS = {"parallelism", "gpus", "backoff_limit"}


def settings_from(block: Mapping[str, Any]) -> K8sSettings:
    """`cluster.k8s` as settings; NelError (one line naming the key) on a bad key or value."""
    known = set(K8sSettings.__dataclass_fields__)
    kw: dict[str, Any] = {}
    for key, value in block.items():
        if key not in known:
            raise NelError(f"cluster.k8s.{key}: unknown key; known keys: {', '.join(sorted(known))}")
        if key in _INT_KEYS:
            if not isinstance(value, int) or isinstance(value, bool) or value < 0 \
                    or (key == "parallelism" and value < 1):
                raise NelError(f"cluster.k8s.{key}: must be a whole number (got {value!r})")
        elif key == "node_selector":
            if not isinstance(value, dict):
                raise NelError(f"cluster.k8s.{key}: must be a mapping of label: value")
            value = {str(k): str(v) for k, v in value.items()}
        else:
            if not isinstance(value, str) or not value:
                raise NelError(f"cluster.k8s.{key}: must be a non-empty string (got {value!r})")
            if key in ("cpu", "memory", "shm_size") and not _QUANTITY_RE.match(value):
                raise NelError(f"cluster.k8s.{key}: {value!r} is not a Kubernetes quantity (e.g. 500m, 2Gi)")
        kw[key] = value
    return K8sSettings(**kw)


@dataclass(frozen=True, slots=True)
class StaleShards:
    """A benchmark's shards that must run, and its config for the pods (a plain dict)."""

    benchmark: str
    total: int
    shards: tuple[int, ...]
    config: dict[str, Any]
    api_key_envs: tuple[str, ...] = ()
    #: init containers of each shard pod (waiting for the model servers nel launched)
    init_containers: tuple[dict[str, Any], ...] = ()


# The pod maps its completion index onto the stale shard numbers (`set -- $NEL_SHARDS; shift`
# picks the index-th word): an Indexed Job's indexes are always 0..n-1, the stale shards
# need not be. POSIX sh, so any image with /bin/sh runs it.
SHARD_SCRIPT = ('set -eu; set -- $NEL_SHARDS; shift "$JOB_COMPLETION_INDEX"; '
                'export NEL_SHARD_IDX="$1"; '
                'exec nel eval run "$NEL_CONFIG_DIR/$NEL_CONFIG_FILE" -o "$NEL_RESULTS_DIR" --no-progress')
MERGE_SCRIPT = ('set -eu; for f in "$NEL_CONFIG_DIR"/*.yaml; do '
                'nel eval run "$f" -o "$NEL_RESULTS_DIR" --no-progress; done')


def _env(s: K8sSettings, extra: Sequence[tuple[str, str]], api_key_envs: Sequence[str]) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in extra]
    env += [{"name": "NEL_CONFIG_DIR", "value": "/etc/nel"},
            {"name": "NEL_RESULTS_DIR", "value": s.results_path},
            {"name": "NEL_DAGSTER_POSTGRES_URL", "valueFrom": {"secretKeyRef": {
                "name": s.dagster_secret, "key": "postgres_url", "optional": True}}}]
    for var in api_key_envs:  # secrets by reference only: the manifest never holds a key
        env.append({"name": var, "valueFrom": {"secretKeyRef": {"name": s.secret, "key": var}}})
    return env


def _pod(s: K8sSettings, name: str, script: str, env: list[dict[str, Any]],
         labels: dict[str, str], config_map: str,
         init: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": s.cpu, "memory": s.memory},
                                 "limits": {"memory": s.memory}}
    if s.gpus:
        resources["requests"]["nvidia.com/gpu"] = str(s.gpus)
        resources["limits"]["nvidia.com/gpu"] = str(s.gpus)
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{
            "name": name, "image": s.image, "command": ["/bin/sh", "-c", script], "env": env,
            "resources": resources,
            "volumeMounts": [{"name": "results", "mountPath": s.results_path},
                             {"name": "config", "mountPath": "/etc/nel", "readOnly": True}],
        }],
        "volumes": [{"name": "results", "persistentVolumeClaim": {"claimName": s.results_claim}},
                    {"name": "config", "configMap": {"name": config_map}}],
    }
    if init:
        spec["initContainers"] = [dict(c) for c in init]
    if s.service_account:
        spec["serviceAccountName"] = s.service_account
    if s.node_selector:
        spec["nodeSelector"] = dict(s.node_selector)
    return {"metadata": {"labels": dict(labels)}, "spec": spec}


def render_run(run_id: str, benches: Sequence[StaleShards], settings: K8sSettings,
               config_yaml: Mapping[str, str]) -> list[dict[str, Any]]:
    """The manifests of one submission: the ConfigMap, an Indexed Job per benchmark with
    stale shards, and the merge Job (apply them in this order; the merge Job is applied
    after the Indexed Jobs complete, e.g. `kubectl wait --for=condition=complete`).

    Args:
        run_id: names the objects (made DNS-safe).
        benches: each benchmark's stale shards; one with none gets no Job.
        settings: `cluster.k8s`.
        config_yaml: file name -> YAML text of the configs the pods run (`<bench>.yaml`).
    """
    rid = dns_label(run_id, 40)
    cm_name = f"nel-{rid}-config"
    base = {"app.kubernetes.io/name": "nel", "app.kubernetes.io/instance": rid}
    docs: list[dict[str, Any]] = [{
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": cm_name, "namespace": settings.namespace, "labels": dict(base)},
        "data": dict(config_yaml),
    }]
    for b in benches:
        if not b.shards:
            continue
        n = len(b.shards)
        labels = {**base, "app.kubernetes.io/component": "eval", "nel/benchmark": dns_label(b.benchmark)}
        env = _env(settings, [("NEL_SHARDS", " ".join(str(x) for x in b.shards)),
                              ("NEL_TOTAL_SHARDS", str(b.total)),
                              ("NEL_CONFIG_FILE", f"{b.benchmark}.yaml")], b.api_key_envs)
        docs.append({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"nel-{rid}-{dns_label(b.benchmark, 12)}", "namespace": settings.namespace,
                         "labels": dict(labels)},
            "spec": {"completionMode": "Indexed", "completions": n,
                     "parallelism": min(n, settings.parallelism or n),
                     "backoffLimit": settings.backoff_limit,
                     "template": _pod(settings, "eval", SHARD_SCRIPT, env, labels, cm_name,
                                      b.init_containers)},
        })
    keys = tuple(sorted({k for b in benches for k in b.api_key_envs}))
    labels = {**base, "app.kubernetes.io/component": "merge"}
    docs.append({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": f"nel-{rid}-merge", "namespace": settings.namespace, "labels": dict(labels)},
        "spec": {"backoffLimit": settings.backoff_limit,
                 "template": _pod(settings, "merge", MERGE_SCRIPT, _env(settings, [], keys), labels, cm_name)},
    })
    return docs
