"""An image's root filesystem, exported from the local Docker engine, and the bubblewrap command
line that runs a program in it: what the test-only Pyxis and Apptainer stand-ins use to run a
step "in the image" on this machine (tests/support/pyxis, tests/support/apptainer).

The image's top-level directories are bound read-only over bubblewrap's own tmpfs root (so a
bind's mount point, /tests or /app, can be made), with fresh /proc, /dev and /tmp, its own PID
and IPC namespaces (the program's leftovers die with it), and only the given environment.
Exports are cached by image id, so a rebuilt image is exported afresh.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

#: Where exported root filesystems are kept between runs (one directory per image id).
DEFAULT_CACHE = Path(tempfile.gettempdir()) / "nel-test-rootfs"
_SKIP = {"proc", "dev", "tmp", "sys", ".dockerenv"}


def _docker(*argv: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *argv], capture_output=True, text=True, check=True,
                          timeout=600, **kw)  # type: ignore[call-overload]


def image_env(image: str) -> dict[str, str]:
    """The image's own environment (its Config.Env: PATH and friends)."""
    out = _docker("image", "inspect", "-f", "{{json .Config.Env}}", image).stdout
    return dict(e.split("=", 1) for e in json.loads(out) or [] if "=" in e)


def exported_rootfs(image: str, cache: Path | None = None) -> Path:
    """The directory holding `image`'s root filesystem (exported once per image id).

    Raises:
        subprocess.CalledProcessError: the engine has no such image.
    """
    cache = cache or Path(os.environ.get("NEL_TEST_ROOTFS_CACHE") or DEFAULT_CACHE)
    image_id = _docker("image", "inspect", "-f", "{{.Id}}", image).stdout.strip()
    key = image_id.removeprefix("sha256:")[:24]
    dest = cache / key
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f".{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent steps of one image export it once
        if (dest / ".nel-exported").is_file():
            return dest
        work = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=cache))
        cid = _docker("create", image_id, "/bin/true").stdout.strip()
        try:
            with subprocess.Popen(["docker", "export", cid], stdout=subprocess.PIPE) as exp:
                subprocess.run(["tar", "-x", "-C", str(work)], stdin=exp.stdout, check=True,
                               timeout=600)
            if exp.returncode:
                raise subprocess.CalledProcessError(exp.returncode, ["docker", "export", cid])
        finally:
            _docker("rm", "-f", cid)
        (work / ".nel-exported").write_text(image + "\n")
        shutil.rmtree(dest, ignore_errors=True)
        work.rename(dest)
    return dest


def bwrap_in_rootfs(rootfs: Path, *, binds: Sequence[tuple[str, str, bool]], chdir: str,
                    env: Mapping[str, str], share_net: bool) -> list[str]:
    """bubblewrap running a program in `rootfs` (module docstring); `binds` are
    (host path, path inside, read-only)."""
    # absolute: a step started with `--export=NONE` has no PATH
    argv = [shutil.which("bwrap") or "/usr/bin/bwrap", "--unshare-all", "--die-with-parent", "--proc", "/proc", "--dev", "/dev",
            "--tmpfs", "/tmp"]
    if share_net:
        argv.append("--share-net")
    for entry in sorted(rootfs.iterdir()):
        if entry.name in _SKIP or entry.name.startswith(".nel"):
            continue
        if entry.is_symlink():
            argv += ["--symlink", os.readlink(entry), f"/{entry.name}"]
        else:
            argv += ["--ro-bind", str(entry), f"/{entry.name}"]
    for host, inside, readonly in binds:
        argv += ["--ro-bind" if readonly else "--bind", host, inside]
    argv += ["--clearenv"]
    for k, v in env.items():
        argv += ["--setenv", k, v]
    return [*argv, "--chdir", chdir, "--"]
