"""The suite's children get a default SIGINT even when the suite inherited an ignored one
(issue 34, item 15): `nohup bash .ci/run &` ignores SIGINT in everything it starts, and a
Python child that inherits the ignored disposition never raises KeyboardInterrupt, so every
Ctrl-C test timed out."""

from __future__ import annotations

import subprocess
import sys

from tests.support.realcomponents import REPO_ROOT

#: Ignore SIGINT (as a script's background job has it), then start a child the way the suite's
#: helpers do and print the child's SIGINT handler.
PROBE = """
import signal, subprocess, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
from tests.support.signals import default_signals
child = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
plain = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True)
helped = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                        preexec_fn=default_signals)
print(plain.stdout.strip(), helped.stdout.strip())
"""


def test_default_signals_gives_a_child_its_keyboard_interrupt() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         cwd=REPO_ROOT, check=True, timeout=120).stdout.split()
    # Plain: the ignored disposition was inherited (the failure); helped: Python's default.
    assert out == ["False", "True"]


def test_every_cli_helper_starts_children_with_default_signals() -> None:
    """The helpers that start `nel` for tests that will signal it pass `default_signals`."""
    import inspect

    from tests.support import cli

    for helper in (cli.run_nel, cli.start_nel, cli.started_nel):
        assert "preexec_fn=default_signals" in inspect.getsource(helper), helper.__name__
