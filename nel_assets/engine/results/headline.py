"""What a bundle's headline `score` measures, and the configured metrics reported beside it.

The rows' `reward`, and so the bundle's `score`, is one metric of the benchmark's scoring
block: `scoring.primary` as the config reader set it (see nel_resources.config.headline).
Every surface that prints the score names that metric and shows the others next to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def headline_metric(bundle: Mapping[str, Any]) -> str | None:
    """The metric the bundle's `score` is (`default`: the benchmark's own scorer), or None
    for a run without configured metrics."""
    return (bundle.get("scoring") or {}).get("primary")


def beside_metrics(bundle: Mapping[str, Any]) -> dict[str, float]:
    """`{metric: mean}` of the configured metrics other than the headline one, `default`
    (the benchmark's own scorer) first."""
    primary = headline_metric(bundle)
    metrics = (bundle.get("scoring") or {}).get("metrics") or {}
    names = sorted((n for n in metrics if n != primary), key=lambda n: (n != "default", n))
    return {n: float(metrics[n]["mean"]) for n in names if metrics[n].get("mean") is not None}


def headline_note(bundle: Mapping[str, Any], *, percent: bool = True) -> str | None:
    """One line such as `score = mcq_extract; beside it: default 40.00%`, or None when the
    bundle has no configured metrics."""
    primary = headline_metric(bundle)
    if primary is None:
        return None
    others = beside_metrics(bundle)

    def fmt(x: float) -> str:
        return f"{100 * x:.2f}%" if percent else f"{x:.4f}"

    shown = ", ".join(f"{n} {fmt(v)}" for n, v in others.items())
    return f"score = {primary}" + (f"; beside it: {shown}" if shown else "")
