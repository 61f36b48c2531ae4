"""Waiting on conditions, never on time: the one polling loop the suite uses.

A test that sleeps a fixed time, or relies on a library's default timeout, flakes on a
loaded CI machine. Tests instead poll the condition they need, with a generous bound that
only matters when the condition never comes, and then fail saying what did not happen.

No Dagster or Playwright here: any test may import this.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from nel_resources.runtime.processes import ManagedProcess

T = TypeVar("T")

#: Bounds for waits on a loaded 2-core CI machine. They are ceilings for a condition that
#: should come much sooner; reaching one means something is broken, not slow.
PROCESS_START_S = 180.0  # a server process (webserver, llama.cpp, nel serve) becomes healthy
RUN_FINISH_S = 300.0  # a Dagster run launched from the UI/daemon finishes
UI_ACTION_MS = 90_000  # a Playwright action or assertion (both default to far less)


def wait_for(check: Callable[[], T | None], *, timeout: float, what: str, interval: float = 0.5,
             alive: ManagedProcess | None = None) -> T:
    """Poll `check` until it returns something truthy; fail naming `what` after `timeout` s.

    Args:
        check: returns the awaited value, or None/falsy to keep waiting.
        timeout: seconds; a ceiling, not an expected duration.
        what: what is awaited, for the failure message ("run X to finish").
        interval: seconds between polls.
        alive: a process that must keep running meanwhile; if it exits the wait fails at
            once with its log tail instead of running out the clock.

    Raises:
        AssertionError: the condition did not come in time, or `alive` exited.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if alive is not None and not alive.is_running():
            raise AssertionError(f"{alive.name} exited while waiting for {what}; log:\n{alive.log_tail(8000)}")
        if time.monotonic() > deadline:
            tail = "" if alive is None else f"\n{alive.name} log:\n{alive.log_tail(8000)}"
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{tail}")
        time.sleep(interval)


def wait_while_running(check: Callable[[], T | None], *, proc: subprocess.Popen[bytes], what: str,
                       log: Path | None = None, timeout: float = PROCESS_START_S,
                       interval: float = 0.02) -> T:
    """`wait_for` on a child the test started with `subprocess.Popen` (e.g. `nel eval run`):
    fails at once, with `log`'s text, if the child exits before the condition comes."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if proc.poll() is not None:
            text = log.read_text(errors="replace")[-8000:] if log is not None and log.exists() else ""
            raise AssertionError(f"the process exited ({proc.returncode}) before {what}:\n{text}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
