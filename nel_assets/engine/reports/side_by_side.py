"""Two runs side by side: a static, self-contained HTML page of the items that flipped.

One page per comparison (``nel compare BASE CAND --side-by-side PATH``, and the comparison
asset's ``side_by_side.html``): a header with every count (paired items, pass -> fail, fail ->
pass, per category), then one row per listed flip with the prompt (collapsed when long), the
expected answer, and each side's answer with what the scorer extracted. Plain JS filters the
rows by benchmark, category and direction. Inline CSS and JS only: the page opens from disk
and fetches nothing. Every text is HTML-escaped (a response holding ``</script>`` is text).
The flip definition and the query are in ``nel_assets.engine.results.flips``.
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from nel_assets.engine.results.flips import DIRECTIONS, BenchFlips, FlipRow, query_flips

__all__ = ["flips_from_store", "render_side_by_side", "run_pairs", "write_side_by_side"]

DEFAULT_LIMIT = 2000  # flips listed per direction and benchmark (all are counted)
TEXT_CAP = 20_000  # characters per text cell: a runaway generation cannot bloat the page
LONG_PROMPT = 400  # a prompt longer than this is collapsed behind its first line
_LABEL = {"pass_to_fail": "pass → fail", "fail_to_pass": "fail → pass"}

_CSS = """
body{font-family:system-ui,sans-serif;margin:24px auto;max-width:1400px;color:#222;padding:0 16px}
table{border-collapse:collapse;font-size:13px;width:100%}
th,td{border:1px solid #ddd;padding:4px 6px;vertical-align:top;text-align:left}
th{background:#f4f6f8}td.num{text-align:right;font-variant-numeric:tabular-nums}
pre{white-space:pre-wrap;word-break:break-word;margin:2px 0;font-size:12px;max-height:320px;overflow:auto}
summary{cursor:pointer}.muted{color:#777;font-size:12px}.note{background:#fff8e1;padding:6px 10px}
.d-pass_to_fail{color:#c0392b;font-weight:600}.d-fail_to_pass{color:#2e8b57;font-weight:600}
.controls{margin:12px 0;display:flex;gap:12px;align-items:center;flex-wrap:wrap}
td.side{width:28%}.ex{font-family:monospace;background:#f4f6f8;padding:0 3px}
"""

_JS = """
(function () {
  var rows = Array.prototype.slice.call(document.querySelectorAll('#flips tbody tr'));
  var sel = {bench: document.getElementById('f-bench'), cat: document.getElementById('f-cat'),
             dir: document.getElementById('f-dir')};
  var count = document.getElementById('f-count');
  function apply() {
    var shown = 0;
    rows.forEach(function (tr) {
      var ok = (sel.bench.value === '*' || tr.dataset.bench === sel.bench.value) &&
               (sel.cat.value === '*' || tr.dataset.cat === sel.cat.value) &&
               (sel.dir.value === '*' || tr.dataset.dir === sel.dir.value);
      tr.style.display = ok ? '' : 'none';
      if (ok) shown += 1;
    });
    count.textContent = shown + ' of ' + rows.length + ' listed flips shown';
  }
  Object.keys(sel).forEach(function (k) { sel[k].addEventListener('change', apply); });
  apply();
})();
"""


def _e(text: Any) -> str:
    return html.escape("" if text is None else str(text), quote=True)


def _pre(text: Any) -> str:
    s = "" if text is None else str(text)
    cut = len(s) > TEXT_CAP
    body = f"<pre>{_e(s[:TEXT_CAP])}</pre>"
    return body + (f'<div class="muted">(cut at {TEXT_CAP:,} of {len(s):,} characters)</div>' if cut else "")


def _prompt(text: Any) -> str:
    s = "" if text is None else str(text)
    if len(s) <= LONG_PROMPT:
        return _pre(s)
    first = s.strip().splitlines()[0] if s.strip() else ""
    return f"<details><summary>{_e(first[:90])}… ({len(s):,} chars)</summary>{_pre(s)}</details>"


def _side(side: dict[str, Any], mean: float, n: int) -> str:
    ex = side.get("extracted")
    how = f' <span class="muted">({_e(side["method"])})</span>' if side.get("method") else ""
    return (f'<div>extracted: <span class="ex">{_e(ex) if ex is not None else "<i>none</i>"}</span>{how}</div>'
            f'<div class="muted">mean {mean:.3g} over {n} scored sample{"s" if n != 1 else ""}</div>'
            f"{_pre(side.get('response'))}")


def _row(bench: str, r: FlipRow) -> str:
    cat = r.category or ""
    return (f'<tr data-bench="{_e(bench)}" data-cat="{_e(cat)}" data-dir="{r.direction}">'
            f"<td>{_e(bench)}<br>item {r.item}<br><span class=\"muted\">{_e(cat) or '(no category)'}</span></td>"
            f'<td class="d-{r.direction}">{_LABEL[r.direction]}</td>'
            f"<td>{_prompt(r.prompt)}</td><td>{_pre(r.expected)}</td>"
            f'<td class="side">{_side(r.base, r.base_mean, r.base_n)}</td>'
            f'<td class="side">{_side(r.cand, r.cand_mean, r.cand_n)}</td></tr>')


def _summary(flips: Sequence[BenchFlips]) -> list[str]:
    out = ["<table><thead><tr><th>benchmark</th><th>paired items</th><th>pass → fail</th>"
           "<th>fail → pass</th><th>listed</th><th>baseline only</th><th>candidate only</th>"
           "</tr></thead><tbody>"]
    for f in flips:
        out.append(f"<tr><td>{_e(f.benchmark)}</td><td class=num>{f.n_paired:,}</td>"
                   f"<td class=num id=\"n-{_e(f.benchmark)}-pass_to_fail\">{f.counts['pass_to_fail']:,}</td>"
                   f"<td class=num id=\"n-{_e(f.benchmark)}-fail_to_pass\">{f.counts['fail_to_pass']:,}</td>"
                   f"<td class=num>{len(f.rows):,}</td><td class=num>{f.n_base_only:,}</td>"
                   f"<td class=num>{f.n_cand_only:,}</td></tr>")
    out.append("</tbody></table>")
    cats: dict[tuple[str, str], dict[str, int]] = {(f.benchmark, c): d for f in flips for c, d in f.by_category.items()}
    if any(c for _, c in cats):
        out.append("<details><summary>flips per category</summary><table><thead><tr><th>benchmark</th>"
                   "<th>category</th><th>pass → fail</th><th>fail → pass</th></tr></thead><tbody>")
        out += [f"<tr><td>{_e(b)}</td><td>{_e(c) or '(none)'}</td><td class=num>{d['pass_to_fail']:,}</td>"
                f"<td class=num>{d['fail_to_pass']:,}</td></tr>" for (b, c), d in sorted(cats.items())]
        out.append("</tbody></table></details>")
    for f in flips:
        if f.truncated:
            out.append(f'<p class="note">{_e(f.benchmark)}: listing the first {f.limit:,} flips per '
                       f"direction (by item) of {sum(f.counts.values()):,}; every flip is counted above.</p>")
    return out


def _options(name: str, label: str, values: Iterable[tuple[str, str]]) -> str:
    opts = "".join(f'<option value="{_e(v)}">{_e(t)}</option>' for v, t in values)
    return f'<label>{label} <select id="{name}"><option value="*">all</option>{opts}</select></label>'


def render_side_by_side(flips: Sequence[BenchFlips], *, baseline: str, candidate: str,
                        threshold: float) -> str:
    """The page (a complete HTML document) for the flips of every shared benchmark."""
    total = {d: sum(f.counts[d] for f in flips) for d in DIRECTIONS}
    cats = sorted({r.category or "" for f in flips for r in f.rows})
    head = (f"<h1>{_e(baseline)} → {_e(candidate)}: items that flipped</h1>"
            f'<p><b id="total-pass_to_fail">{total["pass_to_fail"]:,}</b> pass → fail, '
            f'<b id="total-fail_to_pass">{total["fail_to_pass"]:,}</b> fail → pass on '
            f"{sum(f.n_paired for f in flips):,} paired items.</p>"
            f'<p class="muted">An item passes when its mean reward over its scored samples (all '
            f"repeats; failed requests left out) is above {threshold:g} (<code>--correct-above</code>); "
            f"a flip is an item that passes on one side and not on the other. Each side shows "
            f"its first scored repeat. Generated {_e(time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime()))}.</p>")
    controls = ('<div class="controls">'
                + _options("f-bench", "benchmark", ((f.benchmark, f.benchmark) for f in flips))
                + _options("f-cat", "category", ((c, c or "(none)") for c in cats))
                + _options("f-dir", "direction", ((d, _LABEL[d]) for d in DIRECTIONS))
                + '<span id="f-count" class="muted"></span></div>')
    table = ['<table id="flips"><thead><tr><th>item</th><th>flip</th><th>prompt</th><th>expected</th>'
             f"<th>baseline: {_e(baseline)}</th><th>candidate: {_e(candidate)}</th></tr></thead><tbody>"]
    table += [_row(f.benchmark, r) for f in flips for r in f.rows]
    table.append("</tbody></table>")
    body = [head, *_summary(flips), controls, *table]
    return ("<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
            f"<title>{_e(baseline)} vs {_e(candidate)}: flips</title><style>{_CSS}</style></head><body>"
            + "\n".join(body) + f"<script>{_JS}</script></body></html>\n")


def flips_from_store(pairs: Iterable[tuple[str, Sequence[Path], Sequence[Path]]], *, threshold: float,
                     limit: int = DEFAULT_LIMIT) -> list[BenchFlips]:
    """``query_flips`` for each (benchmark, baseline files, candidate files), one connection."""
    import duckdb

    con = duckdb.connect()
    try:
        return [query_flips(name, b, c, threshold=threshold, limit=limit, con=con) for name, b, c in pairs]
    finally:
        con.close()


def write_side_by_side(path: Path, pairs: Iterable[tuple[str, Sequence[Path], Sequence[Path]]], *,
                       baseline: str, candidate: str, threshold: float = 0.0,
                       limit: int = DEFAULT_LIMIT) -> list[BenchFlips]:
    """Query the flips and write the page to ``path`` (atomically); the flips it holds."""
    from nel_resources.storage.store import write_text_atomic

    flips = flips_from_store(pairs, threshold=threshold, limit=limit)
    write_text_atomic(Path(path), render_side_by_side(flips, baseline=baseline, candidate=candidate,
                                                      threshold=threshold))
    return flips


def run_pairs(base: Any, cand: Any) -> list[tuple[str, list[Path], list[Path]]]:
    """(benchmark, baseline files, candidate files) for the benchmarks two loaded runs share.

    Args:
        base: The baseline ``Run`` (``results.runs.load_run``) of a nel output dir or bundle.
        cand: The candidate ``Run``.

    Raises:
        NelError: a side read from NeMo Evaluator files (no Parquet store to query).
    """
    from benchmarks.errors import NelError
    from nel_resources.storage.store import ResultStore

    for what, run in (("baseline", base), ("candidate", cand)):
        if run.kind == "nemo":
            raise NelError(f"--side-by-side reads nel's Parquet store: the {what} {run.source} holds "
                           "NeMo Evaluator files; give a nel output dir or bundle.json")

    def files(run: Any, name: str) -> list[Path]:
        bench_dir = Path(run.benchmarks[name].source)  # <out>/<bench folder>
        return ResultStore(bench_dir.parent).committed_shard_files(bench_dir.name, run.model)

    return [(name, files(base, name), files(cand, name))
            for name in sorted(set(base.benchmarks) & set(cand.benchmarks))]
