"""Children that a test will interrupt get default signal dispositions.

A script that starts `.ci/run` in the background (`nohup bash .ci/run &`) makes POSIX ignore
SIGINT (and SIGQUIT) in it and in everything it starts, and an ignored disposition survives
`exec`. A Python child started from such a test run never installs its KeyboardInterrupt
handler, so a test's Ctrl-C never reaches it: the test times out and leaves its SLURM jobs
queued. Every child a test will signal is started through :func:`default_signals`
(`tests.support.slurm_cluster.ctrl_c_submitted_run` then cancels the jobs of a failed one).
"""

from __future__ import annotations

import signal

__all__ = ["default_signals"]


def default_signals() -> None:
    """A `preexec_fn`: the child starts with default SIGINT/SIGTERM/SIGQUIT and no blocked signals."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT):
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
