"""`check_supported`: refuse, before any request, config keys whose feature nel lacks yet,
or that cannot run on this machine.

`load_config` accepts every NeMo Evaluator 0.3.0 key (so `--dry-run` can show the plan);
this check is what stops a run from silently ignoring one or doing something else. Each
refusal is one line: `file:line: key <path>: <feature> is not supported yet in nel; <what
to do instead>`. The "not built" tables live with the schema (nel_resources.config.unbuilt);
each kind's own checks live with its implementation (a launcher's `refusal`, a sandbox
type's `refusal`, the proxy's `UNBUILT` interceptors), asked here through its registry.
"""

from __future__ import annotations

from typing import Any

from nel_resources.checks.benchmarks import check_benchmarks, check_sandbox_runs_here
from nel_resources.checks.refusal import Refusal, as_config_error, at_key, changed
from nel_resources.config import ConfigError, NelConfig, ServiceConfig
from nel_resources.config._base import field_defaults
from nel_resources.config.services import LAUNCHED_TYPES
from nel_resources.config.unbuilt import (
    PYXIS_SERVICE_KEYS,
    SERVICE_UNBUILT,
    UNSTARTED_SERVICE_TYPES,
)
from nel_resources.exporters import check_settings, is_built

_SERVICE_DEFAULTS = field_defaults(ServiceConfig)


def check_supported(cfg: NelConfig) -> None:
    """Refuse the first key whose feature nel does not have yet.

    Raises:
        ConfigError: `file:line: key <path>: <feature> is not supported yet in nel; <fix>`.
    """
    try:
        _check_cluster(cfg)
        _check_services(cfg)
        check_benchmarks(cfg)
        _check_output(cfg)
    except Refusal as r:
        raise as_config_error(cfg, r) from None


def _check_cluster(cfg: NelConfig) -> None:
    """The cluster type's own refusal (its Launcher, nel_resources.launchers.registry)."""
    from nel_resources.launchers.registry import get_launcher

    bad = get_launcher(cfg.cluster.type).refusal(cfg)
    if bad is None:
        return
    line = cfg.line_of(*bad.path)
    where = f"{cfg._where}:{line or '?'}"
    if bad.bare:
        raise ConfigError(f"{where}: {bad.message}")
    raise ConfigError(f"{where}: key {'.'.join(str(p) for p in bad.path)}: {bad.message}")


def _check_interceptors(svc: ServiceConfig, at: tuple[Any, ...]) -> None:
    """NeMo Evaluator interceptors nel does not have load with the config and are refused
    here, on their `name` (the proxy's own table of them)."""
    from nel_resources.proxy.registry import UNBUILT

    chains = [(("interceptors",), svc.interceptors)]
    if svc.proxy is not None:
        chains.append((("proxy", "interceptors"), svc.proxy.interceptors))
    for where, chain in chains:
        for i, ic in enumerate(chain):
            if ic.name in UNBUILT:
                raise Refusal((*at, *where, i, "name"), f"the {ic.name!r} interceptor "
                              f"({UNBUILT[ic.name]})", "remove this interceptor")


#: Service keys of a launched server's container, honoured where nel starts the server as
#: a container or a pod (`cluster.type` docker / k8s: nel_resources/services/container_server,
#: nel_resources/launchers/k8s_servers).
_CONTAINER_SERVICE_KEYS = frozenset({"image", "gpus", "container_mounts"})


def _container_key_honoured(cfg: NelConfig, svc: Any, key: str) -> bool:
    if key not in _CONTAINER_SERVICE_KEYS or svc.type not in LAUNCHED_TYPES:
        return False
    # A mount is a host path: a pod has no host directory to mount (use a volume).
    return cfg.cluster.type == "docker" or (cfg.cluster.type == "k8s" and key != "container_mounts")


def _check_services(cfg: NelConfig) -> None:
    for name, svc in cfg.services.items():
        at = ("services", name)
        if svc.type in UNSTARTED_SERVICE_TYPES:
            raise Refusal((*at, "type"), f"service type {svc.type!r}",
                          "start the server yourself and use `type: api` with its `url`, or "
                          "a type nel starts (llama_cpp, vllm, sglang, trt_llm)")
        if svc.type == "dynamo":
            _check_dynamo(cfg, svc, at)
        if svc.type == "gym" and not svc.url:
            raise Refusal(at, "a gym service nel starts itself (no `url`)",
                          "start the gym server yourself and give its `url`")
        if svc.node_pool is not None and cfg.cluster.type != "slurm":
            raise Refusal((*at, "node_pool"), "node pools (placing services on SLURM nodes)",
                          "remove `node_pool`")
        # a server nel launches in a SLURM job runs in its image through Pyxis
        pyxis = cfg.cluster.type == "slurm" and svc.type in LAUNCHED_TYPES
        if svc.num_nodes > 1:
            _check_num_nodes(cfg, name, svc)
        for key, what in SERVICE_UNBUILT.items():
            if key == "num_nodes" and svc.type in LAUNCHED_TYPES:
                continue  # _check_num_nodes
            if key == "ray_binary" and svc.type == "vllm" and svc.num_nodes > 1:
                continue  # the `ray` a multi-node vLLM server starts (launchers.slurm_multinode)
            if changed(svc, key, _SERVICE_DEFAULTS) and not _container_key_honoured(cfg, svc, key) \
                    and not (pyxis and key in PYXIS_SERVICE_KEYS):
                raise Refusal((*at, key), what, f"remove `{key}`")
        if svc.served_model_name is not None and svc.type not in LAUNCHED_TYPES:
            raise Refusal((*at, "served_model_name"), "naming the model of a server nel does "
                          "not start", "remove `served_model_name` (`model` is the name sent)")
        if svc.health_path is not None and svc.type not in LAUNCHED_TYPES:
            raise Refusal((*at, "health_path"), "health checks of a server nel does not start",
                          "remove `health_path`")
        for key in ("pipeline_parallel_size", "data_parallel_size"):
            if getattr(svc, key) is not None and svc.type not in ("vllm", "sglang", "trt_llm", "dynamo"):
                raise Refusal((*at, key), f"`{key}` for a {svc.type} server", f"remove `{key}`")
        _check_interceptors(svc, at)
        started = [d for d in [name, *svc.depends_on] if cfg.services[d].type in LAUNCHED_TYPES]
        if svc.depends_on and started:
            raise Refusal((*at, "depends_on"), "start order between launched services",
                          "remove `depends_on` (nel starts each launched service on its own)")
    for name, sb in cfg.sandboxes.items():
        if sb.node_pool is not None:
            _check_sandbox_pool(cfg, sb.type, ("sandboxes", name, "node_pool"))
        if any(b.sandbox == sb for b in cfg.benchmarks):  # an unused block runs nothing
            check_sandbox_runs_here(cfg, sb, ("sandboxes", name))


#: Why a cluster type runs no multi-node server (slurm runs them: launchers.slurm_multinode).
_ONE_HOST = {"docker": "a docker cluster is one Docker engine on one host",
             "k8s": "on Kubernetes a server over several pods needs a LeaderWorkerSet, which nel "
                    "does not write yet",
             "local": "a local cluster is this one machine"}


def _check_num_nodes(cfg: NelConfig, name: str, svc: Any) -> None:
    """`num_nodes > 1`: a launched vLLM/SGLang/TRT-LLM server in a SLURM job, on the eval
    client's node pool (its head is the eval client's node)."""
    from nel_resources.launchers import slurm_multinode
    from nel_resources.launchers.slurm_het import het_plan

    at = ("services", name, "num_nodes")
    if svc.type not in LAUNCHED_TYPES:
        return  # SERVICE_UNBUILT refuses it with the rest
    if cfg.cluster.type != "slurm":
        why = _ONE_HOST.get(cfg.cluster.type, f"a {cfg.cluster.type} cluster runs no multi-node server")
        raise Refusal(at, f"a multi-node server here ({why})",
                      "use `num_nodes: 1`, or `cluster: {type: slurm, node_pools: ...}`")
    if (why := slurm_multinode.refusal(svc)) is not None:
        raise Refusal(at, f"num_nodes {svc.num_nodes} ({why})", "use `num_nodes: 1`")
    plan = het_plan(cfg)
    if plan is not None and name in plan.pool_of:
        raise Refusal(at, f"a multi-node server on its own heterogeneous-job component (node "
                      f"pool {plan.pool_of[name]})", f"place services.{name} on the eval client's "
                      f"node pool ({plan.eval_pool}) or use `num_nodes: 1`")


def _check_dynamo(cfg: NelConfig, svc: ServiceConfig, at: tuple[Any, ...]) -> None:
    """A Dynamo deployment (nel_resources.services.dynamo) runs as processes nel starts,
    locally or in SLURM jobs; not as containers on Docker or pods on Kubernetes, and each
    worker on one node (multi-node workers are refused with `num_nodes` like other servers)."""
    if cfg.cluster.type in ("docker", "k8s"):
        raise Refusal((*at, "type"), f"a Dynamo deployment on a `cluster.type: {cfg.cluster.type}` "
                      "cluster (nel starts Dynamo locally or in SLURM jobs)",
                      "use `cluster.type: slurm` or `local`, or start Dynamo yourself and use "
                      "`type: api` with its frontend's `url`")
    for role in ("prefill", "decode"):
        worker = getattr(svc, role)
        if worker is None:
            continue
        if worker.num_nodes > 1:
            raise Refusal((*at, role, "num_nodes"), "multi-node Dynamo workers", "remove `num_nodes`")
        if worker.node_pool is not None and (cfg.cluster.type != "slurm"
                                             or worker.node_pool not in cfg.cluster.node_pools):
            raise Refusal((*at, role, "node_pool"), "a Dynamo role on a node pool this cluster "
                          "does not define", "name one of `cluster.node_pools`, or remove `node_pool`")


def _check_sandbox_pool(cfg: NelConfig, sandbox_type: str, at: tuple[Any, ...]) -> None:
    """A sandbox `node_pool` puts the block's allocations on a SLURM node pool: only with a
    slurm cluster, and only for a type that can be placed there (its `build_on_pool`)."""
    from nel_resources.sandboxes.factory import placeable_on_pool

    if cfg.cluster.type != "slurm":
        raise Refusal(at, "a sandbox node pool without a slurm cluster",
                      "remove `node_pool`, or use `cluster: {type: slurm, node_pools: ...}`")
    if placeable_on_pool(sandbox_type) is None:
        raise Refusal(at, f"placing a `{sandbox_type}` sandbox on a node pool (nel runs it "
                      "where the eval client runs)",
                      "use `type: slurm` or `type: apptainer`, or remove `node_pool`")


def _check_exporter_settings(cfg: NelConfig) -> None:
    """Each exporter's settings (`output.export_config.<name>`, or the keys of a dict item of
    `output.export`), checked by the exporter itself before any request."""
    out = cfg.output
    given: list[tuple[tuple[Any, ...], str, dict[str, Any]]] = [
        (("output", "export_config", name), name, dict(settings or {}))
        for name, settings in out.export_config.items()]
    given += [(("output", "export", i), str(item.get("type")), {k: v for k, v in item.items() if k != "type"})
              for i, item in enumerate(out.export) if isinstance(item, dict)]
    for path, name, settings in given:
        if not is_built(name):
            raise Refusal(path, f"settings of the {name!r} exporter", "remove them")
        problem = check_settings(name, settings)
        if problem is not None:
            raise at_key(cfg, path, problem)


def _check_output(cfg: NelConfig) -> None:
    out = cfg.output
    for i, name in [(i, n) for i, n in enumerate(out.exporter_names()) if not is_built(n)]:
        raise Refusal(("output", "export", i), f"the {name!r} exporter",
                      "remove it from `output.export`; results are in the output directory's "
                      "Parquet files and exports/")
    _check_exporter_settings(cfg)
    if out.timestamped:
        raise Refusal(("output", "timestamped"), "timestamped output directories",
                      "remove `timestamped` (nel keeps one directory so reruns only evaluate "
                      "stale shards) or give `output.dir` a new name per run")
    if out.progress_interval is not None:
        raise Refusal(("output", "progress_interval"), "periodic progress lines",
                      "remove `progress_interval` (nel shows a live progress bar)")
