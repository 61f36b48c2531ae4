"""`make_factory`: a `sandboxes:` / `sandbox:` config block -> the factory of its type.

Each type's module is imported only when a config uses it (Docker's client, boto3 and
friends cost nothing to a run that needs no sandbox). A new type is one line in
`SANDBOX_TYPES`: the dotted path of a `build(cfg, limits) -> SandboxFactory` function. A
type's module may also define `preflight(cfg)`, the checks a run makes before its first
model request (an image that is not in the engine, say): `preflight` below calls it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from benchmarks.registries import Registry
from nel_resources.sandboxes.base import SandboxError, SandboxFactory
from nel_resources.sandboxes.limits import Limits

if TYPE_CHECKING:
    from nel_resources.config import SandboxConfig
    from nel_resources.config.deployment import NodePool

Builder = Callable[["SandboxConfig", "Limits | None"], SandboxFactory]

#: sandbox type -> "module:function" building its factory from the config block.
SANDBOX_TYPES: Registry[Builder] = Registry("sandbox type", {
    "local": "nel_resources.sandboxes.local:build",
    "docker": "nel_resources.sandboxes.docker:build",
    "slurm": "nel_resources.sandboxes.slurm:build",
    "apptainer": "nel_resources.sandboxes.apptainer:build",
    "ecs_fargate": "nel_resources.sandboxes.ecs_fargate:build",
    "custom": "nel_resources.sandboxes.custom:build",
})


def make_factory(cfg: SandboxConfig, *, limits: Limits | None = None,
                 pool: NodePool | None = None) -> SandboxFactory:
    """The factory for `cfg`'s type, configured from the block.

    Args:
        cfg: one sandbox block (its `memory`, `timeout`, `concurrency`, ...).
        limits: the resource limits to start from instead of the defaults (the block's
            own `memory` still applies on top).
        pool: the node pool the block's `node_pool` names (`cluster.node_pools`); a type
            placed on a pool builds through its module's `build_on_pool(cfg, limits, pool)`.

    Raises:
        SandboxError: the type is `none`, or has no implementation on this version of nel,
            or cannot run on this machine (the message says what to change).
    """
    if cfg.type == "none":
        raise SandboxError("this benchmark runs code and needs a sandbox, but its sandbox type "
                           "is `none`: configure one (e.g. `sandbox: {type: local}` or "
                           "`{type: docker, image: ...}`)")
    if cfg.type not in SANDBOX_TYPES:
        raise SandboxError(f"the `{cfg.type}` sandbox type is not available in this version of "
                           f"nel (available: {', '.join(SANDBOX_TYPES.names())})")
    if cfg.node_pool is not None:
        on_pool = placeable_on_pool(cfg.type)
        if on_pool is None:
            raise SandboxError(f"a `{cfg.type}` sandbox cannot be placed on a node pool "
                               f"(node_pool {cfg.node_pool!r}): use `type: slurm` or "
                               "`type: apptainer`, or remove `node_pool`")
        if pool is None:
            raise SandboxError(f"sandbox node_pool {cfg.node_pool!r} needs the config's "
                               "cluster.node_pools (run it from `nel eval run` with a slurm cluster)")
        return on_pool(cfg, limits, pool)
    return SANDBOX_TYPES.load(cfg.type)(cfg, limits)


def placeable_on_pool(sandbox_type: str) -> Callable[..., SandboxFactory] | None:
    """The type's `build_on_pool` (its allocations go to a SLURM node pool), or None when
    the type cannot be placed on one."""
    if sandbox_type not in SANDBOX_TYPES:
        return None
    return SANDBOX_TYPES.module_attr(sandbox_type, "build_on_pool")


def preflight(cfg: SandboxConfig) -> None:
    """Check, before any model request, that a sandbox of `cfg` can start here.

    Calls the type module's own `preflight(cfg)` when it has one (a type without one is
    checked when its first sandbox starts). Not for dry runs: it may need the real engine.

    Raises:
        SandboxError: one line saying what to fix.
    """
    if cfg.type not in SANDBOX_TYPES or cfg.type == "none":
        return  # make_factory says why, with the benchmark's own context
    check = SANDBOX_TYPES.module_attr(cfg.type, "preflight")
    if check is not None:
        check(cfg)
