"""The checkpoint trend plot: score ± 95% CI against training step, alarms marked in red.

Inline SVG drawn by hand like the rest of `svg` (the HTML report is one self-contained file);
the same string is written next to the `checkpoint_trends` Parquet for the Dagster UI.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nel_assets.engine.reports.svg import _BLUE, _FONT, _RED, _e, _nice_ticks, _open, _x_axis

__all__ = ["trend_chart"]


def trend_chart(rows: Sequence[Mapping[str, Any]], *, title: str, width: int = 720, height: int = 280) -> str:
    """Score (%) with CI whiskers per checkpoint, joined in step order; a red ring marks an alarm.

    Args:
        rows: `checkpoint_trends` rows of one series (`step`, `score`, `ci_low`, `ci_high`,
            `alarm`, `delta`), in step order.
        title: The plot's title.
    """
    left, right, top, bottom = 60, 30, 30, height - 44
    parts = _open("checkpoint-trend", width, height, title)
    pts = [r for r in rows if r.get("score") is not None]
    if not pts:
        parts.append(f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle" {_FONT}>no scores</text></svg>')
        return "\n".join(parts)
    steps = [int(r["step"]) for r in pts]
    lo_s, hi_s = min(steps), max(steps)
    pad = max((hi_s - lo_s) * 0.05, 1.0)
    xlo, xhi = lo_s - pad, hi_s + pad
    vals = [100 * float(v) for r in pts for v in (r["score"], r.get("ci_low"), r.get("ci_high")) if v is not None]
    ylo, yhi = max(0.0, min(vals) - 5), min(100.0, max(vals) + 5)
    if yhi <= ylo:
        ylo, yhi = max(0.0, ylo - 1), yhi + 1
    x0, x1 = left, width - right

    def sx(v: float) -> float:
        return x0 + (v - xlo) / (xhi - xlo) * (x1 - x0)

    def sy(v: float) -> float:
        return bottom - (v - ylo) / (yhi - ylo) * (bottom - top)

    _x_axis(parts, x0, x1, bottom, xlo, xhi, "{:g}", "training step", top)
    for t in _nice_ticks(ylo, yhi, 4):
        parts.append(f'<text x="{left - 6}" y="{sy(t) + 4:.1f}" text-anchor="end" {_FONT}>{t:g}</text>')
    parts.append(f'<text x="14" y="{(top + bottom) / 2:.1f}" {_FONT} fill="#555" '
                 f'transform="rotate(-90 14 {(top + bottom) / 2:.1f})" text-anchor="middle">score (%)</text>')
    path = " ".join(f"{'M' if i == 0 else 'L'}{sx(int(r['step'])):.1f},{sy(100 * r['score']):.1f}"
                    for i, r in enumerate(pts))
    parts.append(f'<path class="trend" d="{path}" fill="none" stroke="{_BLUE}" stroke-width="1.5"/>')
    for r in pts:
        x, y = sx(int(r["step"])), sy(100 * r["score"])
        if r.get("ci_low") is not None and r.get("ci_high") is not None:
            parts.append(f'<line class="ci" x1="{x:.1f}" y1="{sy(100 * r["ci_low"]):.1f}" x2="{x:.1f}" '
                         f'y2="{sy(100 * r["ci_high"]):.1f}" stroke="{_BLUE}" stroke-width="2" opacity="0.6"/>')
        delta = "" if r.get("delta") is None else f", Δ {100 * r['delta']:+.2f} pts"
        alarm = bool(r.get("alarm"))
        parts.append(f'<circle class="point{" alarm" if alarm else ""}" cx="{x:.1f}" cy="{y:.1f}" r="{6 if alarm else 4}" '
                     f'fill="{_RED if alarm else _BLUE}"><title>step {int(r["step"])}: {100 * r["score"]:.2f}%'
                     f'{_e(delta)}{" (regression alarm)" if alarm else ""}</title></circle>')
    parts.append("</svg>")
    return "\n".join(parts)
