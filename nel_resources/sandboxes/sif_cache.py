"""SIF files for `apptainer` sandboxes, made as NeMo Evaluator 0.3.0 makes them.

A problem's image (a Harbor task's own, or the block's `image`) that is not a `.sif` or a
URI Apptainer reads itself is converted once per run with `apptainer build
<cache>/<image with / -> _ and : -> __>.sif <source>` where nel runs, the source being
`docker-daemon://<image>` when the local Docker engine has the image and `docker://<image>`
otherwise. The cache is `sif_cache_dir`, else `$APPTAINER_CACHEDIR`, else `/tmp/nel_sif_cache`;
a SIF already there is used as is.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

from nel_resources.sandboxes.base import SandboxError

#: NeMo Evaluator 0.3.0's SIF cache when neither `sif_cache_dir` nor APPTAINER_CACHEDIR is set.
DEFAULT_SIF_CACHE = "/tmp/nel_sif_cache"
_BUILD_TIMEOUT_S = 3600.0


def sif_cache_dir(configured: str | None) -> Path:
    """Where SIF files are kept (module docstring)."""
    return Path(configured or os.environ.get("APPTAINER_CACHEDIR") or DEFAULT_SIF_CACHE)


def sif_name(image: str) -> str:
    """The SIF file name NeMo Evaluator 0.3.0 gives `image` in its cache."""
    return image.replace("/", "_").replace(":", "__") + ".sif"


class SifCache:
    """Builds each image's SIF once (concurrent sandboxes of one image wait for one build)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._locks: dict[str, asyncio.Lock] = {}

    async def sif_for(self, image: str) -> str:
        """The SIF `apptainer exec` is given for `image`, built first when missing.

        Raises:
            SandboxError: `apptainer build` failed (one line with its last words).
        """
        if image.endswith(".sif") or image.startswith(("docker://", "oras://", "library://")):
            return image
        sif = self.directory / sif_name(image)
        async with self._locks.setdefault(image, asyncio.Lock()):
            if sif.is_file():
                return str(sif)
            await asyncio.to_thread(sif.parent.mkdir, parents=True, exist_ok=True)
            source = (f"docker-daemon://{image}" if await _in_docker_engine(image)
                      else f"docker://{image}")
            proc = await asyncio.create_subprocess_exec(
                "apptainer", "build", str(sif), source, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
                start_new_session=True)
            try:
                _, err = await asyncio.wait_for(proc.communicate(), _BUILD_TIMEOUT_S)
            except BaseException:
                proc.kill()
                await proc.wait()
                sif.unlink(missing_ok=True)
                raise
            if proc.returncode != 0:
                sif.unlink(missing_ok=True)
                tail = " | ".join(err.decode(errors="replace").strip().splitlines()[-2:])
                raise SandboxError(f"apptainer build {sif} {source} failed: {tail or proc.returncode}")
            return str(sif)


async def _in_docker_engine(image: str) -> bool:
    """Whether the local Docker engine has `image` (then it is the build's source)."""
    if shutil.which("docker") is None:
        return False
    proc = await asyncio.create_subprocess_exec(
        "docker", "image", "inspect", image, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL)
    return await proc.wait() == 0
