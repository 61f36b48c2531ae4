"""Markdown of a comparison (``nel compare --format markdown``, ``regression_report.md``) and of
a gate decision (``nel gate --format markdown``, the gate's damage report).

Scores in percent, deltas in points, as every nel report shows them; the JSON files keep
fractions. Pure Python, no Dagster.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nel_assets.engine.reports.compare_text import mde_text, pts, test_text

__all__ = ["comparison_markdown", "gate_markdown"]


def _cell(x: Any) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def comparison_markdown(doc: Mapping[str, Any], *, show_flips: bool = False) -> str:
    """The Markdown report of a ``compare_runs`` document.

    Args:
        doc: The regression document.
        show_flips: List every flipped item kept in the document, not only the counts.
    """
    b, c = doc["baseline"], doc["candidate"]
    md = doc.get("max_drop")
    out = [f"# Regression report: {doc.get('outcome', '?')}", "",
           f"- baseline: `{b['model']}` ({b['source']})",
           f"- candidate: `{c['model']}` ({c['source']})",
           f"- max drop: {pts(md, False) + ' pts' if md is not None else 'none'}; α = {doc['alpha']:g}",
           *[f"- **{_cell(w)}**" for w in doc.get("provenance_warnings") or []], "",
           "| benchmark | verdict | baseline | candidate | Δ (pts) | 95% CI (pts) | test | MDE | "
           "regressions | improvements |",
           "|---|---|---:|---:|---:|---|---|---:|---:|---:|"]
    for name, comp in doc["benchmarks"].items():
        fl = comp["flips"]
        out.append(f"| {_cell(name)} | {comp.get('outcome', '?')} | {pts(comp['base_mean'], False)}% | "
                   f"{pts(comp['cand_mean'], False)}% | {pts(comp['delta'])} | "
                   f"[{pts(comp['ci_low'])}, {pts(comp['ci_high'])}] | {_cell(test_text(comp))} | "
                   f"{_cell(mde_text(comp))} | {fl['better_to_worse']['count']} | "
                   f"{fl['worse_to_better']['count']} |")
    out.append("")
    for name, comp in doc["benchmarks"].items():
        out.append(f"- **{_cell(name)}**: {comp.get('outcome', '?')}: {_cell(comp.get('outcome_reason') or '')}")
    for side, names in doc["missing"].items():
        if names:
            out.append(f"- missing in {side}: {', '.join(names)} (not compared)")
    if show_flips:
        out += ["", "## Flips", ""]
        for name, comp in doc["benchmarks"].items():
            for direction, label in (("better_to_worse", "regression"), ("worse_to_better", "improvement")):
                for ex in (comp.get("flip_examples") or {}).get(direction) or []:
                    bb, cc = ex["baseline"], ex["candidate"]
                    out.append(f"- {_cell(name)} item `{ex['item']}` ({label}): expected "
                               f"`{_cell(ex.get('expected'))}`; baseline `{_cell(bb.get('extracted'))}` "
                               f"({bb.get('reward')}) → candidate `{_cell(cc.get('extracted'))}` "
                               f"({cc.get('reward')})")
    return "\n".join(out) + "\n"


def gate_markdown(out: Mapping[str, Any]) -> str:
    """The Markdown damage report of a gate decision (the JSON ``nel gate`` prints).

    Statuses and the verdict are NeMo Evaluator's (its rules); the last column is nel's own
    paired analysis, informational."""
    from nel_assets.engine.reports.gate_text import nel_analysis_line

    nel = (out.get("nel_analysis") or {}).get("benchmarks") or {}
    lines = [f"# Release gate: {out['verdict']}", "",
             f"- policy: `{out['policy']}`",
             f"- baseline: `{out['baseline']['model']}` ({out['baseline']['source']})",
             f"- candidate: `{out['candidate']['model']}` ({out['candidate']['source']})",
             *[f"- {_cell(r)}" for r in out.get("verdict_reasons") or []],
             *[f"- **{_cell(w)}**" for w in out.get("provenance_warnings") or []], "",
             "| benchmark | tier | status | metric | n | Δ (pts) | 95% CI (pts) | max drop (pts) | reason "
             "| nel's paired analysis |",
             "|---|---|---|---|---:|---:|---|---:|---|---|"]
    for b in out.get("benchmarks") or []:
        lines.append(f"| {_cell(b['benchmark'])} | {b['tier']} | {b['status']} | {b.get('metric') or '-'} | "
                     f"{b.get('n_paired', 0)} | {pts(b.get('delta'))} | "
                     f"[{pts(b.get('delta_ci_lower'))}, {pts(b.get('delta_ci_upper'))}] | "
                     f"{pts(b.get('max_drop_threshold'), False)} | {_cell('; '.join(b.get('reasons') or []))} | "
                     f"{_cell(nel_analysis_line(nel.get(b['benchmark']) or {}) or '-')} |")
    damaged = [b for b in out.get("benchmarks") or [] if b["status"] != "PASS"]
    lines += ["", "## Damage", ""]
    lines += [f"- {_cell(b['benchmark'])}: {b['status']}: {_cell('; '.join(b.get('reasons') or []))}"
              for b in damaged] or ["- none: every benchmark passed"]
    for w in out.get("warnings") or []:
        lines.append(f"- warning: {_cell(w)}")
    return "\n".join(lines) + "\n"
