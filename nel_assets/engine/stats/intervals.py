"""Confidence intervals of a mean score: clustered CLT/t, Wilson, and the one `score_interval`
every surface shows."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from nel_assets.engine.stats.units import (
    _as_float,
    _codes,
    _norm_ppf,
    _t_ppf,
    critical_value,
)


def mean_ci(values: Any, clusters: Any = None, level: float = 0.95) -> dict[str, Any]:
    """Mean with standard error and confidence interval, cluster-robust when asked.

    Args:
        values: One value per independent unit (e.g. per-question mean scores). Non-finite
            values are ignored (with their cluster labels).
        clusters: Optional cluster label per value; missing labels are singleton clusters.
        level: Confidence level.

    Returns:
        ``{mean, se, ci_low, ci_high, level, n, n_clusters, se_method, ci_dist, df}`` where
        ``se_method`` is ``"clt"`` (s/sqrt(n)) or ``"clustered"`` (CR1 sandwich),
        ``n_clusters`` is None when unclustered, ``ci_dist`` is ``"normal"`` or ``"t"``.
    """
    x = _as_float(values).reshape(-1)
    ok = np.isfinite(x)
    x = x[ok]
    n = int(x.shape[0])
    out: dict[str, Any] = {
        "mean": None,
        "se": None,
        "ci_low": None,
        "ci_high": None,
        "level": float(level),
        "n": n,
        "n_clusters": None,
        "se_method": "clt" if clusters is None else "clustered",
        "ci_dist": None,
        "df": None,
    }
    if n == 0:
        return out
    mean = float(x.mean())
    out["mean"] = mean
    if clusters is None:
        units = n
        se = float(x.std(ddof=1) / math.sqrt(n)) if n >= 2 else None
    else:
        labels = np.asarray(clusters)
        if labels.shape[0] != ok.shape[0]:
            raise ValueError("clusters must have one label per value")
        codes = _codes(labels[ok])
        g = int(codes.max()) + 1
        units = g
        out["n_clusters"] = g
        if g >= 2:
            csum = np.bincount(codes, weights=x - mean, minlength=g)
            se = math.sqrt(g / (g - 1) * float(np.dot(csum, csum))) / n
        else:
            se = None  # one cluster: no information about between-cluster variation
    if se is None:
        return out
    q, dist, df = critical_value(level, units)
    out.update(se=se, ci_low=mean - q * se, ci_high=mean + q * se, ci_dist=dist, df=df)
    return out


def wilson_ci(successes: Any, n: Any, level: float = 0.95) -> tuple[Any, Any]:
    """Wilson score interval for a binomial proportion (good coverage near 0 and 1).

    Args:
        successes: Number of successes (scalar or array).
        n: Number of trials (scalar or array); n = 0 gives NaN bounds.
        level: Confidence level.

    Returns:
        ``(low, high)`` as floats for scalar input, arrays otherwise.
    """
    s = np.asarray(successes, dtype=np.float64)
    m = np.asarray(n, dtype=np.float64)
    z = _norm_ppf(0.5 + level / 2.0)
    z2 = z * z
    with np.errstate(divide="ignore", invalid="ignore"):
        p = s / m
        denom = 1.0 + z2 / m
        center = (p + z2 / (2.0 * m)) / denom
        half = z / denom * np.sqrt(p * (1.0 - p) / m + z2 / (4.0 * m * m))
        lo = np.clip(center - half, 0.0, 1.0)
        hi = np.clip(center + half, 0.0, 1.0)
    if lo.ndim == 0:
        return float(lo), float(hi)
    return lo, hi


CI_METHODS = ("wilson", "wilson_effective_n", "t", "normal")
"""The labels ``score_interval`` records in ``ci_method`` (see the module docstring)."""


def _no_se_note(units: int, clustered: bool, no_variation: bool) -> str:
    if units < 2:
        return f"undefined (1 {'cluster' if clustered else 'item'})"
    if no_variation:
        return "undefined (no variation in the scores)"
    return "undefined (no variance between clusters)"


def score_interval(
    values: Any,
    clusters: Any = None,
    level: float = 0.95,
    *,
    n_samples: int | None = None,
) -> dict[str, Any]:
    """A score's mean, SE and the one CI every surface shows, with its method label.

    Args:
        values: One score per question (per-question means). Non-finite values are ignored.
        clusters: Optional cluster label per value (clustered SE; clusters are the units).
        level: Confidence level.
        n_samples: The number of 0/1 samples behind the values, when the rewards are 0/1:
            caps the effective n (a mean of 0/1 draws carries no more information than all
            of them). None for graded rewards, whose variance can be far below p(1 − p).

    Returns:
        ``{mean, se, se_note, ci_low, ci_high, ci_method, ci_n_eff, ci_spec, ci_note, level,
        n, n_clusters, se_method, ci_dist, df}``. ``ci_method`` is one of ``CI_METHODS``
        (None with no items); ``ci_n_eff`` is the Wilson n used (None for t/normal) and
        ``ci_spec`` what ``wilson_at`` needs to rebuild the interval at another level;
        ``ci_note`` says when the interval fell back to n = questions because the SE was not
        estimable; ``se_note`` why ``se`` is None.
    """
    x = _as_float(values).reshape(-1)
    res = mean_ci(values, clusters, level)
    res.update(se_note=None, ci_method=None, ci_n_eff=None, ci_note=None, ci_spec=None)
    n = res["n"]
    if n == 0:
        res["se_note"] = res["ci_note"] = "undefined (no scored items)"
        return res
    x = x[np.isfinite(x)]
    units = res["n_clusters"] if res["n_clusters"] is not None else n
    no_variation = bool(np.all(x == x[0]))
    if res["se"] is not None and res["se"] == 0.0:  # a plug-in SE of 0 claims certainty
        res.update(se=None, ci_low=None, ci_high=None)
    if res["se"] is None:
        res["se_note"] = _no_se_note(units, res["n_clusters"] is not None, no_variation)
    in_unit = float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    if not in_unit:
        res["ci_method"] = res["ci_dist"]
        if res["se"] is None:
            res["ci_note"] = res["se_note"]
        return res
    p = float(res["mean"])
    if res["n_clusters"] is None and bool(np.all((x == 0.0) | (x == 1.0))):
        # Every question scored 0 or 1 (one sample each, or all repeats agreeing): each
        # question is one Bernoulli trial, so the textbook Wilson interval is exact in form.
        spec = {"mean": p, "n_raw": float(n), "df": None, "cap": None}
        method, note = "wilson", None
        res.update(ci_dist="normal", df=None)
    else:
        method = "wilson_effective_n"
        se = res["se"]
        if se is not None and se > 0.0 and 0.0 < p < 1.0:
            spec = {"mean": p, "n_raw": p * (1.0 - p) / (se * se), "df": res["df"],
                    "cap": None if n_samples is None else float(n_samples)}
            note = None
        else:
            # No usable SE (one unit, or no variation): each unit counts as one 0/1 trial,
            # the largest variance a score in [0, 1] with this mean can have.
            spec = {"mean": p, "n_raw": float(units), "df": None, "cap": None}
            unit = "clusters" if res["n_clusters"] is not None else "items"
            note = f"SE not estimable; Wilson interval with n = {units} {unit}"
    lo, hi, n_eff = wilson_at(spec, level)
    res.update(ci_low=lo, ci_high=hi, ci_method=method, ci_n_eff=n_eff, ci_note=note,
               ci_spec=spec)
    return res


def wilson_at(spec: Mapping[str, Any], level: float) -> tuple[float, float, float]:
    """The Wilson interval a ``score_interval`` ``ci_spec`` gives at any confidence level.

    Lets a gate rebuild the same interval at a multiplicity-corrected level.

    Args:
        spec: ``{mean, n_raw, df, cap}``: the estimate, the effective n before the
            small-sample factor, the t degrees of freedom for that factor (None: none) and
            the cap on n (None: none).
        level: Confidence level.

    Returns:
        ``(low, high, n_eff)``.
    """
    p = 0.5 + level / 2.0
    n_eff = float(spec["n_raw"])
    if spec.get("df"):  # Korn & Graubard (1998): few units, scale n by (z / t_df)²
        n_eff *= (_norm_ppf(p) / _t_ppf(p, spec["df"])) ** 2
    if spec.get("cap") is not None:
        n_eff = min(n_eff, float(spec["cap"]))
    lo, hi = wilson_ci(float(spec["mean"]) * n_eff, n_eff, level)
    return lo, hi, n_eff
