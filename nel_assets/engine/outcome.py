"""The verdict of `nel compare` in NeMo Evaluator's vocabulary: PASS, WARN, BLOCK, INCONCLUSIVE.

NeMo Evaluator 0.3.0 turns a comparison into one of four verdicts and CI scripts branch on
its exit statuses (`nel compare` strict: BLOCK 1, WARN or INCONCLUSIVE 2, PASS 0). nel keeps
its own statistics (paired Newcombe CI, exact McNemar or permutation test, MDE) and maps them
onto the same four words, with the same meaning:

* **BLOCK**: a drop larger than ``max_drop`` is established (the whole CI lies below
  ``-max_drop``).
* **WARN**: the candidate is significantly worse (p < α), but a drop beyond ``max_drop`` is
  not established.
* **PASS**: no item changed, or a drop beyond ``max_drop`` is ruled out (the CI's lower end
  is above ``-max_drop``) without a significant drop.
* **INCONCLUSIVE**: no paired items, or the run is too small to rule a drop beyond
  ``max_drop`` in or out.

One difference on purpose: NeMo Evaluator 0.3.0 calls a comparison INCONCLUSIVE whenever
its test is underpowered and not significant, whatever the direction; its McNemar test is
one-sided, so a large improvement on a small benchmark (0 regressions, 15 improvements in
20 items) is INCONCLUSIVE there and fails a strict CI step with 2. nel answers PASS when the
CI rules out a drop beyond ``max_drop``, which such an improvement does.

Pure Python, no Dagster: the CLI and the engine both call it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["SEVERITY", "benchmark_outcome", "worst"]

# Worst-of order across benchmarks, as NeMo Evaluator's multi-benchmark compare uses it.
SEVERITY = {"PASS": 0, "INCONCLUSIVE": 1, "WARN": 2, "BLOCK": 3}


def _pts(x: float) -> str:
    return f"{100 * x:.2f} pts"


def benchmark_outcome(comp: Mapping[str, Any]) -> tuple[str, str]:
    """``(verdict, reason)`` of one benchmark's ``compare_scores`` result.

    Args:
        comp: The comparison (``n_paired``, ``flips``, ``regression``, ``significant``,
            ``delta``, ``ci_low``, ``max_drop``, ``p_value``).

    Returns:
        The verdict (PASS, WARN, BLOCK or INCONCLUSIVE) and a one-line reason.
    """
    margin = float(comp.get("max_drop") or 0.0)
    if not comp.get("n_paired"):
        return "INCONCLUSIVE", "no paired items: nothing to compare"
    flips = comp.get("flips") or {}
    changed = sum(int((flips.get(k) or {}).get("count") or 0) for k in ("better_to_worse", "worse_to_better"))
    if changed == 0:
        return "PASS", f"no item changed in {comp['n_paired']} paired items"
    delta = comp.get("delta")
    lo = comp.get("ci_low")
    if comp.get("regression"):
        return "BLOCK", (f"the drop is established beyond the max drop {_pts(margin)}: the CI lies "
                         f"entirely below −{_pts(margin)}")
    if comp.get("significant") and delta is not None and delta < 0:
        return "WARN", (f"significant drop (p={comp.get('p_value'):.2g}) not established beyond the "
                        f"max drop {_pts(margin)}")
    if lo is not None and lo > -margin:
        return "PASS", f"a drop beyond the max drop {_pts(margin)} is ruled out (CI low {100 * lo:+.2f} pts)"
    return "INCONCLUSIVE", (f"the CI reaches below −{_pts(margin)}: too few paired items to rule a "
                            "drop beyond the max drop in or out")


def worst(verdicts: Iterable[str]) -> str:
    """The most severe verdict (PASS when there is none)."""
    return max(verdicts, key=lambda v: SEVERITY.get(v, 0), default="PASS")
