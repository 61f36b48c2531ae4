"""Checkpoint series: each benchmark's score against training step, per model family, with the
paired step-to-step deltas and the regression alarm (`stats.checkpoint_alarm`).

A model partition is a checkpoint when its name carries a training step (`step-3000`,
`checkpoint-3000`, `iter_0003000`, or `checkpoints.step_pattern`); the rest of the name is its
family, so `llama-step-1000` and `llama-step-2000` form one series and `qwen-step-1000`
another. Per (benchmark, family) the series is ordered by step; each row carries the
checkpoint's score with its CI (from its bundle), the paired delta against the previous
checkpoint over the items both scored, that delta's SE, the series' step-to-step noise (the
RMS of the paired SEs, not a single run's CI), the CUSUM and whether the alarm fired there.

Pure: reads the result store, no Dagster. The asset (`nel_assets.trend_assets`) writes the
rows to Parquet for the DuckDB `checkpoint_trends` view.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.errors import NelError
from nel_assets.engine.stats.checkpoint_alarm import (
    DEFAULT_ALPHA,
    DEFAULT_HORIZON,
    checkpoint_alarm,
)
from nel_resources.exporters.steps import checkpoint_family_step

TREND_COLUMNS: tuple[tuple[str, str], ...] = (
    ("benchmark", "string"), ("family", "string"), ("step", "int64"), ("model", "string"),
    ("score", "float64"), ("ci_low", "float64"), ("ci_high", "float64"), ("n", "int64"),
    ("prev_step", "int64"), ("n_shared", "int64"), ("delta", "float64"), ("delta_se", "float64"),
    ("statistic", "float64"), ("step_noise", "float64"), ("cusum", "float64"),
    ("threshold", "float64"), ("alarm", "bool_"), ("first_alarm_step", "int64"), ("note", "string"),
)
"""The `checkpoint_trends` table's columns and Arrow types, in order."""


@dataclass
class TrendSeries:
    """One (benchmark, family) series: its rows in step order and the alarm's summary."""

    benchmark: str
    family: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    first_alarm_step: int | None = None
    step_noise: float | None = None
    note: str | None = None  # why the alarm could not run (one line), if it could not


def checkpoint_families(models: Iterable[str], step_pattern: str | None = None) -> dict[str, list[tuple[int, str]]]:
    """Model keys grouped by family, each family's (step, model) sorted by step.

    Models whose name has no step are left out. Two names of one family at the same step
    (`step-100` and `step_100`) keep the first in name order: a step is one checkpoint.
    """
    out: dict[str, dict[int, str]] = defaultdict(dict)
    for m in sorted(models):
        fs = checkpoint_family_step(m, step_pattern)
        if fs is not None:
            out[fs[0]].setdefault(fs[1], m)
    return {fam: sorted(steps.items()) for fam, steps in sorted(out.items())}


def item_scores(store: Any, folder: str, model: str) -> dict[int, list[float | None]]:
    """problem_idx -> its repeat rewards (None for a failed sample) from the store."""
    t = store.read_shards(folder, model, columns=["problem_idx", "reward", "error"])
    out: dict[int, list[float | None]] = defaultdict(list)
    for idx, reward, err in zip(t.column("problem_idx").to_pylist(), t.column("reward").to_pylist(),
                                t.column("error").to_pylist(), strict=True):
        out[int(idx)].append(None if err is not None or reward is None else float(reward))
    return dict(out)


def _finite(x: Any) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else float(x)


def series_for(store: Any, benchmark: str, folder: str, family: str, points: Sequence[tuple[int, str]], *,
               alpha: float = DEFAULT_ALPHA, horizon: int = DEFAULT_HORIZON) -> TrendSeries:
    """The trend series of one benchmark and family from the store (checkpoints with a bundle)."""
    series = TrendSeries(benchmark, family)
    have = []
    for step, model in points:
        bundle = store.read_bundle(folder, model)
        if bundle is not None:
            have.append((step, model, bundle))
    for step, model, bundle in have:
        s = bundle.get("score") or {}
        series.rows.append({
            "benchmark": benchmark, "family": family, "step": step, "model": model,
            "score": _finite(s.get("mean")), "ci_low": _finite(s.get("ci_low")),
            "ci_high": _finite(s.get("ci_high")), "n": s.get("n_items"),
            "prev_step": None, "n_shared": None, "delta": None, "delta_se": None, "statistic": None,
            "step_noise": None, "cusum": None, "threshold": None, "alarm": None,
            "first_alarm_step": None, "note": None})
    if len(have) < 2:
        series.note = "one checkpoint so far: no step-to-step delta yet"
    else:
        try:
            res = checkpoint_alarm([(step, item_scores(store, folder, model)) for step, model, _ in have],
                                   alpha=alpha, horizon=horizon)
        except NelError as exc:
            series.note = str(exc)
        else:
            series.first_alarm_step, series.step_noise = res.first_alarm_step, res.step_noise
            for row, d in zip(series.rows, res.rows, strict=True):
                row.update(prev_step=d.prev_step, n_shared=d.n_shared, delta=d.delta, delta_se=d.se,
                           statistic=d.statistic, step_noise=res.step_noise, cusum=d.cusum,
                           threshold=res.threshold, alarm=d.alarm, first_alarm_step=res.first_alarm_step)
    for row in series.rows:
        row["note"] = series.note
    return series


def checkpoint_trends(store: Any, benchmarks: Sequence[tuple[str, str]], *, step_pattern: str | None = None,
                      models: Mapping[str, Iterable[str]] | None = None, alpha: float = DEFAULT_ALPHA,
                      horizon: int = DEFAULT_HORIZON) -> list[TrendSeries]:
    """Every (benchmark, family) checkpoint series in a result store.

    Args:
        store: The `ResultStore`.
        benchmarks: (benchmark name, store folder) pairs.
        step_pattern: `checkpoints.step_pattern` (a regex with one group), else the built-in
            step markers.
        models: Per folder, the model keys to consider (default: every model with results).
        alpha: The alarm's per-series false-alarm probability.
        horizon: The series length the alarm's threshold is calibrated for.

    Returns:
        One series per (benchmark, family) with at least one checkpoint bundle.
    """
    out = []
    for name, folder in benchmarks:
        keys = list(models[folder]) if models is not None and folder in models else store.models(folder)
        for family, points in checkpoint_families(keys, step_pattern).items():
            series = series_for(store, name, folder, family, points, alpha=alpha, horizon=horizon)
            if series.rows:
                out.append(series)
    return out


def trend_rows(series: Iterable[TrendSeries]) -> list[dict[str, Any]]:
    """The flat rows of several series (the `checkpoint_trends` table)."""
    return [row for s in series for row in s.rows]


def series_label(s: TrendSeries) -> str:
    """`benchmark` or `benchmark / family` (a bare `step-N` series has an empty family)."""
    return f"{s.benchmark} / {s.family}" if s.family else s.benchmark


def series_markdown(s: TrendSeries) -> str:
    """A markdown table of one series (scores and deltas in points)."""

    def pts(x: float | None, signed: bool = False) -> str:
        return "n/a" if x is None else (f"{100 * x:+.2f}" if signed else f"{100 * x:.2f}")

    lines = ["| step | model | score | 95% CI | n | Δ vs prev | SE | CUSUM | alarm |",
             "|---:|---|---:|---|---:|---:|---:|---:|---|"]
    for r in s.rows:
        lines.append(f"| {r['step']} | {r['model']} | {pts(r['score'])} | [{pts(r['ci_low'])}, "
                     f"{pts(r['ci_high'])}] | {r['n']} | {pts(r['delta'], True)} | {pts(r['delta_se'])} | "
                     f"{'n/a' if r['cusum'] is None else format(r['cusum'], '.2f')} | "
                     f"{'**ALARM**' if r['alarm'] else ''} |")
    noise = "n/a" if s.step_noise is None else f"{100 * s.step_noise:.2f} pts"
    first = "none" if s.first_alarm_step is None else f"step {s.first_alarm_step}"
    lines.append("")
    lines.append(f"Step-to-step noise (RMS paired SE): {noise}; first alarm: {first}."
                 + (f" {s.note}." if s.note else ""))
    return "\n".join(lines)


