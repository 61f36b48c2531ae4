"""sympy equivalence under a hard per-item time limit (step 6 of `math_equiv`'s pipeline).

In the main thread the limit is a `SIGALRM` timer; anywhere else (worker threads, executors
of an asyncio loop) the comparison runs in a helper process (`_sympy_worker`) that is killed
on overrun. A timeout counts as "not equal" and is reported.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import random
import re
import selectors
import signal
import subprocess
import sys
import threading
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

from benchmarks.scoring.math_normalize import _is_decimal


@lru_cache(maxsize=4096)
def _to_sympy(s: str) -> Any:
    """Parse a normalised answer into a sympy object (raises on failure)."""
    import sympy
    from sympy.parsing.latex import parse_latex

    try:
        expr = parse_latex(s)
    except Exception:
        from sympy.parsing.sympy_parser import (
            convert_xor,
            implicit_multiplication_application,
            parse_expr,
            standard_transformations,
        )

        plain = re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", r"((\1)/(\2))", s)
        plain = re.sub(r"\\sqrt\{([^{}]*)\}", r"sqrt(\1)", plain)
        plain = plain.replace("\\pi", "pi").replace("\\cdot", "*").replace("\\times", "*")
        plain = plain.replace("{", "(").replace("}", ")").replace("\\", "")
        expr = parse_expr(
            plain,
            transformations=(
                *standard_transformations,
                implicit_multiplication_application,
                convert_xor,
            ),
        )
    # parse_latex reads i, e and \pi as plain symbols; answers mean the constants.
    subs = {sympy.Symbol("i"): sympy.I, sympy.Symbol("e"): sympy.E, sympy.Symbol("pi"): sympy.pi}
    if isinstance(expr, sympy.Basic):
        # parse_latex builds unevaluated trees (`Mul(2, pi, evaluate=False)`), which
        # `N()` leaves symbolic; `doit()` evaluates them.
        expr = expr.subs(subs).doit()
    return expr


def _close(x: Any, y: Any) -> bool:
    try:
        cx, cy = complex(x), complex(y)
    except (TypeError, ValueError):
        return False
    if cx != cx or cy != cy:  # NaN
        return False
    return abs(cx - cy) <= 1e-6 * max(1.0, abs(cy))


def _at_random_points(
    exprs: tuple[Any, ...], symbols: set[Any], n: int = 6
) -> list[tuple[complex, ...]]:
    """Values of `exprs` at `n` seeded random rational points; points where any of them is
    undefined are skipped."""
    import sympy

    rng = random.Random(0)
    ordered = sorted(symbols, key=str)
    out: list[tuple[complex, ...]] = []
    bad = (sympy.zoo, sympy.nan, sympy.oo, -sympy.oo)
    for _ in range(n):
        point = {s: sympy.Rational(rng.randint(-97, 97), rng.randint(7, 31)) for s in ordered}
        try:
            values = [sympy.N(e.subs(point), 20) for e in exprs]
            if all(v.is_number and not v.has(*bad) for v in values):
                out.append(tuple(complex(v) for v in values))
        except Exception:
            continue
    return out


def _sympy_equal(a: str, b: str) -> tuple[bool, str]:
    """Compare a normalised prediction `a` with a normalised gold `b` using sympy.

    May be slow: call under a time limit."""
    import sympy

    try:
        x, y = _to_sympy(a), _to_sympy(b)
    except Exception:
        return False, "unparsed"
    if isinstance(x, sympy.Equality) and isinstance(y, sympy.Equality):
        # Equations are equal up to a non-zero constant factor: 2x+2y=2 is x+y=1. Check
        # that (lhs - rhs) ratios agree at a few random points.
        dx, dy = x.lhs - x.rhs, y.lhs - y.rhs
        points = _at_random_points((dx / dy,), dx.free_symbols | dy.free_symbols)
        ratios = [r for (r,) in points if r != 0]
        if len(ratios) < 3:
            return False, "sympy_numeric"
        return all(_close(r, ratios[0]) for r in ratios), "sympy_numeric"
    if isinstance(x, sympy.Equality) or isinstance(y, sympy.Equality):
        return False, "sympy"
    if not isinstance(x, sympy.Expr) or not isinstance(y, sympy.Expr):
        return False, "unparsed"
    free = sorted(x.free_symbols | y.free_symbols, key=str)
    if not free and _is_decimal(a) and not _is_decimal(b):
        # A predicted decimal against an exact gold (`6366.2` vs `\frac{20000}{\pi}`): equal
        # only when the decimal is the exact value, never because it is close.
        diff = sympy.N(y, 50) - sympy.Rational(a)
        return bool(abs(complex(diff)) < 1e-40), "sympy_exact"
    if not free:
        return _close(sympy.N(x, 30), sympy.N(y, 30)), "sympy_numeric"
    # Random-point test first: cheap, and a non-identity almost surely differs at one of a
    # few rational points (expanding first can take seconds on big powers).
    points = _at_random_points((x, y), set(free))
    if any(not _close(vx, vy) for vx, vy in points):
        return False, "sympy_numeric"
    if len(points) >= 3:
        return True, "sympy_numeric"
    try:
        return bool(sympy.simplify(x - y) == 0), "sympy"
    except Exception:
        return False, "sympy"


class _Overrun(BaseException):
    """Raised by the SIGALRM handler. A BaseException so sympy's `except Exception` blocks
    cannot swallow it."""


_alarm_active = False


def _on_alarm(signum: int, frame: Any) -> None:
    if _alarm_active:
        raise _Overrun


@lru_cache(maxsize=1)
def _load_sympy() -> None:
    """Import sympy and build its LaTeX parser once, outside any item's time limit.

    Both take seconds on a loaded machine; inside the alarm they made the first sympy
    comparison of a process time out (scored as not equal) whatever the answers were.
    """
    with contextlib.suppress(Exception):  # a broken parser shows up, per item, later
        _sympy_equal("1", "1")


def _with_alarm(a: str, b: str, timeout: float) -> tuple[bool, str] | None:
    global _alarm_active
    _load_sympy()  # the worker process does the same before it reports "ready"
    old_handler = signal.signal(signal.SIGALRM, _on_alarm)
    old_delay, _ = signal.setitimer(signal.ITIMER_REAL, max(timeout, 0.001))
    started = time.monotonic()
    _alarm_active = True
    try:
        return _sympy_equal(a, b)
    except _Overrun:
        return None
    finally:
        _alarm_active = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        if old_delay > 0:
            # Someone else's timer was pending (pytest-timeout, ...): re-arm what is left.
            signal.setitimer(
                signal.ITIMER_REAL, max(old_delay - (time.monotonic() - started), 0.001)
            )


class _Worker:
    """A helper process that runs sympy comparisons and can be killed on overrun."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.scoring._sympy_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            start_new_session=True,
        )
        # Importing sympy takes a second or two; that is not the item's time.
        if self._readline(proc, 120.0) != "ready":
            self._kill(proc)
            raise RuntimeError("sympy worker process failed to start")
        return proc

    @staticmethod
    def _readline(proc: subprocess.Popen[str], timeout: float) -> str | None:
        assert proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout):
                return None
        line = proc.stdout.readline()
        return line.strip() if line else None

    @staticmethod
    def _kill(proc: subprocess.Popen[str]) -> None:
        try:
            proc.kill()
            proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass

    def compare(self, a: str, b: str, timeout: float) -> tuple[bool, str] | None:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._proc = self._start()
            proc = self._proc
            assert proc.stdin is not None
            try:
                proc.stdin.write(json.dumps([a, b]) + "\n")
                proc.stdin.flush()
                line = self._readline(proc, timeout)
            except OSError:
                line = None  # the helper died (e.g. out of memory): restart it next time
            if line is None:
                self._kill(proc)
                self._proc = None
                return None
            equal, how = json.loads(line)
            return bool(equal), str(how)

    def close(self) -> None:
        with self._lock:
            if self._proc is not None:
                self._kill(self._proc)
                self._proc = None


_worker = _Worker()
atexit.register(_worker.close)


def _sympy_with_limit(a: str, b: str, timeout: float) -> tuple[bool, str] | None:
    """Run `_sympy_equal` under a hard time limit; None means it ran out of time."""
    if (
        hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and os.environ.get("NEL_MATH_ISOLATION") != "process"
    ):
        return _with_alarm(a, b, timeout)
    return _worker.compare(a, b, timeout)
