"""A small real tmpfs mounted for one test: a filesystem that really fills up (ENOSPC)."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_tmpfs(where: Path, size: str = "1m") -> Iterator[Path]:
    """Mount a `size` tmpfs at `where` (needs root), unmount it afterwards.

    Skips the test when mounting is not permitted (not root, no CAP_SYS_ADMIN).
    """
    where.mkdir(parents=True, exist_ok=True)
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def fill(path: Path) -> int:
    """Write zeros to `path` until the filesystem is full; returns the bytes written."""
    total = 0
    block = b"\0" * 4096
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        while True:
            try:
                total += os.write(fd, block)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                # the last partial page: fill it byte by byte-ish, then stop
                try:
                    while True:
                        total += os.write(fd, b"\0" * 64)
                except OSError:
                    return total
    finally:
        os.close(fd)
