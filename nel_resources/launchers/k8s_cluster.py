"""`cluster.type: k8s` (or `kubernetes`) behind the Launcher interface: plan the stale
(model, shard) partitions here (through the runner's hooks), write the Kubernetes manifests
that run them (nel_resources.launchers.k8s) into the output dir, print the kubectl lines,
and submit them when an API server is configured.

Planning reads the result store at `output.dir`, which must be the same store the pods write
(the shared volume, mounted here too), so a rerun submits only what is missing or stale.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import yaml

from benchmarks.errors import NelError
from nel_resources.config import ConfigError, NelConfig
from nel_resources.launchers.base import COMMON_KEYS, Launcher, Refusal, RunHooks, SubmitOptions
from nel_resources.launchers.k8s import (
    K8sSettings,
    StaleShards,
    dns_label,
    render_run,
    settings_from,
)
from nel_resources.launchers.k8s_servers import server_manifests, wait_container
from nel_resources.launchers.partitions import PartitionJob
from nel_resources.launchers.states import StateFile

__all__ = ["K8sCluster", "kube_api_configured", "launch_k8s", "pod_config"]


class K8sCluster(Launcher):
    """Indexed Jobs for the stale partitions and a merge Job (see the module docstring)."""

    kind = "k8s"
    keys: ClassVar[frozenset[str]] = COMMON_KEYS | {"submit"}
    runs = "submits"
    submit_flag = "submit"

    def refusal(self, cfg: NelConfig) -> Refusal | None:
        """Another type's block, or a bad `cluster.k8s` key or value (checked at config
        time, so `--dry-run` refuses what a run would refuse)."""
        if (bad := super().refusal(cfg)) is not None:
            return bad
        try:
            settings_from(cfg.cluster.k8s)
        except NelError as exc:
            key = str(exc).split(":", 1)[0].removeprefix("cluster.k8s.")
            return Refusal(("cluster", "k8s", key), str(exc), bare=True)
        return None

    def submit(self, cfg: NelConfig, hooks: RunHooks, opts: SubmitOptions) -> tuple[int, Any]:
        """Write (and submit, when asked and possible) the manifests; no summary here (the
        merge Job's run reports)."""
        return launch_k8s(cfg, hooks, submit=opts.submit), None


def kube_api_configured(environ: dict[str, str] | None = None) -> str | None:
    """Where the Kubernetes API would come from (a kubeconfig file or the in-cluster
    service account), or None when nothing is configured."""
    env = os.environ if environ is None else environ
    if env.get("KUBERNETES_SERVICE_HOST"):
        return "the in-cluster service account"
    paths = [p for p in (env.get("KUBECONFIG") or "").split(os.pathsep) if p]
    paths = paths or [os.path.join(os.path.expanduser("~"), ".kube", "config")]
    found = [p for p in paths if os.path.isfile(p)]
    return found[0] if found else None


def pod_config(cfg: NelConfig, bench_index: int, results_path: str, run_id: str = "",
               namespace: str = "default") -> dict[str, Any]:
    """The config a pod runs for one benchmark: this run's settings, `cluster.type: local`
    (the pod is one shard), results on the shared volume; secrets only by reference; a
    server nel launches is an `api` service at its in-cluster Service (k8s_servers)."""
    from nel_resources.config.services import LAUNCHED_TYPES
    from nel_resources.launchers.k8s_servers import api_service

    data = cfg.model_dump(mode="json", exclude_defaults=True)
    for name, svc in data.get("services", {}).items():
        if cfg.services[name].type in LAUNCHED_TYPES:
            data["services"][name] = api_service(
                {**svc, "model": cfg.services[name].model or cfg.services[name].model_path},
                run_id, name, namespace)
    data["benchmarks"] = [data["benchmarks"][bench_index]]
    # the seed that picked the items, even when default: every pod must pick the same items
    data["benchmarks"][0]["shuffle_seed"] = cfg.benchmarks[bench_index].shuffle_seed
    data["cluster"] = {"type": "local"}
    data.setdefault("output", {})["dir"] = results_path
    data["output"].pop("dagster_home", None)
    for svc in data.get("services", {}).values():
        if svc.pop("api_key", None):
            raise NelError("a service's api_key is written literally: pods get keys from a Secret, "
                           "write `api_key_env: VAR` (and put VAR in the cluster.k8s.secret Secret)")
    return data


def _want_submit(cfg: NelConfig, flag: bool | None) -> bool:
    if flag is not None:
        return flag
    return cfg.cluster.submit if cfg.cluster.submit is not None else True


def launch_k8s(cfg: NelConfig, hooks: RunHooks, *, submit: bool | None = None) -> int:
    """Write (and submit, when asked and possible) the manifests of the stale partitions.

    Returns the exit status. Raises ConfigError (exit 2) for a submission with no API server
    configured or bad `cluster.k8s` settings, before anything is written.
    """
    try:
        settings = settings_from(cfg.cluster.k8s)
    except NelError as exc:
        raise ConfigError(str(exc)) from None
    want_submit = _want_submit(cfg, submit)
    if want_submit and kube_api_configured() is None:
        raise ConfigError("cluster.type k8s: no Kubernetes API server is configured (no $KUBECONFIG, "
                          "~/.kube/config or in-cluster service account); set `cluster.submit: false` "
                          "(or pass --no-submit) to write the manifests and apply them with kubectl")
    resolved = hooks.validate(cfg)
    out = Path(cfg.output.dir).expanduser().resolve()
    run_id = time.strftime("%Y%m%d-%H%M%S")
    benches: list[StaleShards] = []
    configs: dict[str, str] = {}
    jobs: list[PartitionJob] = []
    servers: dict[str, list[dict[str, Any]]] = {}
    for i, bench in enumerate(resolved.benchmarks):
        tasks = hooks.plan(out, bench)
        jobs += [PartitionJob(bench.name, t.model, t.shard, t.total, "") for t in tasks if t.stale]
        stale = tuple(sorted({t.shard for t in tasks if t.stale}))
        keys = tuple(sorted({s.config.api_key_env for r in bench.runs for s in [r.service]
                             if getattr(s.config, "api_key_env", None)}))
        data = pod_config(cfg, i, settings.results_path, run_id, settings.namespace)
        configs[f"{bench.name}.yaml"] = yaml.safe_dump(data, sort_keys=False)
        launched = _launched_services(cfg, i)
        if stale:
            servers.update({n: server_manifests(run_id, n, cfg.services[n], settings)
                            for n in launched})
        waits = tuple(wait_container(run_id, n, cfg.services[n], settings) for n in launched)
        benches.append(StaleShards(bench.name, bench.shards, stale, data, keys, waits))
    docs = render_run(run_id, benches, settings, configs)
    server_docs = [d for n in sorted(servers) for d in servers[n]]
    where = out / "k8s" / run_id
    where.mkdir(parents=True, exist_ok=True)
    shards_file, merge_file = where / "shards.yaml", where / "merge.yaml"
    servers_file = where / "servers.yaml"
    shards_file.write_text(yaml.safe_dump_all(docs[:-1], sort_keys=False))
    merge_file.write_text(yaml.safe_dump_all(docs[-1:], sort_keys=False))
    if server_docs:
        servers_file.write_text(yaml.safe_dump_all(server_docs, sort_keys=False))
    n_stale = sum(len(b.shards) for b in benches)
    rid = dns_label(run_id, 40)
    print(f"{n_stale} stale shard(s) in {sum(1 for b in benches if b.shards)} Indexed Job(s); "
          f"manifests in {where}")
    if server_docs:
        print(f"kubectl apply -f {servers_file}")
    print(f"kubectl apply -f {shards_file}")
    print(f"kubectl wait -n {settings.namespace} --for=condition=complete --timeout=24h job "
          f"-l app.kubernetes.io/instance={rid},app.kubernetes.io/component=eval")
    if server_docs:  # the GPUs go back once the shards are done; the merge sends nothing
        print(f"kubectl delete -f {servers_file}")
    print(f"kubectl apply -f {merge_file}")
    states = StateFile(out, "k8s")
    for job in jobs:
        states.report(job, "WRITTEN", str(shards_file))
    if not want_submit:
        return 0
    status = _submit(docs, settings, server_docs)
    for job in jobs:  # _submit waited for the shard Jobs; on a failure it does not say which
        states.report(job, *(("COMPLETED", f"namespace {settings.namespace}") if status == 0 else
                             ("UNKNOWN", f"a shard Job failed: `kubectl get jobs -n {settings.namespace}`")))
    return status


def _launched_services(cfg: NelConfig, bench_index: int) -> list[str]:
    """The services of benchmark `bench_index` that nel launches (a server per service)."""
    from nel_resources.config.services import LAUNCHED_TYPES

    names = cfg.benchmarks[bench_index].service_names(cfg.services)
    return sorted(n for n in names if n in cfg.services and cfg.services[n].type in LAUNCHED_TYPES)


def _submit(docs: list[dict[str, Any]], settings: K8sSettings,
            server_docs: list[dict[str, Any]] | None = None) -> int:
    """Create the model servers and the shard objects, wait for the shard Jobs, remove the
    servers (also when a shard Job failed), then create the merge Job."""
    try:
        from kubernetes import client, config, utils
    except ImportError:
        raise NelError("submitting to Kubernetes needs the `kubernetes` package: "
                       "pip install 'nel[k8s]'") from None
    try:
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config()
        else:
            config.load_kube_config()
        api = client.ApiClient()
        for doc in [*(server_docs or []), *docs[:-1]]:
            utils.create_from_dict(api, doc, namespace=settings.namespace)
        try:
            if _wait_jobs(client.BatchV1Api(api), [d["metadata"]["name"] for d in docs[1:-1]],
                          settings) != 0:
                return 1
        finally:
            _delete_servers(client, api, server_docs or [], settings.namespace)
        utils.create_from_dict(api, docs[-1], namespace=settings.namespace)
    except NelError:
        raise
    except Exception as exc:  # the API server refused or is unreachable: one line
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise NelError(f"submitting to Kubernetes failed: {type(exc).__name__}: {reason[:300]}") from None
    print(f"submitted; the merge Job {docs[-1]['metadata']['name']} is created")
    return 0


def _wait_jobs(batch: Any, names: list[str], settings: K8sSettings) -> int:
    """Wait until every named Job succeeded (0) or one failed past its backoff (1)."""
    while names:
        for name in list(names):
            st = batch.read_namespaced_job_status(name, settings.namespace).status
            if st.failed and st.failed > settings.backoff_limit:
                print(f"error: job {name} failed; the other shards' results are kept",
                      file=sys.stderr)
                return 1
            if st.succeeded is not None and st.succeeded >= 1 and not st.active:
                names.remove(name)
        if names:
            time.sleep(5)  # polling a remote API server's job status
    return 0


def _delete_servers(client: Any, api: Any, server_docs: list[dict[str, Any]], namespace: str) -> None:
    """Remove the model servers' Deployments and Services (their GPUs go back)."""
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    for doc in server_docs:
        name = doc["metadata"]["name"]
        if doc["kind"] == "Deployment":
            apps.delete_namespaced_deployment(name, namespace)
        elif doc["kind"] == "Service":
            core.delete_namespaced_service(name, namespace)
