"""The C allocator's tuning (`nel_resources.runtime.heap`), checked in fresh interpreters on glibc."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from nel_resources.runtime import heap

REPO = Path(__file__).resolve().parents[3]

# Frees ~60 MB of malloc'd blocks under a block that stays (so the heap's top cannot shrink
# by itself), then prints the resident MB before and after `give_back_freed`.
_TRIM_PROBE = """
from nel_resources.runtime import heap
def rss_mb():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) // 1024
blobs = [bytes(1000) + bytes([i % 256]) for i in range(60_000)]
stays = bytes(1000) + b"x"
del blobs
before = rss_mb()
heap.give_back_freed()
print(before, rss_mb())
"""

pytestmark = pytest.mark.skipif(heap._libc() is None, reason="the C library is not glibc")


def test_give_back_freed_returns_freed_pages_to_the_os() -> None:
    p = subprocess.run([sys.executable, "-c", _TRIM_PROBE], capture_output=True, text=True,
                       cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert p.returncode == 0, p.stderr
    before, after = map(int, p.stdout.split())
    assert before - after >= 30, (before, after)  # ~60 MB were free but resident
