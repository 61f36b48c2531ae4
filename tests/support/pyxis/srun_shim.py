"""`srun` with Pyxis's options, on a cluster without Pyxis (see tests/support/pyxis)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

# Pyxis's srun options: those taking a value, and the flags.
VALUED = {"--container-image", "--container-mounts", "--container-workdir", "--container-name",
          "--container-save", "--container-env", "--container-entrypoint-log"}
FLAGS = {"--container-mount-home", "--no-container-mount-home", "--container-remap-root",
         "--no-container-remap-root", "--container-entrypoint", "--no-container-entrypoint",
         "--container-writable", "--container-readonly"}
HERE = Path(__file__).resolve().parent / "bin"


def fail(msg: str) -> None:
    print(f"srun: error: pyxis: {msg}", file=sys.stderr)
    sys.exit(1)


def real_srun() -> str:
    for d in os.environ.get("PATH", "").split(os.pathsep):
        cand = Path(d) / "srun"
        if d and Path(d).resolve() != HERE and cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    fail("no real srun on PATH")
    raise AssertionError


def main(argv: list[str]) -> None:
    opts: dict[str, str | bool] = {}
    rest: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if not rest or rest[-1] != "--":
            name, eq, val = a.partition("=")
            if name in VALUED:
                if not eq:
                    i += 1
                    val = argv[i]
                opts[name] = val
                i += 1
                continue
            if a in FLAGS:
                opts[a] = True
                i += 1
                continue
            if a.startswith("--container") or a.startswith("--no-container"):
                fail(f"unrecognized option '{name}'")
        rest.append(a)
        i += 1
    if opts and "--container-image" not in opts and "--container-name" not in opts:
        fail("--container-image is required")
    image = str(opts.get("--container-image", ""))
    if image.endswith(".sqsh") or image.startswith("/"):
        try:
            head = Path(image).read_bytes()[:4]
        except OSError:
            fail(f"couldn't stat squashfs image {image}")
        if head != b"hsqs":
            fail(f"{image} is not a squashfs file")
    for m in str(opts.get("--container-mounts", "")).split(",") if "--container-mounts" in opts else []:
        parts = m.split(":")
        if len(parts) < 2 or not parts[1].startswith(("/", ".")):
            fail(f"invalid mount entry: {m}")
    if opts:
        with open(os.environ["NEL_PYXIS_RECORD"], "a") as f:
            f.write(json.dumps({"options": opts, "command": rest,
                                "slurm_job_id": os.environ.get("SLURM_JOB_ID")}) + "\n")
    if "--container-workdir" in opts:
        os.chdir(str(opts["--container-workdir"]))
    os.execv(real_srun(), [real_srun(), *rest])


if __name__ == "__main__":
    main(sys.argv[1:])
