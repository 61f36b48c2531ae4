"""The HTML report's "Checkpoint trends" section, shown when a report holds several
checkpoints of one family on a benchmark.

With the `checkpoint_trends` rows (the asset's Parquet) each series shows its paired deltas
and the regression alarm; without them, the scores and CIs of the bundles alone (a paired
delta needs the per-item results, which only the store holds).
"""

from __future__ import annotations

import html
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from nel_assets.engine.reports.trend_svg import trend_chart
from nel_resources.exporters.steps import checkpoint_family_step

__all__ = ["trend_rows_from_bundles", "trends_section"]


def trend_rows_from_bundles(bundles: Sequence[Mapping[str, Any]],
                            step_pattern: str | None = None) -> list[dict[str, Any]]:
    """Score-only trend rows (no deltas) of the bundles that are checkpoints, step-ordered."""
    rows = []
    for b in bundles:
        fs = checkpoint_family_step(str(b.get("model") or ""), step_pattern)
        if fs is None:
            continue
        s = b.get("score") or {}
        rows.append({"benchmark": b.get("benchmark"), "family": fs[0], "step": fs[1], "model": b.get("model"),
                     "score": s.get("mean"), "ci_low": s.get("ci_low"), "ci_high": s.get("ci_high"),
                     "n": s.get("n_items"), "delta": None, "delta_se": None, "alarm": None})
    return sorted(rows, key=lambda r: (str(r["benchmark"]), r["family"], r["step"]))


def _cell(x: Any, scale: float = 100.0, signed: bool = False) -> str:
    if x is None:
        return "n/a"
    return f"{scale * x:+.2f}" if signed else f"{scale * x:.2f}"


def trends_section(bundles: Sequence[Mapping[str, Any]], trends: Sequence[Mapping[str, Any]] | None) -> str:
    """The section's HTML ('' when no family has two checkpoints on a benchmark)."""
    models = {(b.get("benchmark"), b.get("model")) for b in bundles}
    rows = [r for r in (trends or []) if (r.get("benchmark"), r.get("model")) in models] or \
        trend_rows_from_bundles(bundles)
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(str(r["benchmark"]), str(r["family"]))].append(r)
    groups = {k: sorted(v, key=lambda r: r["step"]) for k, v in groups.items() if len(v) >= 2}
    if not groups:
        return ""
    out = ['<h2 id="trends">Checkpoint trends</h2>',
           '<p class="muted">score ± 95% CI against training step; Δ is the paired change from the '
           "previous checkpoint on the items both scored, and the alarm is the CUSUM regression "
           "alarm (false alarms ≤ 5% per series)</p>"]
    charts = []
    for (bench, family), series in sorted(groups.items()):
        label = f"{bench} / {family}" if family else bench
        charts.append(trend_chart(series, title=f"{label}: score vs step"))
        out.append(f"<h3>{html.escape(label)}</h3><table><thead><tr><th>step</th><th>model</th>"
                   "<th>score (%)</th><th>95% CI (%)</th><th>Δ (pts)</th><th>SE (pts)</th><th>alarm</th>"
                   "</tr></thead><tbody>")
        for r in series:
            alarm = "" if r.get("alarm") is None else ("ALARM" if r["alarm"] else "no")
            out.append(f"<tr><td class=num>{r['step']}</td><td>{html.escape(str(r['model']))}</td>"
                       f"<td class=num>{_cell(r['score'])}</td>"
                       f"<td class=num>[{_cell(r['ci_low'])}, {_cell(r['ci_high'])}]</td>"
                       f"<td class=num>{_cell(r.get('delta'), signed=True)}</td>"
                       f"<td class=num>{_cell(r.get('delta_se'))}</td>"
                       f'<td class="{"verdict-regression" if r.get("alarm") else ""}">{alarm}</td></tr>')
        out.append("</tbody></table>")
    out.append('<div class="plots">' + "".join(charts) + "</div>")
    return "\n".join(out)
