"""The run's log file (`<out>/logs/nel-run.log`): where Dagster's logs and every failure's
traceback go, so the terminal shows one `error:` line per failure and nothing else.

Dagster's console logger is silenced in the run config (see runner._QUIET_RUN_CONFIG);
this module routes Dagster's *python* loggers (framework messages and warnings, which
otherwise reach stderr through logging's last-resort handler) into the file, and turns a
failed step into one line for the terminal plus the full error text for the file.
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, suppress
from pathlib import Path
from typing import Any

from benchmarks.errors import NelError

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_path_for(out: Path) -> Path:
    """Where a run writing to `out` keeps its log."""
    return out / "logs" / "nel-run.log"


def append(path: Path, title: str, body: str = "") -> None:
    """Append one titled entry (a failure's traceback, a note) to the run log."""
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    with path.open("a", encoding="utf-8") as fh:
        fh.write(f"{stamp} {title}\n")
        if body:
            fh.write(body.rstrip("\n") + "\n")


class _StderrToLog(io.TextIOBase):
    """A stand-in for `sys.stderr` while Dagster runs in-process: some of its failure paths
    write to `sys.stderr` directly (e.g. "Exception while writing logger call to event log"
    when the instance's disk is full). Their text goes to the run log; a log that cannot be
    written (the same full disk) drops it rather than fail the run a second time."""

    def __init__(self, path: Path) -> None:
        self._path = path

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        with suppress(OSError), self._path.open("a", encoding="utf-8") as fh:
            fh.write(text)
        return len(text)


@contextmanager
def dagster_logs_to(path: Path) -> Iterator[None]:
    """Send the `dagster` python logger, Python warnings and direct writes to `sys.stderr`
    to `path` (not the terminal) for the duration; the previous state is restored afterwards."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8", delay=True)
    handler.setFormatter(logging.Formatter(_FORMAT))
    targets = [logging.getLogger("dagster"), logging.getLogger("py.warnings")]
    saved = [(lg, lg.propagate) for lg in targets]
    for lg in targets:
        lg.addHandler(handler)
        lg.propagate = False
    logging.captureWarnings(True)
    try:
        with redirect_stderr(_StderrToLog(path)):
            yield
    finally:
        logging.captureWarnings(False)
        for lg, propagate in saved:
            lg.removeHandler(handler)
            lg.propagate = propagate
        handler.close()


def _nel_error_names() -> set[str]:
    """Class names of every NelError subclass loaded: their messages are written for users,
    so they are shown without the class name."""
    names: set[str] = set()
    todo: list[type] = [NelError]
    while todo:
        cls = todo.pop()
        names.add(cls.__name__)
        todo.extend(cls.__subclasses__())
    return names


def one_line(cls_name: str, message: str) -> str:
    """A one-line reason from an exception's class name and message."""
    text = message.strip()
    # Dagster's serialized errors prefix the message with "module.Class: ".
    head, sep, rest = text.partition(f"{cls_name}: ")
    if sep and " " not in head and (not head or head.endswith(".")):
        text = rest
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    line = lines[0] if lines else ""
    if cls_name in _nel_error_names():
        return line or cls_name
    return f"{cls_name}: {line}" if line else cls_name


def step_failure(result: Any) -> tuple[str, str]:
    """(one-line reason, full error text) of a failed in-process Dagster run."""
    for ev in result.get_step_failure_events():
        data = ev.step_failure_data
        full = data.error.to_string() if data.error is not None else ""
        if data.user_failure_data is not None and data.user_failure_data.description:
            return data.user_failure_data.description.strip().splitlines()[0], full
        err = data.error
        while err is not None and err.cause is not None:
            err = err.cause
        if err is not None:
            return one_line(err.cls_name, err.message), full
    return f"the Dagster run {result.run_id} failed without a step failure", ""


def budget_stopped(result: Any) -> bool:
    """True when a failed in-process run stopped at a service's budget cap."""
    for ev in result.get_step_failure_events():
        err = ev.step_failure_data.error
        while err is not None:
            if err.cls_name == "BudgetExhausted":
                return True
            err = err.cause
    return False


_INTERRUPTS = frozenset({"DagsterExecutionInterruptedError", "KeyboardInterrupt"})


def interrupted(result: Any) -> bool:
    """True when a failed in-process run failed because it was interrupted (Ctrl-C)."""
    for ev in result.get_step_failure_events():
        err = ev.step_failure_data.error
        while err is not None:
            if err.cls_name in _INTERRUPTS:
                return True
            err = err.cause
    return False
