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


def make_factory(cfg: SandboxConfig, *, limits: Limits | None = None) -> SandboxFactory:
    """The factory for `cfg`'s type, configured from the block.

    Args:
        cfg: one sandbox block (its `memory`, `timeout`, `concurrency`, ...).
        limits: the resource limits to start from instead of the defaults (the block's
            own `memory` still applies on top).

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
    return SANDBOX_TYPES.load(cfg.type)(cfg, limits)


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
