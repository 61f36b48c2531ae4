"""A call run in a forked child while the caller goes on, its result collected later.

`nel eval run` builds a model's bundle (statistics, report, 0.3.0 exports: ~0.7 s of CPU at
10,552 samples) right after its last request, then imports Dagster and records the runs
(~1 s more). The two do not depend on each other until the bundle's Dagster run takes the
bundle, so the bundle is built in a forked child and both proceed on their own cores. A
thread would not do: both halves are Python holding the GIL.

The child shares the caller's memory copy-on-write (nothing is pickled on the way in), sends
back its pickled result or exception through a pipe, and ends with `os._exit` (no `atexit`
handler of the caller runs twice, no buffered output is written twice). The caller collects
the result with `result()`; it also waits for the child before its own exit (`atexit`), so
the files the child writes are complete whenever the command has returned.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import sys
import threading
from collections.abc import Callable
from typing import Any

from benchmarks.errors import NelError

_UNSET = object()


class ForkedCall:
    """`fn(*args, **kwargs)` running in a forked child; `result()` returns what it returned
    (or raises what it raised)."""

    def __init__(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self._what = what
        self._value: Any = _UNSET
        self._error: BaseException | None = None
        for stream in (sys.stdout, sys.stderr):  # nothing buffered is inherited, so none doubled
            with contextlib.suppress(Exception):
                stream.flush()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child
            code = 70
            try:
                os.close(read)
                code = _child(write, fn, args, kwargs)
            finally:
                os._exit(code)
        os.close(write)
        self._pid, self._read = pid, read
        atexit.register(self.wait)

    def result(self) -> Any:
        """What the call returned, once the child has ended (waits for it); re-raises the
        exception it raised."""
        if self._value is _UNSET and self._error is None:
            self._collect()
        if self._error is not None:
            raise self._error
        return self._value

    def wait(self) -> None:
        """Wait for the child to end; its result is kept for `result()`, an error too."""
        if self._value is _UNSET and self._error is None:
            self._collect()

    def _collect(self) -> None:
        chunks = []
        with os.fdopen(self._read, "rb") as pipe:  # to EOF: the child has written all
            while chunk := pipe.read(1 << 16):
                chunks.append(chunk)
        _, status = os.waitpid(self._pid, 0)
        atexit.unregister(self.wait)
        data = b"".join(chunks)
        try:
            ok, payload = pickle.loads(data)
        except Exception:  # killed (out of memory, a signal) before it could answer
            code = os.waitstatus_to_exitcode(status)
            how = f"signal {-code}" if code < 0 else f"exit status {code}"
            self._error = NelError(f"{self._what} ended without a result ({how})")
            return
        if ok:
            self._value = payload
        else:
            self._error = payload


def _child(write: int, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    import gc

    # The caller's objects are never walked by the child's collections: their pages stay
    # shared with the caller instead of being copied on the first collection's write.
    gc.freeze()
    try:
        answer: tuple[bool, Any] = (True, fn(*args, **kwargs))
    except BaseException as exc:  # the caller raises it, as if it had made the call itself
        answer = (False, exc)
    try:
        data = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # an unpicklable result or exception: say what it was
        data = pickle.dumps((False, NelError(f"{type(answer[1]).__name__}: {answer[1]}"
                                             if not answer[0] else f"unpicklable result: {exc}")))
    with os.fdopen(write, "wb") as pipe:
        pipe.write(data)
    return 0


def can_fork() -> bool:
    """Whether a call can run forked here: Linux (fork is the platform's way, and glibc and
    Arrow reinitialise their locks in the child) and no other Python thread alive (one could
    hold a lock the child would then wait on for ever)."""
    return sys.platform.startswith("linux") and hasattr(os, "fork") and threading.active_count() == 1
