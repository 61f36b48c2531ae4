"""Stand-ins for Pyxis and enroot, which cannot run here (no SPANK plugin, no enroot).

- `bin/srun`: a test-only wrapper first on PATH inside the jobs. It takes Pyxis's options
  (https://github.com/NVIDIA/pyxis/wiki/Usage) as Pyxis does (an unknown `--container-*`
  option is refused, a `.sqsh` image must exist and be a squashfs file, a mount needs an
  absolute destination), records them in `$NEL_PYXIS_RECORD` (one JSON line per step),
  strips them and runs the rest with the real `srun` (the step runs on the real cluster,
  on the host instead of in a container; `--container-workdir` becomes its directory). With
  `NEL_PYXIS_IN_IMAGE=1` (`pyxis_env(..., in_image=True)`) the step runs in the image's root
  filesystem instead, exported from the local Docker engine, under bubblewrap with the
  mounts bound (tests/support/rootfs.py): what a Harbor task's tests need (/tests, /logs).
- `bin/enroot`: `enroot import [-a ARCH] [-o PATH] [--] URI` with the real command line; it
  writes a small file with squashfs's magic and the URI instead of the image's layers.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

BIN = Path(__file__).resolve().parent / "bin"
SQUASHFS_MAGIC = b"hsqs"


def pyxis_env(record: Path, base: dict[str, str] | None = None, *,
              in_image: bool = False) -> dict[str, str]:
    """`base` (os.environ by default) with the stand-ins first on PATH, recording into
    `record`; `in_image`: steps run in the image's root filesystem (module docstring)."""
    env = dict(os.environ if base is None else base)
    if in_image:
        env["NEL_PYXIS_IN_IMAGE"] = "1"
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["NEL_PYXIS_RECORD"] = str(record)
    env.setdefault("NEL_STANDIN_PYTHON", sys.executable)
    return env
