"""A stand-in for Apptainer, which Debian bookworm does not package (`apt-cache policy
apptainer singularity-container`: no candidate).

`bin/apptainer` accepts the real command lines nel and NeMo Evaluator 0.3.0 give it:

- `apptainer --version`;
- `apptainer build X.sif docker-daemon://IMAGE` (or `docker://IMAGE`, refused here: nothing
  is pulled): exports the image's root filesystem from the local Docker engine
  (tests/support/rootfs.py) and writes X.sif, a small file naming it (not a real SIF);
- `apptainer exec [--containall] [--cleanenv] [--net --network none] [--writable-tmpfs]
  [--pwd DIR] [--bind SRC:DST[:ro]]... [--memory M] [--cpus N] [--env K=V]... X.sif CMD...`:
  runs CMD in that root filesystem under bubblewrap (own PID/IPC namespaces, no network unless
  `--net` is absent, only the `--env` variables), and appends one JSON line (its options, the
  image, the command, and the SLURM job and step it ran in) to `$NEL_APPTAINER_RECORD`.
  An unknown option is refused as Apptainer refuses it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

BIN = Path(__file__).resolve().parent / "bin"
#: First bytes of the stand-in's SIF files.
SIF_MAGIC = b"NEL-STANDIN-SIF\n"


def apptainer_env(record: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (os.environ by default) with the stand-in first on PATH, recording into `record`."""
    env = dict(os.environ if base is None else base)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["NEL_APPTAINER_RECORD"] = str(record)
    env.setdefault("NEL_STANDIN_PYTHON", sys.executable)
    return env
