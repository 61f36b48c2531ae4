"""A generator run in a forked child, each value it yields handed to the caller as soon as
it is yielded: steps of work the caller collects one by one while it does something else.

`nel eval run` evaluates its first stale shard and then builds the model's bundle before the
Dagster runs that record them can take either. Both are Python holding the GIL; Dagster's
imports, instance and definitions (~1.5 s of CPU) are too. Run in one process they add up
after the last request; run here, the shard and the bundle are a child's steps while the
caller imports Dagster on the other core, and the tail after the last request is only what
is left of the bundle and the recording runs.

Each step's result (or the exception that ended the generator) goes back pickled through a
pipe, length-prefixed; the child ends with `os._exit` (no `atexit` handler of the caller runs
twice). The caller waits for the child before its own exit (`atexit`), so the files the child
writes are complete whenever the command has returned.

A SIGKILL of the caller ends the child too (PR_SET_PDEATHSIG). Signals: `nel eval stop` and a test's `send_signal` reach the caller's pid alone, so while the
first `forward_steps` results are outstanding the caller forwards SIGINT and SIGTERM to the
child and then acts on them as it would have (its handler in place). A signal sent to the
whole process group (Ctrl-C in a terminal) reaches the child by itself too; the forwarded copy
comes `FORWARD_DELAY_S` later, when the child's loop has taken the first one and ignores it
(`interrupts.run_interruptibly`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import signal
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from benchmarks.errors import NelError

#: Seconds between a signal reaching the caller and its copy reaching the child (see above).
FORWARD_DELAY_S = 0.05
_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_HEADER = struct.Struct("<Q")


class ForkedSteps:
    """`fn(*args, **kwargs)`, a generator, running in a forked child; `step(i)` is the
    `i`-th value it yields (a `Later`: `result()` waits for it).

    Args:
        what: what the child does, for errors ("evaluating gsm8k/m shard 0").
        steps: a name per expected step, for errors when the child ends before one.
        fn: the generator function.
        forward_steps: signals are forwarded to the child until this many results are in.
    """

    def __init__(self, what: str, steps: list[str], fn: Callable[..., Iterator[Any]], *args: Any,
                 forward_steps: int = 0, **kwargs: Any) -> None:
        self._what = what
        self._names = steps
        self._results: list[tuple[bool, Any]] = []
        self._ended: str | None = None  # how the child ended, once it has
        self._forward_steps = forward_steps
        self._previous: dict[int, Any] = {}
        for stream in (sys.stdout, sys.stderr):  # nothing buffered is inherited, so none doubled
            with contextlib.suppress(Exception):
                stream.flush()
        read, write = os.pipe()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child
            code = 70
            try:
                os.close(read)
                _die_with(parent)
                code = _child(write, fn, args, kwargs)
            finally:
                os._exit(code)
        os.close(write)
        self._pid = pid
        self._pipe = os.fdopen(read, "rb")
        atexit.register(self.wait)
        if forward_steps > 0:
            self._forward_signals()

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self._pid

    def step(self, index: int) -> _Step:
        """The `index`-th step's result, as a `Later`."""
        return _Step(self, index)

    def result(self, index: int) -> Any:
        """What the `index`-th step yielded (waits for it); raises what ended the generator
        before it, or an error saying the child ended without it."""
        while len(self._results) <= index and self._ended is None:
            self._read_one()
        if index < len(self._results):
            ok, value = self._results[index]
            if ok:
                return value
            raise value
        if self._results and not self._results[-1][0]:
            raise self._results[-1][1]  # the generator raised before this step
        raise NelError(f"{self._what}: ended without {self._names[index]} ({self._ended})")

    def wait(self) -> None:
        """Wait for the child to end (every step's result is kept for `result`)."""
        while self._ended is None:
            self._read_one()

    def wait_for(self, index: int) -> None:
        """Wait until the `index`-th step's result is in, or the child has ended."""
        while len(self._results) <= index and self._ended is None:
            self._read_one()

    def _read_one(self) -> None:
        head = self._pipe.read(_HEADER.size)
        data = self._pipe.read(_HEADER.unpack(head)[0]) if len(head) == _HEADER.size else b""
        try:
            self._results.append(pickle.loads(data))
        except Exception:  # end of the pipe: the child has ended (or was killed mid-way)
            self._end()
            return
        if len(self._results) >= self._forward_steps:
            self._restore_signals()

    def _end(self) -> None:
        self._pipe.close()
        _, status = os.waitpid(self._pid, 0)
        atexit.unregister(self.wait)
        code = os.waitstatus_to_exitcode(status)
        self._ended = f"signal {-code}" if code < 0 else f"exit status {code}"
        self._restore_signals()

    def _forward_signals(self) -> None:
        """Forward SIGINT and SIGTERM to the child, then call the handler in place."""
        if threading.current_thread() is not threading.main_thread():
            return
        for s in _SIGNALS:
            prev = signal.getsignal(s)
            if prev is signal.SIG_IGN or prev is None:
                continue  # ignored here, so ignored by the child too (inherited)
            self._previous[s] = prev
            signal.signal(s, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self._ended is None:
            time.sleep(FORWARD_DELAY_S)  # a group's signal has reached the child already
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, signum)
        prev = self._previous.get(signum, signal.SIG_DFL)
        self._restore_signals()
        if callable(prev):
            prev(signum, frame)
        else:  # the default action: die of it, as without a child
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def _restore_signals(self) -> None:
        if not self._previous or threading.current_thread() is not threading.main_thread():
            return
        for s, prev in self._previous.items():
            if signal.getsignal(s) == self._on_signal:
                signal.signal(s, prev)
        self._previous = {}


class _Step:
    """One step of a `ForkedSteps` (the `Later` protocol of head_start.py)."""

    def __init__(self, steps: ForkedSteps, index: int) -> None:
        self._steps, self._index = steps, index

    def result(self) -> Any:
        return self._steps.result(self._index)

    def wait(self) -> None:
        self._steps.wait_for(self._index)


def _die_with(parent: int) -> None:
    """End this child when `parent` dies (SIGKILL, a crash): a `kill -9` of the nel process
    must stop its requests, as it did when they were sent from that process. Its normal exit
    waits for the child first (`atexit`), so this only fires when it could not."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG (Linux)
    if os.getppid() != parent:  # it died before the line above took effect
        os._exit(70)


def _send(pipe: Any, answer: tuple[bool, Any]) -> None:
    try:
        data = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # an unpicklable result or exception: say what it was
        data = pickle.dumps((False, NelError(f"{type(answer[1]).__name__}: {answer[1]}"
                                             if not answer[0] else f"unpicklable result: {exc}")))
    pipe.write(_HEADER.pack(len(data)) + data)
    pipe.flush()


def _child(write: int, fn: Callable[..., Iterator[Any]], args: tuple[Any, ...],
           kwargs: dict[str, Any]) -> int:
    import gc

    # The caller's objects are never walked by the child's collections: their pages stay
    # shared with the caller instead of being copied on the first collection's write.
    gc.freeze()
    with os.fdopen(write, "wb") as pipe:
        try:
            for value in fn(*args, **kwargs):
                _send(pipe, (True, value))
        except BaseException as exc:  # the caller raises it, as if it had made the call itself
            _send(pipe, (False, exc))
    return 0
