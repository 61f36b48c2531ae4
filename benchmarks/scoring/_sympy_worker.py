"""Helper process for sympy comparisons made outside the main thread.

Reads JSON `[a, b]` lines on stdin and answers `[equal, how]` lines on stdout. The parent
kills this process when an answer takes longer than the item's time limit, and the process
may map at most `NEL_MATH_WORKER_MEMORY_MB` (default 2048): sympy is the one scoring step
that cannot be made linear, so a hostile expression must hit a MemoryError (scored
`error`, not equal) rather than the server's memory.
"""

from __future__ import annotations

import json
import os
import resource
import sys

ENV_MEMORY_MB = "NEL_MATH_WORKER_MEMORY_MB"
DEFAULT_MEMORY_MB = 2048


def limit_memory() -> int:
    """Cap this process's address space; returns the cap in bytes."""
    cap = int(os.environ.get(ENV_MEMORY_MB) or DEFAULT_MEMORY_MB) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    return cap


def main() -> None:
    """Serve comparisons until stdin closes."""
    limit_memory()
    from benchmarks.scoring.math_sympy import _sympy_equal

    _sympy_equal("1", "1")  # warm the parser before announcing readiness
    print("ready", flush=True)
    for line in sys.stdin:
        a, b = json.loads(line)
        try:
            verdict = _sympy_equal(a, b)
        except Exception:  # MemoryError included: the next item starts afresh
            verdict = (False, "error")
        print(json.dumps(list(verdict)), flush=True)


if __name__ == "__main__":
    main()
