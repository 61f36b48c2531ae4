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
import shlex
import sys
from pathlib import Path

BIN = Path(__file__).resolve().parent / "bin"
#: First bytes of the stand-in's SIF files.
SIF_MAGIC = b"NEL-STANDIN-SIF\n"


def apptainer_env(record: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (os.environ by default) with the stand-in first on PATH, recording into `record`.

    nel runs `apptainer exec` in an environment it clears (`env -i PATH=...`, then
    `--cleanenv`), so the record's path and the Python are written into a wrapper of this
    test's own (next to `record`) rather than passed as variables."""
    env = dict(os.environ if base is None else base)
    bin_dir = record.parent / "apptainer-bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    wrapper = bin_dir / "apptainer"
    wrapper.write_text(f"#!/bin/sh\nNEL_APPTAINER_RECORD={shlex.quote(str(record))} "
                       f"NEL_STANDIN_PYTHON={shlex.quote(sys.executable)} "
                       f"exec {shlex.quote(str(BIN / 'apptainer'))} \"$@\"\n")
    wrapper.chmod(0o755)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["NEL_APPTAINER_RECORD"] = str(record)
    return env
