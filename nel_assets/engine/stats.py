"""Scores with honest error bars: the pure, vectorised statistics behind every bundle.

The bar is Miller, "Adding Error Bars to Evals" (2024):

* The unit of analysis is the *question*. With K repeats, a question's K samples are averaged
  first and the standard error is taken over questions, never over n·K draws as if they were
  independent (that would shrink the SE by up to sqrt(K) for no reason).
* When questions share a cluster (a passage, a translated item, a category) the SE is
  cluster-robust, because correlated questions carry less information than independent ones.
* A failed request (reward NaN/null) is missing data, not a wrong answer: it is left out of
  its question's mean and counted. A question with no valid sample is dropped and counted.

Every public function returns plain Python floats/ints (``None`` instead of NaN) so results
go straight into JSON, Parquet metadata or the Dagster UI. No Dagster import here.

Choices, with reasons:

* **Clustered SE** (``mean_ci``): the sandwich over cluster sums of residuals,
  ``SE² = G/(G−1) · (1/n²) · Σ_c (Σ_{i∈c} (x_i − x̄))²`` (CR1). The small-sample factor
  ``G/(G−1)`` is applied because (a) without it the SE is biased low for a modest number of
  clusters, (b) with it, singleton clusters reproduce the ordinary ``s/sqrt(n)`` exactly, so
  clustering never changes the answer when it should not, and (c) it equals statsmodels'
  OLS cluster-robust SE of an intercept-only model, a widely used reference.
* **Critical value**: the normal quantile when the number of independent units (questions,
  or clusters when clustered) is ≥ 30; Student's t with (units − 1) degrees of freedom
  otherwise, because the SE itself is noisy with few units and the normal interval
  undercovers there.
* **pass@k** uses the unbiased estimator of Chen et al. (2021), computed as a product of
  ratios (no large binomial coefficients, no overflow). It needs binary rewards.
* **Score intervals** (``score_interval``): one method per score, chosen once and labelled in
  ``ci_method``, so every surface (CLI, reports, Dagster metadata, the ``bundles`` view)
  shows the same numbers. Scores in [0, 1] get a Wilson score interval (Wilson 1927), which
  stays inside [0, 1] and never collapses to a point at 0 or 1:

  - ``"wilson"``: every question scored exactly 0 or 1 (one sample each, or repeats that
    all agree) and no clusters. The textbook Wilson interval with n = the number of
    questions: each question is one Bernoulli trial.
  - ``"wilson_effective_n"``: per-question means in [0, 1] (repeats, graded rewards, or
    clustered questions). The Wilson interval at the effective sample size
    ``n_eff = p̂(1 − p̂) / SE²`` with Miller's question-level (or clustered) SE, i.e. the
    number of independent 0/1 trials that would give the same SE (Korn & Graubard 1998).
    With fewer than 30 units ``n_eff`` is scaled by ``(z / t_{df})²`` (their small-sample
    adjustment, the analogue of using t instead of z). For 0/1 rewards it is capped at the
    number of scored samples (a mean of 0/1 draws never carries more information than all
    of them). When the
    SE is not estimable — one question, one cluster, or no variation at all (every
    question scored 0, or every one 1) — ``n_eff`` is the number of questions (clusters):
    each counts as one 0/1 trial. That is conservative because a score in [0, 1] with mean
    p has variance ≤ p(1 − p), the Bernoulli variance.
  - ``"t"`` / ``"normal"``: scores outside [0, 1] (unbounded rewards) keep the mean ± q·SE
    interval of ``mean_ci``.

  ``se`` stays the question-level (or clustered) SE; it is None, with ``se_note`` saying
  why, when it is not estimable (fewer than two units, or no variation in the scores: a
  plug-in SE of 0 would claim certainty the data cannot give).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
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

__all__ = [
    "CI_METHODS",
    "NORMAL_MIN_UNITS",
    "bootstrap_ci",
    "critical_value",
    "is_binary",
    "item_means",
    "item_table",
    "maj_at_k",
    "mean_ci",
    "pass_at_k",
    "pass_at_k_table",
    "per_category",
    "repeat_variance",
    "score_interval",
    "score_summary",
    "wilson_at",
    "wilson_ci",
]

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
        return np.array([table.setdefault(v, len(table)) for v in values], dtype=np.int64)
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


# --------------------------------------------------------------------------- pass@k / maj@k


def pass_at_k(n: Any, c: Any, k: Any) -> Any:
    """Unbiased pass@k: ``1 − C(n−c, k) / C(n, k)``, vectorised and overflow-free.

    The ratio is evaluated as ``Π_{j=0}^{k−1} (n−c−j)/(n−j)``: every factor is in [0, 1],
    so there is no overflow and the relative error is about k·eps.

    Args:
        n: Samples per question (broadcastable).
        c: Correct samples per question.
        k: k (1 ≤ k); entries with k > n give NaN (not estimable).

    Returns:
        Float or array of pass@k estimates.
    """
    nb, cb, kb = np.broadcast_arrays(
        np.asarray(n, dtype=np.int64), np.asarray(c, dtype=np.int64), np.asarray(k, dtype=np.int64)
    )
    shape = nb.shape
    nf, cf, kf = nb.reshape(-1), cb.reshape(-1), kb.reshape(-1)
    if np.any(cf < 0) or np.any(cf > nf) or np.any(kf < 1):
        raise ValueError("pass_at_k needs 0 <= c <= n and k >= 1")
    out = np.full(nf.shape[0], np.nan)
    ok = kf <= nf
    if ok.any():
        kmax = int(kf[ok].max())
        idx = np.flatnonzero(ok)
        # chunk rows so the (rows × kmax) factor matrix stays ~4M floats
        step = max(1, 4_000_000 // kmax)
        j = np.arange(kmax, dtype=np.float64)
        for s in range(0, idx.shape[0], step):
            sel = idx[s : s + step]
            nn = nf[sel, None].astype(np.float64)
            fail = (nf[sel] - cf[sel])[:, None].astype(np.float64)
            active = j[None, :] < kf[sel, None]
            num = np.maximum(fail - j, 0.0)
            den = np.where(active, nn - j, 1.0)
            ratio = np.where(active, num / den, 1.0).prod(axis=1)
            out[sel] = 1.0 - ratio
    out = out.reshape(shape)
    return float(out) if out.ndim == 0 else out


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


def pass_at_k_table(
    problem_idx: Any,
    correct: Any,
    ks: Sequence[int] | None = None,
    *,
    cluster: Any = None,
    level: float = 0.95,
) -> dict[str, dict[str, Any]]:
    """pass@k for several k: mean over questions with SE and CI over questions.

    Args:
        problem_idx: Question id per sample row.
        correct: 0/1 (or bool) per row; NaN marks a failed request (excluded).
        ks: The k values. Default: 1, 2, 4, 8, … up to the largest number of valid samples
            a question has (the run's repeat count), plus that number itself. Questions with
            fewer than k valid samples (some requests failed) cannot estimate pass@k and are
            left out of that row; its ``n_items`` says how many remain, so a row computed on
            fewer questions is visible rather than silently dropped. (Capping k at the
            *smallest* count instead would let one failed request erase pass@K entirely.)
        cluster: Optional cluster label per row (a question's first row decides); when
            given, the SE is clustered.
        level: Confidence level.

    Returns:
        ``{"<k>": {k, mean, se, ci_low, ci_high, n_items, se_method, ci_method}}``; the
        interval is ``score_interval``'s.
    """
    r = _as_float(correct)
    ids, inv, first = _group(problem_idx)
    valid = np.isfinite(r)
    g = ids.shape[0]
    n_i = np.bincount(inv[valid], minlength=g)
    c_i = np.bincount(inv[valid], weights=(r[valid] > 0.5).astype(np.float64), minlength=g)
    keep = n_i > 0
    n_i, c_i = n_i[keep], np.rint(c_i[keep]).astype(np.int64)
    clus = _item_labels(cluster, first, keep)
    if n_i.size == 0:
        return {}
    if ks is None:
        ks = _default_ks(int(n_i.max()))
    table: dict[str, dict[str, Any]] = {}
    for k in sorted({int(k) for k in ks}):
        if k < 1:
            continue
        use = n_i >= k
        vals = pass_at_k(n_i[use], c_i[use], k) if use.any() else np.array([])
        res = score_interval(vals, None if clus is None else clus[use], level)
        table[str(k)] = {
            "k": k,
            "mean": res["mean"],
            "se": res["se"],
            "ci_low": res["ci_low"],
            "ci_high": res["ci_high"],
            "n_items": int(use.sum()),
            "se_method": res["se_method"],
            "ci_method": res["ci_method"],
        }
    return table


def maj_at_k(
    problem_idx: Any,
    extracted: Any,
    correct_flags: Any,
    ks: Sequence[int],
    *,
    repeat: Any = None,
    cluster: Any = None,
    level: float = 0.95,
) -> dict[str, dict[str, Any]]:
    """maj@k: a question counts as solved when the majority answer of k samples is correct.

    Rules (deterministic, so two runs of the same data agree):

    * Samples are taken in repeat order (``repeat`` if given, else row order within a
      question); failed requests (NaN ``correct_flags``) are skipped, so "the first k" means
      the first k *valid* samples. Questions with fewer than k valid samples are left out of
      that k (``n_items`` reports how many remain).
    * A sample with no extracted answer (None or "") abstains; if every one of the k samples
      abstains, the question scores 0.
    * Ties between answers with equal votes go to the answer that appeared first (earliest
      repeat), i.e. the one the model committed to first.
    * The majority answer's correctness is the mean correctness of the samples that gave it
      (identical answers are normally scored identically, so this is 0 or 1).

    Args:
        problem_idx: Question id per row.
        extracted: Extracted answer per row (strings; None = no answer).
        correct_flags: 0/1 per row, NaN for failed requests.
        ks: The k values.
        repeat: Optional repeat index per row, used for ordering.
        cluster: Optional cluster per row (first row of a question decides).
        level: Confidence level.

    Returns:
        ``{"<k>": {k, mean, se, ci_low, ci_high, n_items, se_method, ci_method}}``; the
        interval is ``score_interval``'s.
    """
    corr = _as_float(correct_flags)
    ids, inv, first = _group(problem_idx)
    ext = np.asarray(extracted, dtype=object)
    order_key = np.arange(inv.shape[0]) if repeat is None else np.asarray(repeat, dtype=np.float64)
    valid = np.isfinite(corr)
    rows = np.flatnonzero(valid)
    # sort valid rows by (question, repeat order, original position) - lexsort: last key major
    rows = rows[np.lexsort((rows, order_key[rows], inv[rows]))]
    q = inv[rows]
    g = ids.shape[0]
    n_valid = np.bincount(q, minlength=g)
    starts = np.concatenate(([0], np.cumsum(n_valid)[:-1]))
    rank = np.arange(rows.shape[0]) - starts[q]
    answers = ext[rows]
    if {type(a) for a in answers.tolist()} <= {str}:
        # Only strings (the usual extracted column): one vectorised comparison, and str()
        # of a str is itself.
        votes = np.asarray(answers != "", dtype=bool).reshape(-1)
        voted = answers[votes]
    else:
        votes = np.array(
            [not (a is None or a == "" or _is_missing(a)) for a in answers.tolist()], dtype=bool
        )
        voted = np.array([str(a) for a in answers[votes]], dtype=object)
    acode = np.full(rows.shape[0], -1, dtype=np.int64)
    if votes.any():
        acode[votes] = _codes(voted)
    n_ans = int(acode.max()) + 1 if votes.any() else 1
    pair_all = q.astype(np.int64) * n_ans + acode
    c_rows = corr[rows]
    item_clus = None if cluster is None else np.asarray(cluster, dtype=object)[first]

    out: dict[str, dict[str, Any]] = {}
    for k in sorted({int(k) for k in ks}):
        if k < 1:
            continue
        eligible = n_valid >= k
        score = np.zeros(g)
        sel = (rank < k) & votes
        if sel.any():
            pairs, pinv, counts = np.unique(pair_all[sel], return_inverse=True, return_counts=True)
            pinv = pinv.reshape(-1)
            first_rank = np.full(pairs.shape[0], np.iinfo(np.int64).max)
            np.minimum.at(first_rank, pinv, rank[sel])
            pcorr = np.bincount(pinv, weights=c_rows[sel], minlength=pairs.shape[0]) / counts
            pq = pairs // n_ans
            # winner per question: most votes, then earliest first appearance
            o = np.lexsort((first_rank, -counts, pq))
            is_first = np.ones(o.shape[0], dtype=bool)
            is_first[1:] = pq[o][1:] != pq[o][:-1]
            win = o[is_first]
            score[pq[win]] = pcorr[win]
        res = score_interval(
            score[eligible], None if item_clus is None else item_clus[eligible], level
        )
        out[str(k)] = {
            "k": k,
            "mean": res["mean"],
            "se": res["se"],
            "ci_low": res["ci_low"],
            "ci_high": res["ci_high"],
            "n_items": int(eligible.sum()),
            "se_method": res["se_method"],
            "ci_method": res["ci_method"],
        }
    return out


# --------------------------------------------------------------------------- repeats


def repeat_variance(
    problem_idx: Any,
    reward: Any,
    ks: Sequence[int] = (1, 2, 4, 8, 16, 32),
) -> dict[str, Any]:
    """How much of the SE comes from sampling noise, and what more repeats would buy.

    Miller's decomposition for n questions with K repeats each:
    ``Var(x̄) = (σ²_between + σ²_within / K) / n``. σ²_within is the mean over questions of
    the unbiased within-question variance (ddof=1, questions with ≥ 2 valid samples);
    σ²_between = Var(question means) − σ²_within / K̃ (floored at 0), with K̃ the harmonic
    mean of the questions' sample counts (exact when all questions have K samples).

    Args:
        problem_idx: Question id per row.
        reward: Reward per row (NaN = failed, excluded).
        ks: Repeat counts K' to project the SE for.

    Returns:
        ``{n_items, k_current, within_var, between_var, item_mean_var, se_current,
        within_share, se_by_repeats: {"<K'>": se, ..., "inf": se}}``. Variance fields are
        None when no question has ≥ 2 valid samples (single-sample runs cannot separate the
        two parts).
    """
    it = _item_sums(problem_idx, reward)
    r, inv, valid, g, cnt, s1, keep = it.r, it.inv, it.valid, it.g, it.cnt, it.s1, it.keep
    n = int(keep.sum())
    out: dict[str, Any] = {
        "n_items": n,
        "k_current": None,
        "within_var": None,
        "between_var": None,
        "item_mean_var": None,
        "se_current": None,
        "within_share": None,
        "se_by_repeats": {},
    }
    if n < 2:
        return out
    means = s1[keep] / cnt[keep]
    item_var = float(means.var(ddof=1))
    out["item_mean_var"] = item_var
    out["se_current"] = math.sqrt(item_var / n)
    multi = cnt >= 2
    if not multi.any():
        return out
    # within-question variance via deviations from each question's own mean (two-pass:
    # the one-pass E[x²]−E[x]² form loses precision for rewards near a constant)
    mu = np.zeros(g)
    mu[keep] = s1[keep] / cnt[keep]
    dev = r[valid] - mu[inv[valid]]
    ss = np.bincount(inv[valid], weights=dev * dev, minlength=g)
    wv = ss[multi] / (cnt[multi] - 1)
    within = float(wv.mean())
    k_h = float(n / np.sum(1.0 / cnt[keep]))
    between = max(item_var - within / k_h, 0.0)
    out.update(
        k_current=k_h,
        within_var=within,
        between_var=between,
        within_share=_f(min(within / k_h / item_var, 1.0)) if item_var > 0 else None,
    )
    proj = {str(int(k)): math.sqrt((between + within / k) / n) for k in ks if int(k) >= 1}
    proj["inf"] = math.sqrt(between / n)
    out["se_by_repeats"] = proj
    return out


# --------------------------------------------------------------------------- summaries


def item_table(
    problem_idx: Any,
    reward: Any,
    *,
    cluster: Any = None,
    category: Any = None,
) -> dict[str, Any]:
    """Per-question scores in the form ``compare.compare_scores`` takes (JSON-ready lists).

    Args:
        problem_idx: Question id per row.
        reward: Reward per row (NaN = failed).
        cluster: Optional cluster per row (a question's first row decides).
        category: Optional category per row (a question's first row decides).

    Returns:
        ``{items, scores, n_samples, item_var, clusters, categories, binary, pass_frac}``;
        ``item_var`` is each question's unbiased within-question reward variance (None for
        questions with one valid sample) — it lets a comparison tell how much of its SE more
        repeats would remove. ``clusters`` and ``categories`` are None when not given.
        ``pass_frac``: each question's share of rewards above 0 (NeMo Evaluator's ``pass@1``).
    """
    it = _item_sums(problem_idx, reward)
    r, ids, inv, first, valid, g = it.r, it.ids, it.inv, it.first, it.valid, it.g
    cnt, s1, keep = it.cnt, it.s1, it.keep
    mu = np.divide(s1, cnt, out=np.zeros(g), where=cnt > 0)
    dev = r[valid] - mu[inv[valid]]
    ss = np.bincount(inv[valid], weights=dev * dev, minlength=g)
    ivar = np.divide(ss, cnt - 1, out=np.full(g, np.nan), where=cnt > 1)
    passed = np.bincount(inv[valid], weights=(r[valid] > 0) * 1.0, minlength=g) / np.maximum(cnt, 1)
    clus = _item_labels(cluster, first, keep)
    cats = _item_labels(category, first, keep)
    return {
        "items": _label_list(ids[keep]),
        "scores": mu[keep].tolist(),
        "n_samples": cnt[keep].astype(int).tolist(),
        "item_var": [_f(v) for v in ivar[keep].tolist()],
        "clusters": None if clus is None else _label_list(clus),
        "categories": None if cats is None else _label_list(cats),
        "binary": is_binary(r),
        "pass_frac": passed[keep].tolist(),
    }


def per_category(
    problem_idx: Any, reward: Any, category: Any, level: float = 0.95, *, cluster: Any = None
) -> dict[str, dict[str, Any]]:
    """Score per category (a question's category is its first row's).

    Args:
        problem_idx: Question id per row.
        reward: Reward per row (NaN = failed).
        category: Category per row; missing categories are grouped as ``"(none)"``.
        level: Confidence level.
        cluster: Optional cluster per row for clustered SEs within each category.

    Returns:
        ``{category: {mean, se, ci_low, ci_high, ci_method, n_items}}`` sorted by category
        name; the interval is ``score_interval``'s.
    """
    it = _item_sums(problem_idx, reward)
    r, first, cnt, s1, keep = it.r, it.first, it.cnt, it.s1, it.keep
    means = s1[keep] / cnt[keep]
    binary = is_binary(r)
    cats = [
        _NONE_LABEL if v is None else str(v)
        for v in _label_list(np.asarray(category, dtype=object)[first][keep])
    ]
    cat_arr = np.array(cats, dtype=object)
    clus = _item_labels(cluster, first, keep)
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(set(cats)):
        m = cat_arr == name
        n_cat = int(cnt[keep][m].sum()) if binary else None
        res = score_interval(means[m], None if clus is None else clus[m], level, n_samples=n_cat)
        out[name] = {
            "mean": res["mean"],
            "se": res["se"],
            "ci_low": res["ci_low"],
            "ci_high": res["ci_high"],
            "ci_method": res["ci_method"],
            "n_items": int(m.sum()),
        }
    return out


def score_summary(
    problem_idx: Any,
    reward: Any,
    *,
    category: Any = None,
    cluster: Any = None,
    extracted: Any = None,
    repeat: Any = None,
    level: float = 0.95,
) -> dict[str, Any]:
    """Everything a bundle reports about one benchmark's score, JSON-ready.

    Args:
        problem_idx: Question id per sample row.
        reward: Reward per row; NaN/None marks a failed request (excluded, counted).
        category: Optional category per row -> ``per_category``.
        cluster: Optional cluster per row -> clustered SE (missing labels are singletons).
        extracted: Optional extracted answer per row -> ``maj_at_k`` (needs repeats > 1).
        repeat: Optional repeat index per row (orders samples for maj@k).
        level: Confidence level.

    Returns:
        ``{mean, se, se_note, ci_low, ci_high, ci_method, ci_n_eff, ci_note, level,
        se_method, ci_dist, n_items, n_samples, n_failed_samples, n_items_dropped,
        n_repeats, binary, pass_at_k, maj_at_k, repeat_variance, per_category,
        n_clusters}``. The interval is ``score_interval``'s, chosen once here and labelled
        by ``ci_method``: every surface shows exactly these numbers.
        ``n_samples`` counts valid (scored) rows; ``n_repeats`` is the most valid samples any
        question has; ``pass_at_k`` is ``{}`` unless binary; ``maj_at_k`` None unless
        ``extracted`` given and repeats > 1; ``per_category`` None unless ``category``
        given; ``n_clusters`` None unless ``cluster`` given.
    """
    it = _item_sums(problem_idx, reward)
    r, first, valid, g, cnt, s1, keep = it.r, it.first, it.valid, it.g, it.cnt, it.s1, it.keep
    means = s1[keep] / cnt[keep]
    clus = _item_labels(cluster, first, keep)
    binary = is_binary(r)
    n_valid = int(valid.sum())
    res = score_interval(means, clus, level, n_samples=n_valid if binary else None)
    n_rep = int(cnt.max()) if g else 0
    maj = None
    if extracted is not None and n_rep > 1:
        maj = maj_at_k(
            problem_idx,
            extracted,
            r,
            _default_ks(n_rep),
            repeat=repeat,
            cluster=cluster,
            level=level,
        )
    return {
        "mean": res["mean"],
        "se": res["se"],
        "se_note": res["se_note"],
        "ci_low": res["ci_low"],
        "ci_high": res["ci_high"],
        "ci_method": res["ci_method"],
        "ci_n_eff": res["ci_n_eff"],
        "ci_note": res["ci_note"],
        "level": float(level),
        "se_method": res["se_method"],
        "ci_dist": res["ci_dist"],
        "n_items": int(keep.sum()),
        "n_samples": n_valid,
        "n_failed_samples": int((~valid).sum()),
        "n_items_dropped": int((~keep).sum()),
        "n_repeats": n_rep,
        "binary": binary,
        "pass_at_k": pass_at_k_table(problem_idx, r, cluster=cluster, level=level)
        if binary
        else {},
        "maj_at_k": maj,
        "repeat_variance": repeat_variance(problem_idx, r),
        "per_category": None
        if category is None
        else per_category(problem_idx, r, category, level, cluster=cluster),
        "n_clusters": res["n_clusters"],
    }


# --------------------------------------------------------------------------- bootstrap


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
