"""`LAUNCHERS`: `cluster.type` -> the `Launcher` behind it, imported on first use.

A new cluster type is a module with a `Launcher` subclass (its keys, refusal, preflight and
`run` or `submit`) and one line here; the config schema, the config checks, the runner and
the CLI ask this table and nothing else (nel_resources.launchers.base says how).
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from benchmarks.errors import NelError
from benchmarks.registries import Registry

if TYPE_CHECKING:
    from nel_resources.launchers.base import Launcher

#: other spellings NeMo Evaluator configs use.
ALIASES: dict[str, str] = {"kubernetes": "k8s"}
#: cluster type -> "module:class" of its Launcher.
LAUNCHERS: Registry[Any] = Registry("cluster type", {
    "local": "nel_resources.launchers.local:LocalCluster",
    "docker": "nel_resources.launchers.docker:DockerCluster",
    "ray": "nel_resources.launchers.ray_tasks:RayCluster",
    "slurm": "nel_resources.launchers.slurm_cluster:SlurmCluster",
    "k8s": "nel_resources.launchers.k8s_cluster:K8sCluster",
    "subprocess": "nel_resources.launchers.subprocess_workers:SubprocessCluster",
}, aliases=ALIASES)


def cluster_types() -> list[str]:
    """Every name `cluster.type` accepts (aliases included)."""
    return LAUNCHERS.names(aliases=True)


def unknown_type_message(name: str) -> str:
    """`unknown cluster type 'dokcer'; did you mean 'docker'? (known: ...)`."""
    import difflib

    near = difflib.get_close_matches(name.lower(), cluster_types(), n=1, cutoff=0.6)
    hint = f"did you mean {near[0]!r}? " if near else ""
    return f"unknown cluster type {name!r}; {hint}(known: {', '.join(cluster_types())})"


@cache
def get_launcher(name: str) -> Launcher:
    """The launcher of cluster type `name` (its module imported now).

    Raises:
        NelError: an unknown name, with the nearest known one.
    """
    if name not in LAUNCHERS:
        raise NelError(unknown_type_message(name))
    launcher: Launcher = LAUNCHERS.load(name)()
    return launcher
