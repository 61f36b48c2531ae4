"""What a bundle reports about one score: repeat variance, per-item and per-category tables,
and `score_summary`, which gathers them all."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from nel_assets.engine.stats.at_k import maj_at_k, pass_at_k_table
from nel_assets.engine.stats.intervals import score_interval
from nel_assets.engine.stats.units import (
    _NONE_LABEL,
    _default_ks,
    _f,
    _item_labels,
    _item_sums,
    _label_list,
    is_binary,
)


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
