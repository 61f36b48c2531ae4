"""Containers on SLURM through Pyxis: the `srun` flags for `cluster.eval_image`,
`services.<n>.image`, `container_mounts` (cluster and service), `mount_home` and
`container_env`, as NeMo Evaluator 0.3.0 writes them.

Pyxis is a SPANK plugin: its options are `srun` options (https://github.com/NVIDIA/pyxis/wiki/Usage):
`--container-image=IMAGE` (an enroot URI or a `.sqsh` path, see `nel cache-sqsh`),
`--container-mounts=SRC:DST[:FLAGS],...`, `--container-workdir=PATH`,
`--[no-]container-mount-home`, `--container-env=NAME,...` (variables taken from the host
environment, over the image's own). Pyxis and enroot take no shared-memory size: a
container sees the node's `/dev/shm`, so `shm_size` is refused on SLURM (launchers.slurm_cluster).

No Dagster here.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nel_resources.config.deployment import ClusterConfig
    from nel_resources.config.services import ServiceConfig

# A step beside the job's own (the batch step keeps running: `--overlap` shares its CPUs
# and GPUs with it), one task on one node.
STEP = ("srun", "--overlap", "--nodes=1", "--ntasks=1")
#: The index of the heterogeneous-job component a service process runs on (set by slurm_het).
HET_GROUP_ENV = "NEL_SLURM_HET_GROUP"


def container_flags(image: str, *, mounts: Iterable[str], env_keys: Iterable[str],
                    mount_home: bool, home: str, workdir: str | None = None) -> list[str]:
    """The Pyxis options of one container step. `mount_home` mounts `home` at itself (as
    NeMo Evaluator does, `$HOME:$HOME`); off, `--no-container-mount-home` keeps enroot's
    own home mount out too."""
    wanted = [*mounts, *([f"{home}:{home}"] if mount_home else [])]
    uniq = list(dict.fromkeys(m for m in wanted if m))
    flags = [f"--container-image={image}"]
    if uniq:
        flags.append(f"--container-mounts={','.join(uniq)}")
    if not mount_home:
        flags.append("--no-container-mount-home")
    if workdir:
        flags.append(f"--container-workdir={workdir}")
    keys = sorted(set(env_keys))
    if keys:
        flags.append(f"--container-env={','.join(keys)}")
    return flags


def _model_mount(svc: ServiceConfig) -> list[str]:
    """A local model path the server reads, mounted read-only at the same path (so the
    server's command line is the same in and out of the container)."""
    path = svc.model_path
    if not path or "://" in path or not os.path.isabs(path):
        return []
    where = Path(path)
    src = str(where.parent if where.suffix else where)  # a GGUF file: its directory
    return [f"{src}:{src}:ro"]


def service_prefix(cluster: ClusterConfig, svc: ServiceConfig,
                   environ: Mapping[str, str] | None = None) -> list[str]:
    """What goes before a launched server's command: `srun ... --container-image=IMG ...`
    when the service has an `image` and nel starts it inside a SLURM job; [] otherwise (the
    server runs as a child of nel, as without containers)."""
    env = os.environ if environ is None else environ
    if not svc.image or cluster.type != "slurm" or not env.get("SLURM_JOB_ID"):
        return []
    mounts = [*cluster.container_mounts, *svc.container_mounts, *_model_mount(svc)]
    keys = [*cluster.container_env, *svc.env]
    if svc.type == "dynamo":  # NATS's and etcd's addresses, and each worker's own GPUs
        from nel_resources.services.dynamo_commands import INFRA_ENV_KEYS

        keys += [*INFRA_ENV_KEYS, "CUDA_VISIBLE_DEVICES",
                 *(k for role in (svc.prefill, svc.decode) if role for k in role.extra_env)]
    # A step started from a component of a heterogeneous job lands on component 0 unless it
    # names its own (slurm_het exports the component's index to its process).
    het = env.get(HET_GROUP_ENV, "")
    step = [STEP[0], f"--het-group={het}", *STEP[1:]] if het.isdigit() else list(STEP)
    return [*step, *container_flags(svc.image, mounts=mounts, env_keys=keys,
                                    mount_home=cluster.mount_home,
                                    home=env.get("HOME") or str(Path.home()), workdir=os.getcwd())]


def eval_prefix(cluster: ClusterConfig, output_dir: str, cwd: str | None = None) -> list[str]:
    """The `srun` options that run the eval client (`nel eval run --slurm-task/--slurm-merge`)
    in `cluster.eval_image`, for every benchmark (0.3.0 uses `eval_image` whatever the
    benchmark's URI scheme); [] without one. The working directory and the output directory
    are mounted at themselves, so the job's paths hold inside."""
    if not cluster.eval_image:
        return []
    here = cwd or os.getcwd()
    out = os.path.abspath(os.path.join(here, output_dir))
    mounts = [*cluster.container_mounts, f"{here}:{here}",
              *([] if out == here or out.startswith(here + os.sep) else [f"{out}:{out}"])]
    return [*STEP, *container_flags(cluster.eval_image, mounts=mounts, env_keys=cluster.container_env,
                                    mount_home=cluster.mount_home, home=str(Path.home()), workdir=here)]


def uses_containers(cluster: ClusterConfig, services: Sequence[ServiceConfig]) -> bool:
    """Whether a slurm run starts any Pyxis container."""
    return bool(cluster.eval_image or any(s.image for s in services))
