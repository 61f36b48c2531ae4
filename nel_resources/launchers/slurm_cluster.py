"""`cluster.type: slurm` behind the Launcher interface: its keys and refusals, the client
commands checked before anything is written, and the submission (array jobs, or one
heterogeneous job per partition when services sit on several node pools) driven by
nel_resources.launchers.slurm_submit with the runner's hooks.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from nel_resources.launchers.base import (
    COMMON_KEYS,
    CONTAINER_KEYS,
    Launcher,
    Refusal,
    RunHooks,
    SubmitOptions,
)

if TYPE_CHECKING:
    from nel_resources.config import NelConfig
    from nel_resources.config.services import ServiceConfig
    from nel_resources.launchers.states import PartitionState

# `cluster:` keys of a slurm cluster nel does not honour yet (they run nel on another host).
# The container keys (`eval_image`, `container_mounts`, `mount_home`, `container_env`, a
# service's `image`) run through Pyxis (nel_resources.launchers.pyxis).
_UNBUILT = {
    "hostname": ("submitting over SSH to a login node", "run nel on the submit host itself"),
    "username": ("submitting over SSH to a login node", "run nel on the submit host itself"),
    "conda_env": ("activating a conda environment in the job",
                  "activate it before `nel eval run` (the job inherits the environment)"),
    "slurm": ("the `cluster.slurm` block", "write the keys at the top of `cluster:`"),
}


class SlurmCluster(Launcher):
    """SLURM array / heterogeneous jobs from this host (the submit host)."""

    kind = "slurm"
    keys: ClassVar[frozenset[str]] = COMMON_KEYS | CONTAINER_KEYS | {
        "account", "walltime", "node_pools", "conda_env", "eval_image", "auto_resume",
        "max_retries", "max_walltime", "sbatch_comment", "sbatch_extra_flags", "hostname",
        "username", "submit"}
    runs = "submits"
    submit_flag = ("--submit: submitting over SSH (cluster.hostname) is not supported yet "
                   "in nel; run `nel eval run` on the SLURM submit host without --submit")

    def refusal(self, cfg: NelConfig) -> Refusal | None:
        """Every key is honoured except `_UNBUILT`; services on node pools are checked
        against the pool (the pool exists, a heterogeneous layout runs something, the GPUs
        asked are there)."""
        from nel_resources.config._base import field_defaults
        from nel_resources.config.deployment import ClusterConfig

        if (bad := super().refusal(cfg)) is not None:
            return bad
        c = cfg.cluster
        defaults = field_defaults(ClusterConfig)
        for name, (what, instead) in _UNBUILT.items():
            value = getattr(c, name)
            if value != defaults[name] and value not in (None, [], {}):
                return Refusal.unbuilt(("cluster", name), f"cluster.{name} ({what})", instead)
        if (bad := _container_refusal(cfg)) is not None:
            return bad
        for name, svc in cfg.services.items():
            at = ("services", name)
            pool = c.node_pools.get(svc.node_pool or "")
            if svc.node_pool is not None and pool is None:
                return Refusal((*at, "node_pool"), f"{svc.node_pool!r} is not one of cluster.node_pools "
                               f"({', '.join(c.node_pools)})")
            if (bad := _het_placement(cfg, name, svc)) is not None:
                return bad
            if svc.type in ("vllm", "sglang", "trt_llm"):
                gpus = _pool_gpus(pool) if pool is not None else None
                tp = svc.tensor_parallel_size or 1
                # The GPUs are on the nodes the job asks for, never on this submit host:
                # only a pool that says how many it has per node is checked against the
                # server's tensor-parallel size; the cluster decides the rest.
                # A multi-node server's tensor parallelism may span its nodes (SGLang's
                # --nnodes, vLLM over Ray): the GPUs of all of them count.
                if gpus is not None and gpus * svc.num_nodes < tp:
                    over = f" x {svc.num_nodes} nodes" if svc.num_nodes > 1 else ""
                    return Refusal((*at, "tensor_parallel_size"), f"{tp} GPUs asked but node pool "
                                   f"{svc.node_pool!r} has {gpus} per node{over} ({pool and pool.gres})")
        return None

    def preflight(self, resolved: Any) -> None:
        """A run that submits needs the SLURM client commands and a reachable controller."""
        from nel_resources.config import ConfigError
        from nel_resources.launchers.slurm import SlurmLauncher

        if resolved.cluster.submit is not False and (why := SlurmLauncher.unavailable_reason()):
            raise ConfigError(f"cluster.type slurm cannot submit from here: {why}")

    def resources(self) -> dict[str, Any]:
        """The SLURM launcher as a Dagster resource (its settings shown in the UI)."""
        from nel_resources.launchers.resource import SlurmLauncherResource

        return {"slurm_launcher": SlurmLauncherResource()}

    def states(self, out: Path) -> list[PartitionState]:
        """The partitions of the last submission from `out`, in SLURM's words (sacct/squeue)."""
        from nel_resources.launchers.slurm_jobs import partition_states

        return partition_states(out)

    def submit(self, cfg: NelConfig, hooks: RunHooks, opts: SubmitOptions) -> tuple[int, Any]:
        """Submit the stale partitions and (unless `opts.wait` is off) wait for them."""
        from nel_resources.launchers.slurm_submit import run_on_slurm

        return run_on_slurm(cfg, hooks, list(opts.argv), resume=opts.resume, wait=opts.wait)


def _container_refusal(cfg: NelConfig) -> Refusal | None:
    """What Pyxis cannot do: size a container's /dev/shm, or start a service's image from
    inside the eval client's container (`srun` is on the host, not in `eval_image`)."""
    from nel_resources.config.services import LAUNCHED_TYPES
    from nel_resources.launchers.slurm_het import het_plan

    if cfg.cluster.shm_size is not None:
        return Refusal(("cluster", "shm_size"), "Pyxis and enroot take no shared-memory size (a "
                       "container on SLURM sees the node's /dev/shm); remove `shm_size`")
    if not cfg.cluster.eval_image:
        return None
    plan = het_plan(cfg)
    for name, svc in cfg.services.items():
        if svc.image and svc.type in LAUNCHED_TYPES and (plan is None or name not in plan.pool_of):
            return Refusal(("services", name, "image"), f"services.{name} would start from inside "
                           "the eval_image container, which has no `srun` to run its own image: "
                           "remove `image` (the server then runs inside eval_image) or `eval_image`")
    return None


def _het_placement(cfg: NelConfig, name: str, svc: ServiceConfig) -> Refusal | None:
    """Services on several node pools make heterogeneous jobs (slurm_het): the eval client
    runs on the first pool and every other pool is a component that runs the launched
    services placed on it. A service nel does not start (`type: api`, ...) placed on another
    pool would get nodes that run nothing: refused."""
    from nel_resources.config.services import LAUNCHED_TYPES

    named = {s.node_pool for s in cfg.services.values() if s.node_pool}
    first = next(iter(cfg.cluster.node_pools), None)
    if (len(named) < 2 or svc.node_pool is None or svc.node_pool == first
            or svc.node_pool not in cfg.cluster.node_pools or svc.type in LAUNCHED_TYPES):
        return None
    return Refusal(("services", name, "node_pool"), f"nel starts no server for a `type: {svc.type}` "
                   f"service, so node pool {svc.node_pool!r} would run nothing for it; remove "
                   f"`node_pool` (its requests come from the eval client on the first pool, {first!r})")


def _pool_gpus(pool: Any) -> int | None:
    """GPUs per node of a pool: `gpus_per_node`, else the count in `gres` (`gpu:8`,
    `gpu:a100:8`); None when neither says."""
    if pool.gpus_per_node:
        return int(pool.gpus_per_node)
    m = re.search(r"gpu(?::[^:,]+)?:(\d+)", pool.gres or "")
    return int(m.group(1)) if m else None
