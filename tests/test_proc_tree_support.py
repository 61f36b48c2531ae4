"""The memory measurement the sandbox bounds tests rely on counts only what the measured
block started: a process already running (an earlier test's server) is left out."""

from __future__ import annotations

import subprocess
import sys

from tests.support.proc_tree import PeakTreeRss
from tests.support.waiting import wait_for

MiB = 1 << 20
#: holds `argv[1]` MiB, says so, then waits for stdin to close
HOLD = ("import sys; b = b'\\1' * (int(sys.argv[1]) << 20); print('held', flush=True); "
        "sys.stdin.read()")


def _holder(mib: int) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(mib)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline() == "held\n"
    return p


def _end(p: subprocess.Popen[str]) -> None:
    assert p.stdin is not None
    p.stdin.close()
    p.wait(timeout=30)


def test_a_process_running_before_the_block_is_not_counted_and_a_new_one_is() -> None:
    old = _holder(300)
    try:
        with PeakTreeRss() as quiet:
            subprocess.run([sys.executable, "-c", "pass"], check=True)
        with PeakTreeRss() as busy:
            new = _holder(200)
            # the poller samples every few ms: let it see the holder before it ends
            wait_for(lambda: busy.peak >= 150 * MiB, timeout=30, what="the new holder counted")
            _end(new)
    finally:
        _end(old)
    assert quiet.peak < 100 * MiB, quiet.peak  # the 300 MiB holder left out
    assert 150 * MiB <= busy.peak < 290 * MiB, busy.peak  # the new one counted, the old not
