"""Text of a `nel gate` decision: NeMo Evaluator's verdict, then nel's paired analysis.

The verdict and each benchmark's status follow NeMo Evaluator 0.3.0's rules
(``nemo_gate_rules``); nel's own numbers (Newcombe CI at the Bonferroni-corrected level, MDE,
items that would settle it) follow, labelled as such, and set nothing. Pure Python.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["gate_text", "nel_analysis_line"]


def _num(x: Any, fmt: str = "+.4f") -> str:
    return "n/a" if x is None else format(float(x), fmt)


def nel_analysis_line(b: Mapping[str, Any]) -> str | None:
    """nel's paired numbers for one benchmark (None when it was not compared)."""
    if b.get("delta") is None:
        return None
    ci = f"[{_num(b.get('ci_low'))}, {_num(b.get('ci_high'))}]"
    level = "" if b.get("ci_level") is None else f" at {b['ci_level']:.4g}"
    mde = "undefined" if b.get("mde") is None else _num(b["mde"], ".4f")
    more = f"; ~{b['items_needed']} more paired items would settle it" if b.get("items_needed") else ""
    return f"Δ={_num(b['delta'])} paired CI{level} {ci}, MDE {mde}, n={b.get('n_paired')}{more}"


def gate_text(out: Mapping[str, Any], *, verbose: bool = False) -> str:
    """The report `nel gate` prints: verdict, one line per benchmark, nel's numbers."""
    lines = [f"gate: {out['verdict']}  (NeMo Evaluator 0.3.0's rules: any critical or supporting "
             "BREACH or MISSING is NO-GO; any INSUFFICIENT_EVIDENCE is INCONCLUSIVE)"]
    lines += [f"  {r}" for r in out.get("verdict_reasons") or []]
    rows = out.get("benchmarks") or []
    width = max((len(b["benchmark"]) for b in rows), default=4)
    nel = ((out.get("nel_analysis") or {}).get("benchmarks")) or {}
    for b in rows:
        ci = ("" if b.get("delta_ci_lower") is None else
              f" 95% CI [{_num(b['delta_ci_lower'])}, {_num(b['delta_ci_upper'])}]")
        delta = "" if b.get("delta") is None else f" Δ={_num(b['delta'])}"
        lines.append(f"  {b['benchmark']:<{width}}  {b['status']:<21} {b['tier']:<10} "
                     f"{b.get('metric') or '-'} n={b.get('n_paired', 0)}{delta}{ci}: "
                     + "; ".join(b.get("reasons") or []))
        extra = nel_analysis_line(nel.get(b["benchmark"]) or {})
        if verbose and extra:
            lines.append(f"  {'':<{width}}  nel's paired analysis (informational): {extra}")
    for w in out.get("warnings") or []:
        lines.append(f"  warning: {w}")
    return "\n".join(lines)
