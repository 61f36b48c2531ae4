"""Tabular report formats from bundles: markdown, CSV and a LaTeX ``tabular`` fragment."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

from nel_assets.engine.reports.compare_text import mde_text, pts
from nel_assets.engine.reports.cost_text import cost_line, provenance_line, run_cost_line
from nel_assets.engine.results.headline import headline_note

__all__ = ["render_csv", "render_latex", "render_markdown", "se_cell"]


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.2f}"


def _mde_cell(c: Mapping[str, Any]) -> str:
    """The MDE in points for a table cell, or "undefined (…)" when it is not defined."""
    return pts(c["mde"], False) if c.get("mde") is not None else mde_text(c)


def se_cell(s: Mapping[str, Any]) -> str:
    """A score's SE in percent, or why it is undefined."""
    return _pct(s["se"]) if s.get("se") is not None else (s.get("se_note") or "n/a")


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}"


def _comparison_markdown(doc: Mapping[str, Any]) -> list[str]:
    out = ["", f"## Comparison: {doc['candidate']['model']} vs baseline {doc['baseline']['model']}", "",
           "| benchmark | paired | baseline (%) | candidate (%) | Δ (pts) | 95% CI (pts) | p | MDE (pts) | verdict |",
           "|---|---:|---:|---:|---:|---|---:|---:|---|"]
    for name, c in doc["benchmarks"].items():
        p = "n/a" if c.get("p_value") is None else f"{c['p_value']:.3g}"
        out.append(f"| {name} | {c['n_paired']} | {_pct(c['base_mean'])} | {_pct(c['cand_mean'])} | "
                   f"{pts(c['delta'])} | [{pts(c['ci_low'])}, {pts(c['ci_high'])}] | {p} | "
                   f"{_mde_cell(c)} | {c['verdict']} |")
    for side, names in doc.get("missing", {}).items():
        if names:
            out.append(f"\nMissing in {side}: {', '.join(names)}.")
    return out


def render_markdown(bundles: Sequence[Mapping[str, Any]], comparison: Mapping[str, Any] | None = None) -> str:
    """A markdown report for one or more bundles (and a comparison, when given).

    Args:
        bundles: nel bundles.
        comparison: Optional ``regression.json`` document.

    Returns:
        Markdown text.
    """
    out = ["# nel evaluation report", ""]
    out += ["Scores, CIs and SEs in percent; the CI method is the bundle's `ci_method`.", "",
            "| benchmark | model | score (%) | 95% CI (%) | CI method | SE (%) | items | samples | repeats | failed |",
            "|---|---|---:|---|---|---:|---:|---:|---:|---:|"]
    for b in bundles:
        s = b["score"]
        out.append(
            f"| {b['benchmark']} | {b['model']} | {_pct(s.get('mean'))} | "
            f"[{_pct(s.get('ci_low'))}, {_pct(s.get('ci_high'))}] | {s.get('ci_method') or 'n/a'} | "
            f"{se_cell(s)} | {s.get('n_items')} | {s.get('n_samples')} | {s.get('n_repeats')} | "
            f"{s.get('n_failed_samples')} |"
        )
    if total := run_cost_line(bundles):
        out += ["", total + "."]
    for b in bundles:
        s, rt, fa = b["score"], b["runtime"], b["failures"]
        out += ["", f"## {b['benchmark']} / {b['model']}", ""]
        if b.get("model_id"):
            out.append(f"Model id: `{b['model_id']}`  ")
        out.append(f"SE method: {s.get('se_method')}; CI method: {s.get('ci_method')}; "
                   f"CI level {s.get('level')}")
        if note := headline_note(b):
            out.append(f"\nMetric: {note}.")
        for note in (s.get("ci_note"), None if s.get("se_note") is None else f"SE {s['se_note']}"):
            if note:
                out.append(f"\nNote: {note}.")
        if b.get("complete") is False:
            out.append(f"\n**Partial run**: shards {b.get('shards')} of {b.get('shards_expected')} expected.")
        pk = s.get("pass_at_k") or {}
        if pk:
            out += ["", "| k | pass@k (%) | 95% CI |", "|---:|---:|---|"]
            for k, v in sorted(pk.items(), key=lambda kv: int(kv[0])):
                out.append(f"| {k} | {_pct(v.get('mean'))} | [{_pct(v.get('ci_low'))}, {_pct(v.get('ci_high'))}] |")
        cats = b.get("per_category") or {}
        if cats:
            out += ["", "| category | score (%) | 95% CI | items |", "|---|---:|---|---:|"]
            for c, v in sorted(cats.items()):
                out.append(f"| {c} | {_pct(v.get('mean'))} | [{_pct(v.get('ci_low'))}, "
                           f"{_pct(v.get('ci_high'))}] | {v.get('n_items')} |")
        lat = rt["latency_ms"]
        out += ["", "Runtime: "
                f"latency p50 {_ms(lat['p50'])} ms, p90 {_ms(lat['p90'])} ms, p99 {_ms(lat['p99'])} ms; "
                f"{(rt['tokens']['completion_total'] or 0):.0f} completion tokens; "
                f"errors {rt['n_errors']}; retries {rt['retries']}; "
                f"finish reasons {json.dumps(rt['finish_reasons'])}"]
        out += [f"\n{line}." for line in (cost_line(b), provenance_line(b)) if line]
        if fa["categories"]:
            out += ["", "| failure | count | rate (%) |", "|---|---:|---:|"]
            for c, v in fa["categories"].items():
                out.append(f"| {c} | {v['count']} | {_pct(v['rate'])} |")
    if comparison:
        out += _comparison_markdown(comparison)
    return "\n".join(out) + "\n"


CSV_COLUMNS = ("benchmark", "model", "model_id", "category", "mean", "se", "ci_low", "ci_high",
               "ci_method", "n_items", "n_samples", "n_repeats", "n_failed_samples", "latency_p50_ms",
               "latency_p99_ms", "n_errors")


def render_csv(bundles: Sequence[Mapping[str, Any]]) -> str:
    """One row per (benchmark, model) with ``category`` empty, then one per category.

    Scores stay in score units (0–1) so spreadsheets and DuckDB read them without rescaling;
    ``ci_method`` labels the interval (the bundle's, the same on every surface).
    """
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    for b in bundles:
        s, rt = b["score"], b["runtime"]
        base = {"benchmark": b["benchmark"], "model": b["model"], "model_id": b.get("model_id") or ""}
        w.writerow({**base, "category": "", "mean": s.get("mean"), "se": s.get("se"),
                    "ci_low": s.get("ci_low"), "ci_high": s.get("ci_high"),
                    "ci_method": s.get("ci_method"),
                    "n_items": s.get("n_items"), "n_samples": s.get("n_samples"),
                    "n_repeats": s.get("n_repeats"), "n_failed_samples": s.get("n_failed_samples"),
                    "latency_p50_ms": rt["latency_ms"]["p50"], "latency_p99_ms": rt["latency_ms"]["p99"],
                    "n_errors": rt["n_errors"]})
        for cat, v in sorted((b.get("per_category") or {}).items()):
            w.writerow({**base, "category": cat, "mean": v.get("mean"), "se": v.get("se"),
                        "ci_low": v.get("ci_low"), "ci_high": v.get("ci_high"),
                        "ci_method": v.get("ci_method"), "n_items": v.get("n_items")})
    return buf.getvalue()


_TEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
                "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def tex_escape(text: str) -> str:
    """Escape LaTeX's special characters in plain text."""
    return "".join(_TEX_ESCAPES.get(ch, ch) for ch in str(text))


def render_latex(bundles: Sequence[Mapping[str, Any]], comparison: Mapping[str, Any] | None = None) -> str:
    """A LaTeX ``tabular`` fragment (no preamble, no packages beyond core LaTeX).

    ``\\hline`` rather than booktabs rules so the fragment compiles in any document; wrap it
    in ``table`` / ``\\input`` it where it belongs. Scores are percentages with the 95% CI.
    """
    lines = [r"% nel evaluation results; scores, CIs and SEs in %, 95% CI in brackets",
             r"\begin{tabular}{llrrlrr}", r"\hline",
             r"Benchmark & Model & Score (\%) & 95\% CI (\%) & CI method & SE (\%) & Items \\", r"\hline"]
    for b in bundles:
        s = b["score"]
        lines.append(f"{tex_escape(b['benchmark'])} & {tex_escape(b['model'])} & {_pct(s.get('mean'))} & "
                     f"[{_pct(s.get('ci_low'))}, {_pct(s.get('ci_high'))}] & "
                     f"{tex_escape(s.get('ci_method') or 'n/a')} & {tex_escape(se_cell(s))} & "
                     f"{s.get('n_items')} \\\\")
    lines.append(r"\hline")
    lines.append(r"\end{tabular}")
    if comparison:
        lines += ["", r"% paired comparison: candidate minus baseline, percentage points",
                  r"\begin{tabular}{lrrrrl}", r"\hline",
                  r"Benchmark & $\Delta$ (pts) & 95\% CI & $p$ & MDE & Verdict \\", r"\hline"]
        for name, c in comparison["benchmarks"].items():
            p = "n/a" if c.get("p_value") is None else f"{c['p_value']:.3g}"
            lines.append(f"{tex_escape(name)} & {pts(c['delta'])} & [{pts(c['ci_low'])}, {pts(c['ci_high'])}] & "
                         f"{p} & {tex_escape(_mde_cell(c))} & {tex_escape(c['verdict'])} \\\\")
        lines += [r"\hline", r"\end{tabular}"]
    return "\n".join(lines) + "\n"
