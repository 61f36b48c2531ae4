"""A size-limited tmpfs mounted on a host directory (a `local` sandbox's workdir).

The workdir must outlive one command (files written by the solve step are read by the
verify step, and nel reads and writes it from the host), so bubblewrap's per-command
`--tmpfs` cannot hold it. Run as root, nel mounts a tmpfs of the sandbox's disk size on the
host directory instead: a program that fills it gets ENOSPC, nothing reaches the host's disk,
and unmounting it at `stop` frees every byte. Without CAP_SYS_ADMIN `can_mount()` is False.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import tempfile
from functools import cache
from pathlib import Path

_MS_NOSUID, _MS_NODEV = 2, 4
_MNT_DETACH = 2


@cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def mount_tmpfs(path: Path, size_bytes: int, uid: int | None = None) -> None:
    """Mount a tmpfs of `size_bytes` on `path`, mode 0700, owned by `uid` (default: nel's).

    Raises:
        OSError: the mount failed (not root, or the kernel refused).
    """
    owner = os.geteuid() if uid is None else uid
    opts = f"size={size_bytes},mode=0700,uid={owner},gid={owner}".encode()
    if _libc().mount(b"tmpfs", str(path).encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, opts) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mounting a tmpfs on {path}: {os.strerror(err)}")


def unmount(path: Path) -> None:
    """Detach the mount on `path` (lazily: a file still open somewhere does not block it)."""
    if _libc().umount2(str(path).encode(), _MNT_DETACH) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unmounting {path}: {os.strerror(err)}")


@cache
def can_mount() -> bool:
    """Whether this process can mount a tmpfs on the host (probed once, in the temp dir)."""
    if os.geteuid() != 0:
        return False
    probe = Path(tempfile.mkdtemp(prefix="nel-tmpfs-probe-"))
    try:
        mount_tmpfs(probe, 1 << 20)
    except OSError:
        return False
    else:
        unmount(probe)
        return True
    finally:
        probe.rmdir()
