"""The C library's allocator, tuned where nel's measurements showed it matters (glibc only;
a no-op elsewhere).

* `keep_blocks_on_heap`: glibc serves blocks above its mmap threshold (128 KiB until the
  process happens to free a larger mapped block, which raises it) with a fresh mmap, and
  asyncio's transports allocate a 256 KiB buffer for every socket read (see http_raw.py).
* `give_back_freed`: freed heap pages stay resident until trimmed; the runner trims between
  its head start and Dagster's imports so the two peaks do not add up (see runner.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
from typing import Any

_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number


@functools.cache
def _libc() -> Any | None:
    """The process's C library when it is glibc (it has `mallopt` and `malloc_trim`)."""
    with contextlib.suppress(OSError):
        libc = ctypes.CDLL(None)  # the C library is among the process's own symbols
        if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim"):
            return libc
    return None


@functools.cache
def keep_blocks_on_heap(up_to: int = 4 << 20) -> None:
    """Serve blocks of up to `up_to` bytes from the heap, not from fresh mmaps (once per
    process; fixing the threshold also stops glibc's own adjustment of it)."""
    libc = _libc()
    if libc is not None:
        libc.mallopt(_M_MMAP_THRESHOLD, up_to)


def give_back_freed() -> None:
    """Collect garbage, then return the heap's free pages to the OS."""
    gc.collect()
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
