"""Real file-system conditions for tests: a small tmpfs (to fill up) and read-only mounts.

Tests run as root, and root ignores permission bits, so a `chmod -w` directory does not stop
it: only a read-only mount (EROFS) or a full file system (ENOSPC) does. Every mount made here
is unmounted when the context exits, whatever happened.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from tests.support.realcomponents import require_real_component


def _mount(*args: str) -> None:
    if os.geteuid() != 0:
        require_real_component("mounting a tmpfs or a read-only bind mount needs root")
    p = subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        require_real_component(f"mount {' '.join(args)} failed: {p.stderr.strip()}")


def _umount(path: Path) -> None:
    p = subprocess.run(["umount", str(path)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, f"could not unmount {path}: {p.stderr.strip()}"


@contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (e.g. "300k") mounted at `path` for the duration."""
    path.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path))
    try:
        yield path
    finally:
        _umount(path)


@contextmanager
def read_only_view(source: Path, path: Path) -> Iterator[Path]:
    """`source` bind-mounted read-only at `path` for the duration (writes fail with EROFS)."""
    path.mkdir(parents=True, exist_ok=True)
    _mount("--bind", str(source), str(path))
    try:
        _mount("-o", "remount,bind,ro", str(path))
        yield path
    finally:
        _umount(path)


def fill(directory: Path) -> int:
    """Write zeros into `directory` until its file system is full; returns bytes written."""
    written = 0
    chunk = b"\0" * 65536
    # Unbuffered: the write that hits ENOSPC raises here, not later in close().
    with open(directory / "filler.bin", "wb", buffering=0) as fh, suppress(OSError):
        while True:
            written += fh.write(chunk) or 0
    return written
