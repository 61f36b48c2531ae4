"""`srun` with Pyxis's options, on a cluster without Pyxis (see tests/support/pyxis)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# Pyxis's srun options: those taking a value, and the flags.
VALUED = {"--container-image", "--container-mounts", "--container-workdir", "--container-name",
          "--container-save", "--container-env", "--container-entrypoint-log"}
FLAGS = {"--container-mount-home", "--no-container-mount-home", "--container-remap-root",
         "--no-container-remap-root", "--container-entrypoint", "--no-container-entrypoint",
         "--container-writable", "--container-readonly"}
HERE = Path(__file__).resolve().parent / "bin"
#: When set, a step with an image runs in the image's root filesystem (docker export) under
#: bubblewrap instead of on the host (`in_image`).
IN_IMAGE = "NEL_PYXIS_IN_IMAGE"


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


# What the Pyxis plugin adds to `srun --help` (how nel tells a Pyxis cluster).
PLUGIN_HELP = """
Options provided by plugins:
      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH
                              [pyxis] the image to use for the container
                              filesystem. Can be either a docker image given as
                              an enroot URI, or a path to a squashfs file on the
                              remote host filesystem.
"""


def main(argv: list[str]) -> None:
    if argv == ["--help"]:
        out = subprocess.run([real_srun(), "--help"], capture_output=True, text=True)
        sys.stdout.write(out.stdout + PLUGIN_HELP)
        sys.exit(out.returncode)
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
    if opts and os.environ.get(IN_IMAGE):
        rest = in_image(opts, rest)
    elif "--container-workdir" in opts:
        os.chdir(str(opts["--container-workdir"]))
    os.execv(real_srun(), [real_srun(), *rest])


def in_image(opts: dict[str, str | bool], rest: list[str]) -> list[str]:
    """`rest` (srun's own options, then the program) with the program run in the image's
    root filesystem, exported from the local Docker engine, under bubblewrap: the mounts
    bound, the workdir its directory, the image's environment; the host's network, as an
    enroot container has (tests/support/rootfs.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from tests.support.rootfs import bwrap_in_rootfs, exported_rootfs, image_env

    image = str(opts.get("--container-image", ""))
    if not image:
        fail("the in-image stand-in needs --container-image on every step")
    binds = []
    for m in str(opts.get("--container-mounts", "")).split(","):
        if m:
            src, dst, *flags = m.split(":")
            binds.append((src, dst, "ro" in flags))
    at = next(i for i, a in enumerate(rest) if not a.startswith("-"))
    wrap = bwrap_in_rootfs(exported_rootfs(image), binds=binds, share_net=True,
                           chdir=str(opts.get("--container-workdir") or "/"), env=image_env(image))
    return [*rest[:at], *wrap, *rest[at:]]


if __name__ == "__main__":
    main(sys.argv[1:])
