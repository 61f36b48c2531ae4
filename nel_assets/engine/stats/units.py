"""The units of analysis: rows grouped by question, label codes and critical values.

The helpers every statistic in this package starts from (see the package docstring for the
choices). Plain numpy; scipy only for t quantiles, imported when first needed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

# scipy.stats costs ~0.5 s to import; the bundle path only needs normal quantiles (stdlib,
# accurate to ~1e-16) and t quantiles (scipy.special, imported when first needed).
_NORMAL = NormalDist()


def _norm_ppf(p: float) -> float:
    return _NORMAL.inv_cdf(p)


def _t_ppf(p: float, df: float) -> float:
    from scipy.special import stdtrit

    return float(stdtrit(df, p))

NORMAL_MIN_UNITS = 30
"""Independent units (questions, or clusters) from which the normal quantile replaces t."""

_NONE_LABEL = "(none)"


# --------------------------------------------------------------------------- helpers


def _f(x: Any) -> float | None:
    """A plain float, or None for NaN/inf/None (JSON has no NaN)."""
    if x is None:
        return None
    v = float(x)
    return v if math.isfinite(v) else None


def _as_float(a: Any) -> np.ndarray:
    """Rewards as float64 with None -> NaN (Arrow nulls arrive as None in object arrays)."""
    arr = np.asarray(a)
    if arr.dtype == object:
        return np.array([np.nan if v is None else float(v) for v in arr], dtype=np.float64)
    return arr.astype(np.float64, copy=False)


def _is_missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


# The types a missing label can have (None, or a NaN float); a column with neither has no
# missing label, which lets the label passes below skip their per-value checks.
_MISSING_TYPES = frozenset({type(None), float, np.float64, np.float32, np.float16})


def _codes(labels: Any, *, singleton_missing: bool = True) -> np.ndarray:
    """Integer codes 0..G-1 for arbitrary labels.

    Missing labels (None/NaN) each get their own code when ``singleton_missing`` (an item
    without a cluster is its own cluster: assuming it shares one would be an invention).
    """
    arr = np.asarray(labels)
    if arr.dtype.kind in "iub" or (arr.dtype.kind in "U" and arr.size):
        return np.unique(arr, return_inverse=True)[1].reshape(-1).astype(np.int64)
    if arr.dtype.kind == "f":
        miss = np.isnan(arr)
        codes = np.empty(arr.shape[0], dtype=np.int64)
        if (~miss).any():
            codes[~miss] = np.unique(arr[~miss], return_inverse=True)[1].reshape(-1)
        start = int(codes[~miss].max()) + 1 if (~miss).any() else 0
        codes[miss] = start + np.arange(int(miss.sum())) if singleton_missing else start
        return codes
    # object arrays (mixed / None): a dict pass is O(n) and robust to unorderable types
    values = arr.tolist()
    table: dict[Any, int] = {}
    if not _MISSING_TYPES & set(map(type, values)):
        # No None or float (so no NaN): codes by first appearance in one C-level pass
        # (setdefault), the same codes as the loop below gives.
        # (np.fromiter, not a list: a list of a million codes held a Python int per row, 36 MB)
        return np.fromiter((table.setdefault(v, len(table)) for v in values), dtype=np.int64,
                           count=len(values))
    out = np.empty(arr.shape[0], dtype=np.int64)
    nxt = 0
    missing_code = -1
    for i, v in enumerate(values):
        if _is_missing(v):
            if singleton_missing:
                out[i] = -1 - i  # unique negative placeholder, remapped below
                continue
            if missing_code < 0:
                missing_code = nxt
                nxt += 1
            out[i] = missing_code
            continue
        c = table.get(v)
        if c is None:
            c = table[v] = nxt
            nxt += 1
        out[i] = c
    neg = out < 0
    if neg.any():
        out[neg] = nxt + np.arange(int(neg.sum()))
    return out


def _label_list(labels: np.ndarray) -> list[Any]:
    """Labels as JSON-friendly Python objects (numpy scalars -> Python; NaN -> None)."""
    values = np.asarray(labels, dtype=object).tolist()
    if set(map(type, values)) <= {str, int}:
        return values  # nothing to convert (the usual ids and labels)
    out = []
    for v in values:
        if _is_missing(v):
            out.append(None)
        elif isinstance(v, np.generic):
            out.append(v.item())
        else:
            out.append(v)
    return out


def _group(problem_idx: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unique question ids, row -> question index, and each question's first row."""
    pid = np.asarray(problem_idx)
    if pid.dtype == object:
        pid = pid.astype(str)
    if pid.ndim == 1 and pid.dtype.kind in "iu" and pid.size and bool(np.all(pid[1:] >= pid[:-1])):
        # Already in order (a store's rows are, by question): the groups are the runs of equal
        # ids, without np.unique's sort and its row-sized temporaries (~40 MB at 1M rows).
        # The same three arrays np.unique gives.
        starts = np.flatnonzero(pid[1:] != pid[:-1]) + 1
        first = np.concatenate(([0], starts)).astype(np.intp)
        inv = np.repeat(np.arange(first.size, dtype=np.intp), np.diff(np.append(first, pid.size)))
        return pid[first], inv, first
    ids, first, inv = np.unique(pid, return_index=True, return_inverse=True)
    return ids, inv.reshape(-1), first


@dataclass(frozen=True)
class _ItemSums:
    """Rows grouped by question: the sums every per-question statistic starts from.

    ``r`` holds the rewards as floats (NaN = failed), ``inv`` maps each row to its question,
    ``first`` is each question's first row, ``cnt`` / ``s1`` are each question's number and
    sum of valid rewards, and ``keep`` marks questions with at least one valid reward.
    """

    r: np.ndarray
    ids: np.ndarray
    inv: np.ndarray
    first: np.ndarray
    valid: np.ndarray
    cnt: np.ndarray
    s1: np.ndarray
    keep: np.ndarray

    @property
    def g(self) -> int:
        """Number of distinct questions (valid reward or not)."""
        return int(self.ids.shape[0])


def _item_sums(problem_idx: Any, reward: Any) -> _ItemSums:
    """Group rewards by question (one pass of ``np.unique`` and two ``bincount``)."""
    r = _as_float(reward)
    ids, inv, first = _group(problem_idx)
    valid = np.isfinite(r)
    g = ids.shape[0]
    cnt = np.bincount(inv[valid], minlength=g)
    s1 = np.bincount(inv[valid], weights=r[valid], minlength=g)
    return _ItemSums(r, ids, inv, first, valid, cnt, s1, cnt > 0)


def critical_value(level: float, units: int) -> tuple[float, str, int | None]:
    """Two-sided critical value for a CI at ``level`` from ``units`` independent units.

    Args:
        level: Confidence level, e.g. 0.95.
        units: Number of independent units (questions, or clusters when clustered).

    Returns:
        ``(q, dist, df)``: the quantile, ``"normal"`` or ``"t"``, and the t degrees of
        freedom (None for normal).
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    p = 0.5 + level / 2.0
    if units >= NORMAL_MIN_UNITS or units < 2:
        return _norm_ppf(p), "normal", None
    df = units - 1
    return _t_ppf(p, df), "t", df


def is_binary(values: Any) -> bool:
    """True when every finite value is exactly 0 or 1 (and there is at least one)."""
    v = _as_float(values)
    v = v[np.isfinite(v)]
    return bool(v.size) and bool(np.all((v == 0.0) | (v == 1.0)))


# --------------------------------------------------------------------------- core


def item_means(
    problem_idx: np.ndarray, reward: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Average each question's repeats (Miller: the question is the unit, not the sample).

    Failed requests (NaN rewards) are excluded from their question's mean; questions with no
    valid sample are dropped. Use ``score_summary`` for the counts of both.

    Args:
        problem_idx: Question id per sample row.
        reward: Reward per row; NaN marks a failed request.

    Returns:
        ``(ids, means, counts)``: sorted question ids with ≥1 valid sample, their mean
        reward, and their number of valid samples.
    """
    r = _as_float(reward)
    ids, inv, _ = _group(problem_idx)
    valid = np.isfinite(r)
    g = ids.shape[0]
    counts = np.bincount(inv[valid], minlength=g)
    sums = np.bincount(inv[valid], weights=r[valid], minlength=g)
    keep = counts > 0
    return ids[keep], sums[keep] / counts[keep], counts[keep]


def _default_ks(kmax: int) -> list[int]:
    ks = []
    k = 1
    while k <= kmax:
        ks.append(k)
        k *= 2
    if kmax >= 1 and kmax not in ks:
        ks.append(kmax)
    return ks


def _item_labels(labels: Any, first_rows: np.ndarray, keep: np.ndarray) -> np.ndarray | None:
    if labels is None:
        return None
    arr = np.asarray(labels, dtype=object)
    return arr[first_rows][keep]

