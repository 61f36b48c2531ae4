"""How two runs differ in cost: per-sample latency and token distributions, with Welch CIs.

Part of a comparison next to the paired score delta (``compare_scores``); no Dagster import.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from scipy import stats as _st

from nel_assets.engine.stats.units import _as_float, _f

__all__ = ["runtime_delta"]


def _dist(x: np.ndarray) -> dict[str, Any]:
    if x.size == 0:
        return {"n": 0, "mean": None, "median": None, "p90": None, "p95": None, "p99": None}
    q = np.quantile(x, [0.5, 0.9, 0.95, 0.99])
    return {
        "n": int(x.size),
        "mean": _f(x.mean()),
        "median": _f(q[0]),
        "p90": _f(q[1]),
        "p95": _f(q[2]),
        "p99": _f(q[3]),
    }


def _rel(new: float | None, old: float | None) -> float | None:
    if new is None or old is None or old == 0:
        return None
    return _f(new / old - 1.0)


def _sub(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else _f(a - b)


def _welch(a: np.ndarray, b: np.ndarray, level: float) -> tuple[float | None, float | None]:
    """Welch CI for mean(b) − mean(a): the runs' samples are independent, not paired."""
    if a.size < 2 or b.size < 2:
        return None, None
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    se = math.sqrt(va + vb)
    if se == 0:
        return None, None
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    q = float(_st.t.ppf(0.5 + level / 2.0, df))
    diff = float(b.mean() - a.mean())
    return diff - q * se, diff + q * se


def runtime_delta(
    base_runtime: Mapping[str, Any], cand_runtime: Mapping[str, Any], *, level: float = 0.95
) -> dict[str, Any]:
    """Latency / token / throughput deltas between two runs (cand − base).

    Args:
        base_runtime: Per-sample arrays by metric name, e.g. ``{"model_ms": [...],
            "completion_tokens": [...]}`` (NaN/None ignored; failed requests included or not
            as the caller decides). Every numeric metric present on both sides is compared.
        cand_runtime: Same for the candidate.
        level: Level of the Welch CI on the mean difference.

    Returns:
        ``{<metric>: {base: dist, cand: dist, delta_mean, delta_median, rel_delta_mean,
        rel_delta_median, ci_low, ci_high}, ..., "tokens_per_s": {...}}`` where ``dist`` is
        ``{n, mean, median, p90, p95, p99}``. ``tokens_per_s`` (when both sides have
        ``completion_tokens`` and ``model_ms``) is per-request decode throughput:
        ``{base, cand, delta, rel_delta}`` from Σ tokens / Σ seconds (a token-weighted
        rate, robust to tiny requests) plus per-request medians
        ``base_median, cand_median``.
    """
    out: dict[str, Any] = {}
    for name in sorted(set(base_runtime) & set(cand_runtime)):
        a, b = _as_float(base_runtime[name]).reshape(-1), _as_float(cand_runtime[name]).reshape(-1)
        a, b = a[np.isfinite(a)], b[np.isfinite(b)]
        da, db = _dist(a), _dist(b)
        lo, hi = _welch(a, b, level)
        out[name] = {
            "base": da,
            "cand": db,
            "delta_mean": _sub(db["mean"], da["mean"]),
            "delta_median": _sub(db["median"], da["median"]),
            "rel_delta_mean": _rel(db["mean"], da["mean"]),
            "rel_delta_median": _rel(db["median"], da["median"]),
            "ci_low": _f(lo),
            "ci_high": _f(hi),
        }
    need = ("completion_tokens", "model_ms")
    if all(k in base_runtime and k in cand_runtime for k in need):
        rates = []
        for side in (base_runtime, cand_runtime):
            tok = _as_float(side["completion_tokens"]).reshape(-1)
            ms = _as_float(side["model_ms"]).reshape(-1)
            good = np.isfinite(tok) & np.isfinite(ms) & (ms > 0)
            tot_s = ms[good].sum() / 1000.0
            agg = _f(tok[good].sum() / tot_s) if tot_s > 0 else None
            med = _f(np.median(tok[good] / (ms[good] / 1000.0))) if good.any() else None
            rates.append((agg, med))
        (ba, bm), (ca, cm) = rates
        out["tokens_per_s"] = {
            "base": ba,
            "cand": ca,
            "delta": _sub(ca, ba),
            "rel_delta": _rel(ca, ba),
            "base_median": bm,
            "cand_median": cm,
        }
    return out
