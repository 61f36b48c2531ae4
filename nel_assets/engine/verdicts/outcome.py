"""How several benchmarks' compare verdicts combine into one (PASS < INCONCLUSIVE < WARN < BLOCK).

Each benchmark's verdict is NeMo Evaluator 0.3.0's, by its rules
(``nemo_compare_rules.compare_verdict``); its multi-benchmark ``compare`` exits with the worst
one, in this order. Pure Python, no Dagster: the CLI and the engine both use it.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["SEVERITY", "worst"]

# Worst-of order across benchmarks, as NeMo Evaluator's multi-benchmark compare uses it.
SEVERITY = {"PASS": 0, "INCONCLUSIVE": 1, "WARN": 2, "BLOCK": 3}


def worst(verdicts: Iterable[str]) -> str:
    """The most severe verdict (PASS when there is none)."""
    return max(verdicts, key=lambda v: SEVERITY.get(v, 0), default="PASS")
