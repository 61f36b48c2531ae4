"""An `apptainer` sandbox placed on a SLURM node pool (`sandboxes.<name>.node_pool`).

Each sandbox is one SLURM allocation on the pool's partition (as a `slurm` sandbox's is:
`salloc --no-shell` with the block's CPUs, memory and lifetime), and each command is one
`srun --overlap` step in it running the same contained `apptainer exec` the `apptainer`
sandbox runs where nel runs (`--containall --cleanenv --net --network none`, the workdir and
the spec's volumes bound). `stop` cancels the allocation and waits until SLURM lets it go.

Images are SIF files built where nel runs (`nel_resources.sandboxes.sif_cache`); with
`sif_cache_dir` set (a directory the nodes share, as 0.3.0 expects) the sandboxes' workdirs
are made there too, so the nodes see them.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path

from nel_resources.config.benchmarks import SandboxConfig
from nel_resources.config.deployment import NodePool
from nel_resources.sandboxes.apptainer import ApptainerSettings, exec_argv
from nel_resources.sandboxes.base import FixedConcurrencyFactory, SandboxError, SandboxSpec
from nel_resources.sandboxes.sif_cache import SifCache, sif_cache_dir
from nel_resources.sandboxes.slurm import BARE_PATH, SlurmSandbox, SlurmSettings
from nel_resources.sandboxes.slurm import unavailable_reason as slurm_unavailable


class PooledApptainerSandbox(SlurmSandbox):
    """One problem's sandbox: an allocation on the pool, one `apptainer exec` step per command."""

    def __init__(self, spec: SandboxSpec, settings: SlurmSettings, app: ApptainerSettings,
                 sifs: SifCache) -> None:
        image = spec.image or app.image
        if not image:
            raise SandboxError("an apptainer sandbox needs an image (`image:` or the spec's)")
        super().__init__(spec, settings)
        self._image = ""  # the steps run apptainer on the node, not a Pyxis container
        self._name = f"nel-apptainer-{uuid.uuid4().hex[:12]}"
        self._app, self._sifs, self._wanted = app, sifs, image
        self.sif: str | None = None

    async def start(self) -> None:
        """Build (or find) the image's SIF, then ask for the allocation."""
        self.sif = await self._sifs.sif_for(self._wanted)
        await super().start()

    def step_argv(self, command: str | list[str], *, timeout_sec: float, step_name: str,
                  cwd: str | None = None, env: Mapping[str, str] | None = None) -> list[str]:
        """`srun` of one step in the allocation running the contained `apptainer exec`."""
        argv = self.srun_prefix(timeout_sec=timeout_sec, step_name=step_name)
        assert self._host_dir is not None and self.sif is not None
        # The step's environment is cleared (--export=NONE): apptainer needs a PATH to be
        # found on the node, and --cleanenv keeps even that out of the container.
        argv += [f"--chdir={self._host_dir}", "/usr/bin/env", "-i",
                 f"PATH={os.environ.get('PATH') or BARE_PATH}", "LANG=C.UTF-8"]
        return argv + exec_argv(self._spec, self._app, self.sif, command, host_dir=self._host_dir,
                                cwd=cwd, env=dict(env or {}))


class PooledApptainerFactory(FixedConcurrencyFactory):
    """A configured `apptainer` block on a node pool: at most `concurrency` sandboxes alive
    at once, and no more than the pool's nodes × `slots_per_node`."""

    def __init__(self, cfg: SandboxConfig, pool: NodePool) -> None:
        why = slurm_unavailable(image="apptainer") or (
            None if shutil.which("apptainer") else "apptainer is not installed on this machine "
            "(no `apptainer` on PATH; nel builds the SIF files here)")
        if why:
            raise SandboxError(f"apptainer sandbox on node pool {cfg.node_pool!r}: {why}")
        cache = sif_cache_dir(cfg.sif_cache_dir)
        slurm = SlurmSettings.from_config(cfg.model_copy(update={"image": None}),
                                          node_pools={str(cfg.node_pool): pool},
                                          shared_dir=cache if cfg.sif_cache_dir else None)
        # apptainer contains the program: no bubblewrap around it, no uid of its own
        self.settings = dataclasses.replace(slurm, isolate=False)
        self.app = ApptainerSettings.from_config(cfg)
        self.sifs = SifCache(cache)
        super().__init__(min(cfg.concurrency, pool.nodes * cfg.slots_per_node))

    @property
    def shared_dir(self) -> Path | None:
        """The directory the nodes share with nel (None: the system temp directory)."""
        return self.settings.shared_dir

    def create(self, spec: SandboxSpec) -> PooledApptainerSandbox:
        """A new sandbox for `spec` (not started)."""
        return PooledApptainerSandbox(spec, self.settings, self.app, self.sifs)
