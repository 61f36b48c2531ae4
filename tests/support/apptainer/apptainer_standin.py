"""`apptainer build` / `exec` / `--version` with Apptainer's command line (see __init__)."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.support.apptainer import SIF_MAGIC
from tests.support.rootfs import bwrap_in_rootfs, exported_rootfs

VALUED = {"--pwd", "--bind", "-B", "--memory", "--cpus", "--env", "--network", "--home"}
FLAGS = {"--containall", "-C", "--cleanenv", "-e", "--net", "-n", "--writable-tmpfs",
         "--no-home"}
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def fail(msg: str) -> None:
    print(f"FATAL:   {msg}", file=sys.stderr)
    sys.exit(255)


def slurm_step() -> dict[str, str | None]:
    """The SLURM job and step this exec runs in, read from the `slurmstepd: [JOB.STEP]`
    process it descends from (nel clears the step's environment, SLURM_* included)."""
    pid = os.getppid()
    while pid > 1:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        if m := re.match(r"slurmstepd: \[(\d+)\.(\w+)\]", cmd):
            return {"slurm_job_id": m.group(1), "slurm_step_id": m.group(2)}
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return {"slurm_job_id": None, "slurm_step_id": None}


def build(args: list[str]) -> None:
    if len(args) != 2:
        fail("build takes exactly 2 arguments: SIF_PATH SOURCE")
    sif, source = args
    if not source.startswith("docker-daemon://"):
        fail(f"stand-in: only docker-daemon:// sources build here (nothing is pulled): {source}")
    image = source.removeprefix("docker-daemon://")
    try:
        rootfs = exported_rootfs(image)
    except Exception as exc:
        fail(f"Unable to get image {image} from the Docker daemon: {exc}")
    Path(sif).write_bytes(SIF_MAGIC + json.dumps({"image": image, "rootfs": str(rootfs)}).encode())
    print(f"INFO:    Build complete: {sif}", file=sys.stderr)


def execute(args: list[str]) -> None:
    opts: dict[str, list[str]] = {}
    i = 0
    while i < len(args) and args[i].startswith("-"):
        name, eq, val = args[i].partition("=")
        if name in VALUED:
            if not eq:
                i += 1
                val = args[i]
            opts.setdefault(name, []).append(val)
        elif name in FLAGS:
            opts.setdefault(name, []).append("")
        else:
            fail(f'unknown flag: {name}')
        i += 1
    if i >= len(args) - 1:
        fail("exec needs an image and a command")
    sif, command = args[i], args[i + 1:]
    try:
        head = Path(sif).read_bytes()
    except OSError:
        fail(f"could not open image {sif}: no such file")
    if not head.startswith(SIF_MAGIC):
        fail(f"{sif} is not a SIF image this stand-in built")
    meta = json.loads(head[len(SIF_MAGIC):])
    binds = []
    for b in opts.get("--bind", []) + opts.get("-B", []):
        src, dst, *flags = b.split(":")
        binds.append((src, dst or src, "ro" in flags))
    env = {} if ("--cleanenv" in opts or "-e" in opts) else dict(os.environ)
    env.setdefault("PATH", DEFAULT_PATH)
    for kv in opts.get("--env", []):
        k, _, v = kv.partition("=")
        env[k] = v
    no_net = "--net" in opts and opts.get("--network") == ["none"]
    if record := os.environ.get("NEL_APPTAINER_RECORD"):
        with open(record, "a") as f:
            f.write(json.dumps({"options": opts, "image": sif, "command": command,
                                **slurm_step()}) + "\n")
    argv = bwrap_in_rootfs(Path(meta["rootfs"]), binds=binds, env=env, share_net=not no_net,
                           chdir=(opts.get("--pwd") or ["/"])[-1])
    os.execvp(argv[0], [*argv, *command])


def main(argv: list[str]) -> None:
    if argv == ["--version"] or argv == ["version"]:
        print("apptainer version 1.3.4")
    elif argv[:1] == ["build"]:
        build(argv[1:])
    elif argv[:1] == ["exec"]:
        execute(argv[1:])
    else:
        fail(f"stand-in: only build, exec and --version are stood in: {argv[:1]}")


if __name__ == "__main__":
    main(sys.argv[1:])
