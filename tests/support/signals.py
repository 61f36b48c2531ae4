"""Children that a test will interrupt get default signal dispositions.

A script that starts `.ci/run` in the background (`nohup bash .ci/run &`) makes POSIX ignore
SIGINT (and SIGQUIT) in it and in everything it starts, and an ignored disposition survives
`exec`. A Python child started from such a test run never installs its KeyboardInterrupt
handler, so a test's Ctrl-C never reaches it: the test times out and leaves its SLURM jobs
queued. Every child a test will signal is started through :func:`default_signals`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator, Mapping, Sequence

__all__ = ["cancel_slurm_jobs", "default_signals"]


def default_signals() -> None:
    """A `preexec_fn`: the child starts with default SIGINT/SIGTERM/SIGQUIT and no blocked signals."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT):
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


@contextlib.contextmanager
def cancel_slurm_jobs(slurm_env: Mapping[str, str], ids: Sequence[str]) -> Iterator[None]:
    """On leaving (a failed assertion included), `scancel` every job id in `ids` (a list the
    test fills as it learns them), so a failing Ctrl-C test leaves no job queued."""
    try:
        yield
    finally:
        if ids:
            subprocess.run(["scancel", *ids], env={**os.environ, **slurm_env}, check=False,
                           capture_output=True, timeout=60)
