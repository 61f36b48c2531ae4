"""The seeded percentile bootstrap, for statistics that are not means."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nel_assets.engine.stats.units import _f


def bootstrap_ci(
    statistic: Callable[..., Any],
    data: Any,
    n_resamples: int = 10_000,
    seed: int = 0,
    level: float = 0.95,
    *,
    max_block: int = 4_000_000,
) -> dict[str, Any]:
    """Seeded percentile bootstrap for statistics that are not means (median, ratios, …).

    For means use ``mean_ci``: its analytic SE is exact and cheaper. The statistic is called
    on whole blocks of resamples at once (vectorised), so it must accept an array of shape
    ``(B, n, ...)`` and an ``axis=1`` keyword and return shape ``(B,)`` — e.g.
    ``np.median``. Rows of ``data`` (axis 0) are resampled with replacement.

    Args:
        statistic: ``f(x, axis=...)`` reducing along ``axis``.
        data: Array of n rows.
        n_resamples: Number of bootstrap resamples.
        seed: RNG seed (unseeded bootstraps are not reproducible, so a seed is required).
        level: Confidence level.
        max_block: Upper bound on elements materialised per block (memory cap).

    Returns:
        ``{estimate, se, ci_low, ci_high, level, n, n_resamples, seed, method}``; ``se`` is
        the SD of the bootstrap distribution (that *is* the bootstrap SE).
    """
    x = np.asarray(data)
    n = int(x.shape[0])
    base: dict[str, Any] = {
        "estimate": None,
        "se": None,
        "ci_low": None,
        "ci_high": None,
        "level": float(level),
        "n": n,
        "n_resamples": int(n_resamples),
        "seed": int(seed),
        "method": "percentile",
    }
    if n == 0:
        return base
    base["estimate"] = _f(np.asarray(statistic(x[None, ...], axis=1)).reshape(-1)[0])
    rng = np.random.default_rng(seed)
    row_size = max(1, int(np.prod(x.shape[1:], dtype=np.int64)))
    block = max(1, max_block // (n * row_size))
    stats_out = np.empty(n_resamples)
    for s in range(0, n_resamples, block):
        b = min(block, n_resamples - s)
        idx = rng.integers(0, n, size=(b, n))
        stats_out[s : s + b] = np.asarray(statistic(x[idx], axis=1), dtype=np.float64)
    alpha = 1.0 - level
    lo, hi = np.quantile(stats_out, [alpha / 2.0, 1.0 - alpha / 2.0])
    base.update(se=_f(stats_out.std(ddof=1)), ci_low=_f(lo), ci_high=_f(hi))
    return base
