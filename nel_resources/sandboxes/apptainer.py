"""The `apptainer` sandbox: each command is one `apptainer exec` of the sandbox's image.

The sandbox's workdir is a host directory bound at `spec.workdir`; it is the only state kept
between commands (stateful solve and verify see the same files). Every exec is contained the
same way: `--containall` (own PID and IPC namespaces, a minimal /dev, an empty /tmp and home),
`--cleanenv` (none of nel's variables, API keys included), `--net --network none` (no
network), the spec's volumes bound as asked, and `--memory` / `--cpus` when configured (which
Apptainer enforces through cgroups). Killing the `apptainer` process ends the container's
PID namespace, so a timeout or the output cap leaves nothing running. A problem's image that
is not a SIF becomes one first (`nel_resources.sandboxes.sif_cache`, NeMo Evaluator 0.3.0's
rules); with a `node_pool` the commands run as srun steps of an allocation on the pool
(`nel_resources.sandboxes.apptainer_pool`).

Apptainer (>= 1.1) must be installed where nel runs; Debian bookworm does not package it, so
on such a machine the config check refuses the sandbox in one line before any request.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from nel_resources.config.benchmarks import SandboxConfig
from nel_resources.sandboxes._capped import run_capped
from nel_resources.sandboxes.base import (
    ExecResult,
    FixedConcurrencyFactory,
    SandboxError,
    SandboxFactory,
    SandboxSpec,
)
from nel_resources.sandboxes.hostfiles import HostFiles
from nel_resources.sandboxes.limits import Limits
from nel_resources.sandboxes.refusal import Refusal, image_template_refusal
from nel_resources.sandboxes.sif_cache import SifCache, sif_cache_dir
from nel_resources.sandboxes.slurm import parse_memory_mb

if TYPE_CHECKING:
    from nel_resources.config.deployment import NodePool

_CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def unavailable_reason() -> str | None:
    """Why `apptainer` sandboxes cannot run on this machine, or None when they can."""
    if shutil.which("apptainer") is None:
        return "apptainer is not installed on this machine (no `apptainer` on PATH)"
    return None


@dataclass(frozen=True)
class ApptainerSettings:
    """What every sandbox of one `apptainer` block runs with."""

    image: str | None = None
    sif_cache_dir: str | None = None
    cpus: float | None = None
    memory_mb: int | None = None
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_config(cls, cfg: SandboxConfig) -> ApptainerSettings:
        return cls(image=cfg.image, sif_cache_dir=cfg.sif_cache_dir, cpus=cfg.cpus,
                   memory_mb=parse_memory_mb(cfg.memory), env=dict(cfg.container_env))


def image_ref(image: str, sif_cache_dir: str | None) -> str:
    """What `apptainer exec` is given: a SIF file as is, else the image's SIF in the cache
    (named as NeMo Evaluator names it) when built, else the registry image."""
    if image.endswith(".sif") or image.startswith(("docker://", "oras://", "library://")):
        return image
    cache = sif_cache_dir or os.environ.get("APPTAINER_CACHEDIR")
    if cache:
        sif = Path(cache) / (image.replace("/", "_").replace(":", "__") + ".sif")
        if sif.is_file():
            return str(sif)
    return f"docker://{image}"


def exec_argv(spec: SandboxSpec, settings: ApptainerSettings, image: str,
              command: str | list[str], *, host_dir: Path, cwd: str | None = None,
              env: Mapping[str, str] | None = None) -> list[str]:
    """The contained `apptainer exec` of `command` in `image`, the workdir `host_dir` bound at
    `spec.workdir` and the spec's volumes bound as asked (module docstring)."""
    workdir = spec.workdir
    pwd = workdir if cwd is None else str(Path(workdir) / cwd)
    argv = ["apptainer", "exec", "--containall", "--cleanenv", "--net", "--network", "none",
            "--writable-tmpfs", "--pwd", pwd, "--bind", f"{host_dir}:{workdir}"]
    for v in spec.volumes:
        argv += ["--bind", f"{v.host_path}:{v.container_path}" + (":ro" if v.readonly else "")]
    if settings.memory_mb is not None:
        argv += ["--memory", f"{settings.memory_mb}M"]
    if settings.cpus is not None:
        argv += ["--cpus", f"{settings.cpus:g}"]
    variables = {"HOME": workdir, **settings.env, **spec.env, **(env or {})}
    for k, v in variables.items():
        argv += ["--env", f"{k}={v}"]
    argv.append(image)
    argv += ["/bin/bash", "-c", command] if isinstance(command, str) else list(command)
    return argv


class ApptainerSandbox:
    """One problem's sandbox: a host workdir, and one contained `apptainer exec` per command."""

    def __init__(self, spec: SandboxSpec, settings: ApptainerSettings,
                 sifs: SifCache | None = None) -> None:
        image = spec.image or settings.image
        if not image:
            raise SandboxError("an apptainer sandbox needs an image (`image:` or the spec's)")
        self._spec, self._s, self._sifs, self._wanted = spec, settings, sifs, image
        self._image = image_ref(image, settings.sif_cache_dir)
        self._host_dir: Path | None = None
        self._name = f"nel-apptainer-{uuid.uuid4().hex[:12]}"

    @property
    def spec(self) -> SandboxSpec:
        return self._spec

    def exec_argv(self, command: str | list[str], *, host_dir: Path, cwd: str | None = None,
                  env: dict[str, str] | None = None) -> list[str]:
        """The `apptainer exec` command line for one command."""
        return exec_argv(self._spec, self._s, self._image, command, host_dir=host_dir, cwd=cwd,
                         env=env)

    async def start(self) -> None:
        """Build (or find) the image's SIF, make the workdir and write `spec.files` into it."""
        if self._sifs is not None:
            self._image = await self._sifs.sif_for(self._wanted)
        self._host_dir = Path(tempfile.mkdtemp(prefix=f"{self._name}-"))
        for rel, content in self._spec.files.items():
            self._files().write(rel, content.encode())

    async def exec(self, command: str | list[str], timeout_sec: float = 180, *,
                   cwd: str | None = None, env: dict[str, str] | None = None,
                   stdin: bytes | None = None, output_limit: int = 1 << 20) -> ExecResult:
        """Run `command` in a fresh contained container over the sandbox's workdir."""
        if self._host_dir is None:
            raise SandboxError("the apptainer sandbox is not started")
        argv = self.exec_argv(command, host_dir=self._host_dir, cwd=cwd, env=env)
        # apptainer itself needs a PATH; --cleanenv keeps the rest of ours out of the container
        return await run_capped(argv, timeout_sec=timeout_sec, output_limit=output_limit,
                                stdin=stdin, env={"PATH": os.environ.get("PATH", _CONTAINER_PATH)})

    async def upload(self, local_path: Path, remote_path: str) -> None:
        """Copy into the bound workdir or a bound volume (no shell, no command line)."""
        data = await asyncio.to_thread(Path(local_path).read_bytes)
        await asyncio.to_thread(self._files().write, remote_path, data)

    async def download(self, remote_path: str, local_path: Path) -> None:
        """Copy out of the bound workdir or a bound volume."""
        await asyncio.to_thread(self._files().read_to, remote_path, local_path)

    async def stop(self) -> None:
        """Remove the workdir (no container outlives its exec)."""
        if self._host_dir is not None:
            await asyncio.to_thread(shutil.rmtree, self._host_dir, True)
            self._host_dir = None

    def _files(self) -> HostFiles:
        """The host directories behind the sandbox's paths: the workdir and the spec's volumes
        (a Harbor task's /tests and /logs); planted symlinks that lead out are refused."""
        if self._host_dir is None:
            raise SandboxError("the apptainer sandbox is not started")
        roots = [(self._spec.workdir, self._host_dir)]
        roots += [(v.container_path, Path(v.host_path)) for v in self._spec.volumes]
        return HostFiles(tuple(roots), self._spec.workdir)


class ApptainerSandboxFactory(FixedConcurrencyFactory):
    """A configured `apptainer` block."""

    def __init__(self, cfg: SandboxConfig) -> None:
        reason = unavailable_reason()
        if reason:
            raise SandboxError(f"apptainer sandbox: {reason}")
        self.settings = ApptainerSettings.from_config(cfg)
        self.sifs = SifCache(sif_cache_dir(cfg.sif_cache_dir))
        super().__init__(cfg.concurrency)

    def create(self, spec: SandboxSpec) -> ApptainerSandbox:
        """A new sandbox for `spec` (not started)."""
        return ApptainerSandbox(spec, self.settings, self.sifs)


def refusal(cfg: SandboxConfig) -> Refusal | None:
    """Why this block cannot run from here (checked before any request), or None."""
    if (r := image_template_refusal(cfg)) is not None:
        return r
    why = unavailable_reason()
    # the run needs the program; a dry run lists the check (nel_resources.checks.deferred)
    return Refusal("type", why, needs="program") if why else None


def build(cfg: SandboxConfig, limits: Limits | None = None) -> ApptainerSandboxFactory:
    """An `apptainer` factory from its config block (the `make_factory` entry point);
    `limits` supplies `--memory` when the block sets no `memory`."""
    if cfg.image_template:
        raise SandboxError("`image_template` (an image per problem) is not supported by nel's "
                           "apptainer sandbox yet: give one `image`")
    if cfg.memory is None and limits is not None:
        cfg = cfg.model_copy(update={"memory": max(1, limits.memory_bytes >> 20)})
    return ApptainerSandboxFactory(cfg)


def build_on_pool(cfg: SandboxConfig, limits: Limits | None, pool: NodePool) -> SandboxFactory:
    """An `apptainer` factory whose sandboxes are allocations on node pool `pool` (the
    block's `node_pool`): each `apptainer exec` is an srun step there
    (`nel_resources.sandboxes.apptainer_pool`)."""
    from nel_resources.sandboxes.apptainer_pool import PooledApptainerFactory

    if cfg.image_template:
        raise SandboxError("`image_template` (an image per problem) is not supported by nel's "
                           "apptainer sandbox yet: give one `image`")
    if cfg.memory is None and limits is not None:
        cfg = cfg.model_copy(update={"memory": max(1, limits.memory_bytes >> 20)})
    return PooledApptainerFactory(cfg, pool)
