"""The self-contained HTML report: summary table, inline-SVG plots and a per-sample
drill-down (searchable, filterable, collapsible; vanilla JS, no network access)."""

from __future__ import annotations

import html
import time
from collections.abc import Mapping, Sequence
from typing import Any

from nel_assets.engine.reports import svg
from nel_assets.engine.reports.compare_text import mde_text, pts
from nel_assets.engine.reports.cost_text import cost_line, provenance_line, run_cost_line
from nel_assets.engine.reports.report_images import images_cell
from nel_assets.engine.reports.tables import se_cell
from nel_assets.engine.results.headline import headline_note

__all__ = ["render_html"]

MAX_ROWS = 1000  # per (benchmark, model): enough to browse, small enough for a fast page
#: Characters per prompt/response cell: texts are shown whole; only a pathological one (a
#: runaway generation) is cut, so that 1,000 rows cannot make a page of gigabytes.
TEXT_CAP = 50_000
SUMMARY_CHARS = 90  # characters of a collapsed cell's one-line summary

_CSS = """
body{font-family:system-ui,sans-serif;margin:24px auto;max-width:1100px;color:#222;padding:0 16px}
h1{font-size:1.6em}h2{border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:2em}
table{border-collapse:collapse;font-size:13px;width:100%}
th,td{border:1px solid #ddd;padding:4px 6px;vertical-align:top;text-align:left}
th{background:#f4f6f8}td.num{text-align:right;font-variant-numeric:tabular-nums}
.plots{display:flex;flex-wrap:wrap;gap:12px}.nel-plot{background:#fff;border:1px solid #eee}
pre{white-space:pre-wrap;word-break:break-word;margin:4px 0;font-size:12px;max-height:360px;overflow:auto}
summary{cursor:pointer}.v-correct{color:#2e8b57;font-weight:600}.v-wrong{color:#c0392b;font-weight:600}
.v-failed{color:#8a6d3b;font-weight:600}.muted{color:#777;font-size:12px}
.drill-controls{margin:8px 0;display:flex;gap:8px;align-items:center}
.drill-controls input{flex:1;padding:4px 6px}.verdict-regression{color:#c0392b;font-weight:600}
.verdict-improvement{color:#2e8b57;font-weight:600}
.seed-img{max-width:160px;max-height:160px;margin:4px 4px 0 0;border:1px solid #ddd}
"""

_JS = """
document.querySelectorAll('.drill').forEach(function (box) {
  var q = box.querySelector('.drill-search'), f = box.querySelector('.drill-filter');
  var rows = Array.prototype.slice.call(box.querySelectorAll('tbody tr'));
  var count = box.querySelector('.drill-count');
  function apply() {
    var needle = q.value.toLowerCase(), want = f.value, shown = 0;
    rows.forEach(function (tr) {
      var ok = (want === 'all' || tr.dataset.verdict === want) &&
               (!needle || tr.textContent.toLowerCase().indexOf(needle) >= 0);
      tr.style.display = ok ? '' : 'none';
      if (ok) shown += 1;
    });
    count.textContent = shown + ' shown';
  }
  q.addEventListener('input', apply);
  f.addEventListener('change', apply);
  apply();
});
"""


def _e(x: Any) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.2f}"


def _verdict(row: Mapping[str, Any]) -> str:
    r = row.get("reward")
    if r is None or (isinstance(r, float) and r != r):
        return "failed"
    return "correct" if float(r) >= 1.0 else "wrong" if float(r) <= 0.0 else "partial"


def _summary(flat: str, *, last: bool) -> str:
    """At most SUMMARY_CHARS of whitespace-collapsed text, cut at a word boundary, with an
    ellipsis where text was left out (its start, or its end with ``last``)."""
    if len(flat) <= SUMMARY_CHARS:
        return flat
    if last:
        tail = flat[-SUMMARY_CHARS:]
        space = tail.find(" ")
        return "…" + (tail[space + 1:] if 0 <= space < SUMMARY_CHARS // 3 else tail)
    head = flat[:SUMMARY_CHARS]
    space = head.rfind(" ")
    return (head[:space] if space > 2 * SUMMARY_CHARS // 3 else head) + "…"


def _text_cell(text: Any, *, last: bool = False) -> str:
    """A prompt or response, escaped and whole. Short text is shown as it is; longer text is
    collapsed under a one-line summary of its words (the first line alone can be a lone quote
    or a blank-looking fragment). ``last`` summarises the end: prompts open with the same
    instruction every time and end with the question that tells rows apart."""
    s = "" if text is None else str(text)
    if len(s) > TEXT_CAP:
        # Only pathological cells are cut, at a line or word boundary, and say so.
        cut = max(s.rfind("\n", 0, TEXT_CAP), s.rfind(" ", 0, TEXT_CAP))
        cut = cut if cut > TEXT_CAP // 2 else TEXT_CAP
        s = s[:cut] + f"\n… ({len(s) - cut:,} more characters: the whole text is in results.jsonl)"
    flat = " ".join(s.split())
    if not flat:
        return '<span class="muted">(empty)</span>'
    if len(flat) <= SUMMARY_CHARS and "\n" not in s.strip():
        return f"<pre>{_e(s.strip())}</pre>"
    return f"<details><summary>{_e(_summary(flat, last=last))}</summary><pre>{_e(s)}</pre></details>"


def _drilldown(key: str, samples: Sequence[Mapping[str, Any]], total: int,
               images: Mapping[str, str] | None = None) -> str:
    rows = []
    for s in samples:
        v = _verdict(s)
        reward = s.get("reward")
        rows.append(
            f'<tr data-verdict="{v}"><td>{_e(s.get("sample_id"))}</td><td>{_text_cell(s.get("prompt"), last=True)}'
            f'{images_cell(s, images or {})}</td>'
            f'<td>{_text_cell(s.get("response"))}</td><td>{_e(s.get("expected"))}</td>'
            f'<td>{_e(s.get("extracted"))}</td><td class="v-{v}">{v}'
            f'{"" if reward is None or v == "failed" else f" ({reward:g})"}'
            f'{"" if not s.get("failure_category") else " · " + _e(s.get("failure_category"))}</td></tr>')
    note = (f"showing {len(samples)} of {total} samples (failed and wrong first)"
            if len(samples) < total else f"all {total} samples")
    return (f'<div class="drill" data-key="{_e(key)}"><div class="drill-controls">'
            f'<input class="drill-search" type="search" placeholder="search prompt, response, answer…">'
            f'<select class="drill-filter"><option value="all">all</option><option value="correct">correct</option>'
            f'<option value="wrong">wrong</option><option value="partial">partial</option>'
            f'<option value="failed">failed</option></select><span class="drill-count muted"></span></div>'
            f'<p class="muted">{note}</p><table><thead><tr><th>sample</th><th>prompt</th><th>response</th>'
            f'<th>expected</th><th>extracted</th><th>verdict</th></tr></thead><tbody>'
            + "".join(rows) + "</tbody></table></div>")


def cap_samples(samples: Sequence[Mapping[str, Any]], limit: int = MAX_ROWS) -> list[Mapping[str, Any]]:
    """At most ``limit`` samples, failed and wrong ones first (they are what people open a
    drill-down for), each group in its original order."""
    if len(samples) <= limit:
        return list(samples)
    order = {"failed": 0, "wrong": 1, "partial": 2, "correct": 3}
    ranked = sorted(range(len(samples)), key=lambda i: (order[_verdict(samples[i])], i))
    return [samples[i] for i in ranked[:limit]]


def _outcome_rows(bundle: Mapping[str, Any]) -> list[tuple[str, float, None, None]]:
    s, fa = bundle["score"], bundle["failures"]
    rows: list[tuple[str, float, None, None]] = []
    n_scored = fa.get("n_scored", s.get("n_samples") or 0)
    mean = s.get("mean")
    if mean is not None and s.get("binary"):
        correct = round(mean * (s.get("n_samples") or 0))
        rows.append(("correct", float(correct), None, None))
        rows.append(("wrong (scored 0)", float(max(n_scored - correct, 0)), None, None))
    else:
        rows.append(("scored", float(n_scored), None, None))
    for cat, v in fa.get("categories", {}).items():
        rows.append((cat, float(v["count"]), None, None))
    return rows


def render_html(bundles: Sequence[Mapping[str, Any]], *,
                details: Mapping[str, Mapping[str, Any]] | None = None,
                comparison: Mapping[str, Any] | None = None, title: str = "nel evaluation report",
                trends: Sequence[Mapping[str, Any]] | None = None) -> str:
    """The whole HTML page.

    Args:
        bundles: nel bundles (one per benchmark × model).
        details: ``"<benchmark>/<model>"`` -> ``{samples: [row dicts], n_total, latency_ms: [...]}``
            (rows need ``sample_id, prompt, response, expected, extracted, reward,
            failure_category``); drives the latency histogram and the drill-down.
        comparison: Optional ``regression.json`` document -> forest plot and table.
        title: Page title.
        trends: Optional ``checkpoint_trends`` rows: the trend section's deltas and alarms
            (without them, a report holding several checkpoints shows their scores by step).

    Returns:
        One self-contained HTML document (inline CSS, SVG and JS; nothing fetched).
    """
    details = details or {}
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
           f"<h1>{_e(title)}</h1>",
           f'<p class="muted">generated {time.strftime("%Y-%m-%d %H:%M:%S")} · scores are means over '
           "items (repeats averaged first) with 95% CIs</p>"]
    out.append('<h2 id="summary">Summary</h2><table><thead><tr><th>benchmark</th><th>model</th>'
               '<th>score (%)</th><th>95% CI (%)</th><th>CI method</th><th>SE (%)</th><th>items</th>'
               '<th>samples</th><th>failed</th></tr></thead><tbody>')
    for b in bundles:
        s = b["score"]
        out.append(f"<tr><td>{_e(b['benchmark'])}</td><td>{_e(b['model'])}</td><td class=num>{_pct(s.get('mean'))}</td>"
                   f"<td class=num>[{_pct(s.get('ci_low'))}, {_pct(s.get('ci_high'))}]</td>"
                   f"<td>{_e(s.get('ci_method') or 'n/a')}</td>"
                   f"<td class=num>{_e(se_cell(s))}</td><td class=num>{_e(s.get('n_items'))}</td>"
                   f"<td class=num>{_e(s.get('n_samples'))}</td><td class=num>{_e(s.get('n_failed_samples'))}</td></tr>")
    out.append("</tbody></table>")
    if total := run_cost_line(bundles):
        out.append(f'<p class="cost">{_e(total)}.</p>')
    score_rows = [(f"{b['benchmark']} / {b['model']}",
                   None if b["score"].get("mean") is None else 100 * b["score"]["mean"],
                   None if b["score"].get("ci_low") is None else 100 * b["score"]["ci_low"],
                   None if b["score"].get("ci_high") is None else 100 * b["score"]["ci_high"]) for b in bundles]
    out.append('<div class="plots">' + svg.dot_ci_chart(score_rows, title="Score and 95% CI per benchmark") + "</div>")

    from nel_assets.engine.reports.trend_html import trends_section

    out.append(trends_section(bundles, trends))
    if comparison:
        c_rows = []
        out.append(f'<h2 id="comparison">Comparison: {_e(comparison["candidate"]["model"])} vs baseline '
                   f'{_e(comparison["baseline"]["model"])}</h2>')
        out.append("<table><thead><tr><th>benchmark</th><th>paired</th><th>baseline (%)</th><th>candidate (%)</th>"
                   "<th>Δ (pts)</th><th>95% CI</th><th>p</th><th>MDE (pts)</th><th>verdict</th></tr></thead><tbody>")
        for name, c in comparison["benchmarks"].items():
            scale = (lambda v: None if v is None else 100 * v)  # noqa: E731 - local unit change
            c_rows.append((name, scale(c["delta"]), scale(c["ci_low"]), scale(c["ci_high"]), c["verdict"]))
            p = "n/a" if c.get("p_value") is None else f"{c['p_value']:.3g}"
            out.append(f"<tr><td>{_e(name)}</td><td class=num>{c['n_paired']}</td><td class=num>{_pct(c['base_mean'])}</td>"
                       f"<td class=num>{_pct(c['cand_mean'])}</td><td class=num>{pts(c['delta'])}</td>"
                       f"<td class=num>[{pts(c['ci_low'])}, {pts(c['ci_high'])}]</td><td class=num>{p}</td>"
                       f"<td class=num>{_e(pts(c['mde'], False) if c.get('mde') is not None else mde_text(c))}</td><td class=\"verdict-{_e(c['verdict'])}\">{_e(c['verdict'])}</td></tr>")
        out.append("</tbody></table>")
        md = comparison.get("max_drop")
        out.append('<div class="plots">' + svg.forest_plot(
            c_rows, title="Paired deltas with 95% CIs", max_drop=None if md is None else 100 * md) + "</div>")
        for side, names in comparison.get("missing", {}).items():
            if names:
                out.append(f"<p>Missing in {_e(side)}: {_e(', '.join(names))}</p>")

    for b in bundles:
        key = f"{b['benchmark']}/{b['model']}"
        anchor = "b-" + "".join(ch if ch.isalnum() else "-" for ch in key)
        out.append(f'<h2 id="{_e(anchor)}">{_e(b["benchmark"])} / {_e(b["model"])}</h2>')
        s = b["score"]
        out.append(f'<p>Score {_pct(s.get("mean"))}% [{_pct(s.get("ci_low"))}, {_pct(s.get("ci_high"))}]% '
                   f'({_e(s.get("ci_method"))} CI; SE {_e(se_cell(s))}, {_e(s.get("se_method"))}); '
                   f'{_e(s.get("n_items"))} items, '
                   f'{_e(s.get("n_samples"))} samples{"" if not b.get("model_id") else ", model id " + _e(b["model_id"])}.</p>')
        if note := headline_note(b):
            out.append(f'<p class="metric">Metric: {_e(note)}.</p>')
        out += [f'<p class="{k}">{_e(line)}.</p>' for k, line in
                (("cost", cost_line(b)), ("provenance", provenance_line(b))) if line]
        plots = []
        cats = b.get("per_category") or {}
        if cats:
            rows = [(c, 100 * (v.get("mean") or 0.0),
                     None if v.get("ci_low") is None else 100 * v["ci_low"],
                     None if v.get("ci_high") is None else 100 * v["ci_high"]) for c, v in sorted(cats.items())]
            plots.append(svg.bar_chart(rows, title="Score per category (95% CI)", kind="category-bars",
                                       hi=100.0, unit="score (%)"))
        d = details.get(key) or {}
        if d.get("latency_ms") is not None:
            plots.append(svg.histogram(d["latency_ms"], title="Model latency per request"))
        plots.append(svg.bar_chart(_outcome_rows(b), title="Outcomes and failures", kind="failure-breakdown",
                                   unit="samples", value_fmt="{:.0f}",
                                   colors=["#2e8b57", "#c0392b", "#8a6d3b", "#7f8c8d", "#9b59b6"]))
        out.append('<div class="plots">' + "".join(plots) + "</div>")
        if d.get("samples") is not None:
            out.append(f"<h3>Samples</h3>{_drilldown(key, d['samples'], int(d.get('n_total') or len(d['samples'])), d.get('images'))}")
    out.append(f"<script>{_JS}</script></body></html>")
    return "\n".join(out)
