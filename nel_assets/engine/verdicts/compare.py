"""Paired comparison of two models on the same questions (Miller 2024, section on paired tests).

Two models answering the same questions make correlated errors: easy questions are easy for
both. Pairing on the question removes that shared variance, so the SE of the difference is
``SD(d_i)/sqrt(n)`` with ``d_i = cand_i − base_i`` — often far smaller than the unpaired
``sqrt(SE_a² + SE_b²)``. Everything here is computed on the paired (shared) questions only;
questions present on one side only are counted and reported, never silently mixed in.

Choices, with reasons:

* **Test.** When every paired item score is 0/1 and there are no clusters: McNemar's exact
  test (a two-sided binomial test on the discordant pairs), the standard exact test for
  paired proportions. Otherwise (fractional scores from repeats or graded rewards, or
  clustered items): a seeded sign-flip permutation test on the mean difference. With
  clusters the signs flip per *cluster* (sums of d over a cluster's items), which keeps the
  within-cluster dependence intact; McNemar would assume independent items and be
  anti-conservative. With ≤ 13 units all 2^units sign patterns are enumerated (exact).
* **significant** means the test's p-value < ``alpha``.
* **CI of the difference** (``ci_method: "newcombe"``): Newcombe's (1998) method 10 for
  paired proportions, the "square-and-add" combination of the two sides' Wilson intervals
  (Wilson 1927) with their correlation φ:
  ``L = Δ − sqrt((p_c − l_c)² − 2φ(p_c − l_c)(u_b − p_b) + (u_b − p_b)²)`` and
  ``U = Δ + sqrt((u_c − p_c)² − 2φ(u_c − p_c)(p_b − l_b) + (p_b − l_b)²)``.
  Because each side's interval lies in [0, 1], the result lies in [l_c − u_b, u_c − l_b] ⊂
  [−1, 1]: a difference of scores never gets an impossible bound (the mean ± q·SE interval
  reached below −1 with few items), and it does not collapse to a point when every item
  agrees. For 0/1 items without clusters this is exactly Newcombe's method 10, with his
  continuity-corrected φ (``ad − bc`` reduced by ``n/2`` when positive). For per-item means
  (repeats, graded scores) or clusters, the same formula is used with each side's
  ``stats.score_interval`` (Wilson at the effective n) and φ the correlation of the two
  means (clustered: of cluster sums), with the same correction written on the covariance
  (``1/(2n²)``, identical to ``n/2`` on the 2×2 table): Newcombe's method as a MOVER
  interval (Zou & Donner 2008). Scores outside [0, 1] keep the mean ± q·SE interval
  (``stats.mean_ci``).
* **MDE** at 80% power, two-sided α = 0.05: ``(z_{1−α/2} + z_{power}) · SE_paired``, using the
  observed paired SE (clustered when clustered), i.e. for this n and this paired SD. With
  no variance in the differences (or fewer than two units) the SE and the MDE are
  undefined: they are None and ``se_note`` / ``mde_note`` say why (an MDE of 0 would claim
  any change is detectable).
* **Units.** ``max_drop`` is in score units (scores are per-item means, so 0.01 = one point
  on a 0–1 accuracy scale).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as _st

from nel_assets.engine.stats import is_binary, mean_ci, score_interval, wilson_at
from nel_assets.engine.stats.units import _as_float, _codes, _f, _label_list

__all__ = ["compare_scores", "mde", "paired_ci", "sign_flip_test"]

NO_VARIANCE = "undefined (no variance in the differences)"

_TESTS = ("auto", "mcnemar", "sign", "permutation")  # NeMo Evaluator's `compare --test` choices

_EXACT_MAX_UNITS = 13  # 2**13 = 8192 patterns: enumerate rather than sample


def mde(se: float | None, alpha: float = 0.05, power: float = 0.8) -> float | None:
    """Minimum detectable effect for a two-sided test: ``(z_{1−α/2} + z_{power}) · SE``.

    Args:
        se: Standard error of the (paired) difference.
        alpha: Two-sided significance level.
        power: Desired power.

    Returns:
        The MDE in score units, or None when the SE is unknown.
    """
    if se is None:
        return None
    return float((_st.norm.ppf(1.0 - alpha / 2.0) + _st.norm.ppf(power)) * se)


def sign_flip_test(
    diffs: np.ndarray,
    clusters: Any = None,
    *,
    n_permutations: int = 10_000,
    seed: int = 0,
) -> tuple[float, int, bool]:
    """Two-sided paired permutation test of mean(d) = 0 by random sign flips.

    Under H0 (the two models are exchangeable on each item/cluster) the sign of each unit's
    difference is a fair coin. The statistic is |Σ_u D_u| over units u (items, or cluster
    sums when clustered), equivalent to |mean d| since n is fixed.

    Args:
        diffs: Paired differences per item.
        clusters: Optional cluster label per item (signs flip per cluster).
        n_permutations: Random sign patterns (ignored when exact enumeration is used).
        seed: RNG seed.

    Returns:
        ``(p_value, n_permutations_used, exact)``. Monte Carlo p-values use
        ``(1 + #{T* ≥ T}) / (B + 1)`` so they are never 0 (valid, slightly conservative).
    """
    d = np.asarray(diffs, dtype=np.float64)
    if clusters is not None:
        codes = _codes(np.asarray(clusters, dtype=object))
        units = np.bincount(codes, weights=d)
    else:
        units = d
    units = units[units != 0.0]  # zero units cannot change sign: drop them (no effect on T)
    u = units.shape[0]
    if u == 0:
        return 1.0, 0, True
    t_obs = abs(float(units.sum()))
    tol = 1e-12 * max(1.0, float(np.abs(units).sum()))  # float ties count as "as extreme"
    if u <= _EXACT_MAX_UNITS:
        pats = ((np.arange(2**u)[:, None] >> np.arange(u)[None, :]) & 1) * 2.0 - 1.0
        t = np.abs(pats @ units)
        return float(np.mean(t >= t_obs - tol)), int(2**u), True
    rng = np.random.default_rng(seed)
    block = max(1, 2_000_000 // u)
    hits = 0
    for s in range(0, n_permutations, block):
        b = min(block, n_permutations - s)
        signs = rng.integers(0, 2, size=(b, u), dtype=np.int8).astype(np.float64) * 2.0 - 1.0
        hits += int(np.count_nonzero(np.abs(signs @ units) >= t_obs - tol))
    return (1.0 + hits) / (n_permutations + 1.0), int(n_permutations), False


def _phi(xb: np.ndarray, xc: np.ndarray, clusters: Any) -> float:
    """Newcombe's continuity-corrected correlation of the two sides' means.

    On a 2×2 table of 0/1 items this is ``(ad − bc − n/2) / sqrt((a+b)(c+d)(a+c)(b+d))``
    when ``ad − bc > n/2``, ``(ad − bc) / …`` when negative, else 0 (Newcombe 1998). Here
    the covariance of the means ``Σ d_b·d_c / n²`` (sums over clusters when clustered) plays
    ``(ad − bc)/n³`` and the correction ``1/(2n²)`` plays ``n/2``.
    """
    n = xb.shape[0]
    db, dc = xb - xb.mean(), xc - xc.mean()
    if clusters is not None:
        codes = _codes(np.asarray(clusters, dtype=object))
        db, dc = np.bincount(codes, weights=db), np.bincount(codes, weights=dc)
    cov = float(np.dot(db, dc)) / (n * n)
    scale = math.sqrt(float(np.dot(db, db)) * float(np.dot(dc, dc))) / (n * n)
    if scale <= 0.0:
        return 0.0
    corr = 1.0 / (2.0 * n * n)
    num = cov - corr if cov > corr else (cov if cov < 0.0 else 0.0)
    return max(-1.0, min(1.0, num / scale))


def _side_spec(side: Mapping[str, Any], idx: np.ndarray, x: np.ndarray, clusters: Any,
               level: float) -> dict[str, Any] | None:
    """One side's ``score_interval`` spec on the paired items (None: scores outside [0, 1])."""
    n_samples = None
    if side.get("binary") and side.get("n_samples") is not None:
        n_samples = int(np.sum(_as_float(side["n_samples"])[idx]))
    return score_interval(x, clusters, level, n_samples=n_samples)["ci_spec"]


def paired_ci(inputs: Mapping[str, Any] | None, level: float) -> tuple[float | None, float | None]:
    """The comparison's CI at ``level`` from its recorded ``ci_inputs``.

    Args:
        inputs: ``compare_scores(...)["ci_inputs"]``: ``{method: "newcombe", delta, phi,
            base: spec, cand: spec}`` (specs as ``stats.wilson_at`` takes), or
            ``{method: "t"|"normal", delta, se, df}``.
        level: Confidence level (a gate passes its multiplicity-corrected one).

    Returns:
        ``(low, high)``, or ``(None, None)`` when no interval is defined.
    """
    if not inputs or inputs.get("delta") is None:
        return None, None
    delta = float(inputs["delta"])
    if inputs["method"] == "newcombe":
        pb, pc = float(inputs["base"]["mean"]), float(inputs["cand"]["mean"])
        lb, ub, _ = wilson_at(inputs["base"], level)
        lc, uc, _ = wilson_at(inputs["cand"], level)
        phi = float(inputs["phi"])
        down = (pc - lc) ** 2 - 2.0 * phi * (pc - lc) * (ub - pb) + (ub - pb) ** 2
        up = (uc - pc) ** 2 - 2.0 * phi * (uc - pc) * (pb - lb) + (pb - lb) ** 2
        lo = delta - math.sqrt(max(down, 0.0))
        hi = delta + math.sqrt(max(up, 0.0))
        return max(lo, -1.0), min(hi, 1.0)  # only float rounding can cross ±1
    se = inputs.get("se")
    if se is None:
        return None, None
    p = 0.5 + level / 2.0
    df = inputs.get("df")
    q = float(_st.t.ppf(p, df)) if df else float(_st.norm.ppf(p))
    return delta - q * se, delta + q * se


def _paired_inputs(base: Mapping[str, Any], cand: Mapping[str, Any], bi: np.ndarray,
                   ci: np.ndarray, xb: np.ndarray, xc: np.ndarray, clusters: Any,
                   res: Mapping[str, Any], level: float) -> dict[str, Any] | None:
    """What ``paired_ci`` needs: Newcombe when both sides' scores lie in [0, 1]."""
    if res["mean"] is None:
        return None
    sb = _side_spec(base, bi, xb, clusters, level)
    sc = _side_spec(cand, ci, xc, clusters, level)
    if sb is not None and sc is not None:
        return {"method": "newcombe", "delta": res["mean"], "phi": _phi(xb, xc, clusters),
                "base": sb, "cand": sc}
    return {"method": res["ci_dist"], "delta": res["mean"], "se": res["se"], "df": res["df"]}


def _se_note(res: Mapping[str, Any], d: np.ndarray) -> str | None:
    """Why the paired SE (and so the MDE) is undefined, or None when it is defined."""
    if res["n"] == 0:
        return "undefined (no paired items)"
    if res["se"] is None:
        one = "1 cluster" if res["n_clusters"] is not None and res["n"] > 1 else "1 paired item"
        return f"undefined ({one})"
    if res["se"] == 0.0:
        return NO_VARIANCE if bool(np.all(d == d[0])) else "undefined (no variance between clusters)"
    return None


def _keys(side: Mapping[str, Any], name: str) -> np.ndarray:
    keys = np.asarray(side["items"])
    if keys.dtype == object:
        keys = keys.astype(str)
    if np.unique(keys).shape[0] != keys.shape[0]:
        raise ValueError(f"{name}: item keys must be unique (one score per item)")
    return keys


def _opt(side: Mapping[str, Any], key: str, idx: np.ndarray) -> np.ndarray | None:
    val = side.get(key)
    if val is None:
        return None
    return np.asarray(val, dtype=object)[idx]


def _examples(keys: np.ndarray, magnitude: np.ndarray, mask: np.ndarray, k: int) -> list[Any]:
    """Up to k keys where ``mask``, largest change first, ties by key order (deterministic)."""
    idx = np.flatnonzero(mask)
    order = np.lexsort((idx, -magnitude[idx]))
    return _label_list(keys[idx[order[:k]]])


def _within_se(
    base: Mapping[str, Any], cand: Mapping[str, Any], bi: np.ndarray, ci: np.ndarray, n: int
) -> tuple[float | None, float | None, float | None]:
    """The part of SE(delta) that is sampling noise across repeats (Miller's σ²_within/K).

    ``Var_within(d̄) = Σ_i (v_b,i / K_b,i + v_c,i / K_c,i) / n²`` over paired items. Only
    available when both sides carry ``item_var`` and ``n_samples`` for every paired item.
    Also returns each side's repeats per item (harmonic mean, the K in σ²/K).
    """
    if n == 0:
        return None, None, None
    parts = []
    ks = []
    for side, idx in ((base, bi), (cand, ci)):
        if side.get("n_samples") is None:
            return None, None, None
        k = _as_float(side["n_samples"])[idx]
        ks.append(_f(n / np.sum(1.0 / k)) if np.all(k > 0) else None)
        if side.get("item_var") is None:
            parts.append(None)
            continue
        v = _as_float(side["item_var"])[idx]
        parts.append(None if not np.all(np.isfinite(v)) else float(np.sum(v / k)))
    if parts[0] is None or parts[1] is None:
        return None, ks[0], ks[1]
    return _f(math.sqrt(parts[0] + parts[1]) / n), ks[0], ks[1]


@dataclass(frozen=True)
class _Paired:
    """The items both sides scored (finite scores only), aligned: keys, indices into each side,
    scores, differences (cand − base), and the clusters and categories the sides give."""

    keys: np.ndarray
    bi: np.ndarray
    ci: np.ndarray
    xb: np.ndarray
    xc: np.ndarray
    d: np.ndarray
    n: int
    n_base: int
    n_cand: int
    clusters: np.ndarray | None
    categories: np.ndarray | None


def _pair(base: Mapping[str, Any], cand: Mapping[str, Any]) -> _Paired:
    """Align the two sides on their shared items with a finite score on both."""
    bk, ck = _keys(base, "base"), _keys(cand, "cand")
    if bk.dtype.kind != ck.dtype.kind:  # e.g. ints on one side, strings on the other
        bk, ck = bk.astype(str), ck.astype(str)
    keys, bi, ci = np.intersect1d(bk, ck, assume_unique=True, return_indices=True)
    xb = _as_float(base["scores"])[bi]
    xc = _as_float(cand["scores"])[ci]
    ok = np.isfinite(xb) & np.isfinite(xc)
    keys, bi, ci, xb, xc = keys[ok], bi[ok], ci[ok], xb[ok], xc[ok]
    clusters = _opt(base, "clusters", bi)
    if clusters is None:
        clusters = _opt(cand, "clusters", ci)
    categories = _opt(base, "categories", bi)
    if categories is None:
        categories = _opt(cand, "categories", ci)
    n = int(keys.shape[0])
    return _Paired(keys, bi, ci, xb, xc, xc - xb, n, int(bk.shape[0]), int(ck.shape[0]),
                   clusters, categories)


def _paired_test(
    pr: _Paired, test: str, correct_above: float | None, *, n_permutations: int, seed: int
) -> tuple[str, float | None, int, dict[str, int] | None]:
    """The significance test of the differences: ``(name, p, n_permutations, mcnemar counts)``."""
    if test not in _TESTS:
        raise ValueError(f"unknown test {test!r}; use one of {', '.join(_TESTS)}")
    xb, xc, d, clusters = pr.xb, pr.xc, pr.d, pr.clusters
    if pr.n == 0:
        return "none", None, 0, None
    both_binary = is_binary(xb) and is_binary(xc)
    threshold = 0.0 if correct_above is None else float(correct_above)
    if test == "mcnemar" or (test == "auto" and both_binary and clusters is None):
        # Forced McNemar on graded scores counts "correct" as above the threshold (as
        # NeMo Evaluator does); on 0/1 scores with the default threshold it is the same.
        rb, rc = (xb == 1, xc == 1) if test == "auto" else (xb > threshold, xc > threshold)
        b = int(np.count_nonzero(rb & ~rc))
        c = int(np.count_nonzero(~rb & rc))
        p = 1.0 if b + c == 0 else float(_st.binomtest(c, b + c, 0.5).pvalue)
        return "mcnemar_exact", p, 0, {"base_only_correct": b, "cand_only_correct": c}
    if test == "sign":
        pos, neg = int(np.count_nonzero(d > 0)), int(np.count_nonzero(d < 0))
        p = 1.0 if pos + neg == 0 else float(_st.binomtest(pos, pos + neg, 0.5).pvalue)
        return "sign_exact", p, 0, None
    p, n_perm, exact = sign_flip_test(d, clusters, n_permutations=n_permutations, seed=seed)
    name = ("cluster_sign_flip" if clusters is not None else "sign_flip") + (
        "_exact" if exact else ""
    )
    return name, p, n_perm, None


def _flips(pr: _Paired, correct_above: float | None, n_examples: int) -> dict[str, Any]:
    """Items that got worse / better (crossed ``correct_above`` when given), with examples."""
    d = pr.d
    if correct_above is None:
        worse, better = d < 0, d > 0
    else:
        threshold = float(correct_above)
        worse = (pr.xb > threshold) & ~(pr.xc > threshold)
        better = ~(pr.xb > threshold) & (pr.xc > threshold)
    return {
        "better_to_worse": {
            "count": int(worse.sum()),
            "examples": _examples(pr.keys, -d, worse, n_examples),
        },
        "worse_to_better": {
            "count": int(better.sum()),
            "examples": _examples(pr.keys, d, better, n_examples),
        },
    }


def _per_category(
    base: Mapping[str, Any], cand: Mapping[str, Any], pr: _Paired, level: float
) -> dict[str, dict[str, Any]]:
    """The paired delta, SE and CI within each category (missing category: ``(none)``)."""
    assert pr.categories is not None
    bi, ci, xb, xc, d, clusters = pr.bi, pr.ci, pr.xb, pr.xc, pr.d, pr.clusters
    per_cat: dict[str, dict[str, Any]] = {}
    names = np.array(["(none)" if v is None else str(v) for v in pr.categories.tolist()])
    for name in sorted(set(names.tolist())):
        mk = names == name
        cl = None if clusters is None else clusters[mk]
        r = mean_ci(d[mk], cl, level)
        if _se_note(r, d[mk]) is not None:
            r["se"] = None
        c_lo, c_hi = paired_ci(
            _paired_inputs(base, cand, bi[mk], ci[mk], xb[mk], xc[mk], cl, r, level), level
        )
        per_cat[name] = {
            "delta": r["mean"],
            "se": r["se"],
            "ci_low": c_lo,
            "ci_high": c_hi,
            "n_items": int(mk.sum()),
            "base_mean": _f(xb[mk].mean()),
            "cand_mean": _f(xc[mk].mean()),
        }
    return per_cat


def _spread(pr: _Paired) -> tuple[float | None, float | None]:
    """The SD of the differences and the correlation of the two sides' scores (None when
    undefined: fewer than two items, or a side with no variation)."""
    n, xb, xc = pr.n, pr.xb, pr.xc
    sd = float(pr.d.std(ddof=1)) if n >= 2 else None
    corr = None
    if n >= 2 and xb.std() > 0 and xc.std() > 0:
        corr = float(np.corrcoef(xb, xc)[0, 1])
    return sd, corr


def _interval(
    base: Mapping[str, Any], cand: Mapping[str, Any], pr: _Paired, level: float
) -> tuple[dict[str, Any], str | None, dict[str, Any] | None, float | None, float | None]:
    """The mean difference's SE (None with a note when undefined) and its paired CI:
    ``(mean_ci result, se_note, ci_inputs, ci_low, ci_high)``."""
    res = mean_ci(pr.d, pr.clusters, level)
    se_note = _se_note(res, pr.d)
    if se_note is not None:
        res["se"] = None
    ci_inputs = _paired_inputs(base, cand, pr.bi, pr.ci, pr.xb, pr.xc, pr.clusters, res, level)
    lo, hi = paired_ci(ci_inputs, level)
    return res, se_note, ci_inputs, lo, hi


def _verdict(
    delta: float | None, lo: float | None, hi: float | None, m: float | None,
    se_note: str | None, p: float | None, *, alpha: float, power: float, max_drop: float | None,
) -> dict[str, Any]:
    """The MDE, significance and verdict keys of a comparison, from the delta's CI, the MDE,
    the test's p-value and ``max_drop``."""
    margin = 0.0 if max_drop is None else float(max_drop)
    significant = p is not None and p < alpha
    regression = hi is not None and hi < -margin
    covers0 = lo is not None and lo <= 0.0 <= hi  # type: ignore[operator]
    detectable = not (delta is not None and m is not None and abs(delta) < m and covers0)
    if regression:
        verdict = "regression"
    elif lo is not None and lo > 0.0:
        verdict = "improvement"
    elif max_drop is not None and lo is not None and lo > -margin:
        verdict = "within_max_drop"
    elif not detectable:
        verdict = "not_detectable"
    else:
        verdict = "inconclusive"
    return {
        "mde": _f(m),
        "mde_note": se_note,
        "alpha": float(alpha),
        "power": float(power),
        "max_drop": None if max_drop is None else float(max_drop),
        "significant": bool(significant),
        "regression": bool(regression),
        "detectable": bool(detectable),
        "verdict": verdict,
    }


def compare_scores(
    base: Mapping[str, Any],
    cand: Mapping[str, Any],
    *,
    max_drop: float | None = None,
    level: float = 0.95,
    alpha: float = 0.05,
    power: float = 0.8,
    n_permutations: int = 10_000,
    seed: int = 0,
    n_examples: int = 5,
    test: str = "auto",
    correct_above: float | None = None,
) -> dict[str, Any]:
    """Paired comparison of a candidate against a baseline on their shared items.

    Args:
        base: Baseline per-item data as produced by ``stats.item_table``: ``items`` (keys),
            ``scores`` (per-item mean score), optional ``clusters`` and ``categories``
            (per item, aligned with ``items``). Other keys are ignored.
        cand: Candidate, same form.
        max_drop: Largest tolerated drop (score units); ``regression`` means the CI lies
            entirely below ``−max_drop`` (below 0 when None).
        level: CI level.
        alpha: Significance level of the test and of the MDE.
        power: Power for the MDE.
        n_permutations: Sign-flip permutations (≥ 10,000 recommended).
        seed: Permutation RNG seed.
        n_examples: Example item keys per flip direction.
        test: ``auto`` (exact McNemar when every score is 0/1 and items are not clustered,
            the sign-flip permutation test otherwise), or one forced as in NeMo Evaluator's
            ``--test``: ``mcnemar`` (exact, on scores above ``correct_above`` counted as
            correct), ``sign`` (exact binomial on the signs of the differences) or
            ``permutation`` (sign-flip).
        correct_above: When given, an item counts as correct when its score is above this,
            and ``flips`` count items that crossed it (NeMo Evaluator's ``--correct-above``);
            when None a flip is any change of the item's score.

    Returns:
        A JSON-ready dict with keys ``n_paired, n_unpaired_base, n_unpaired_cand, base_mean,
        cand_mean, delta, se, se_note, ci_low, ci_high, ci_method, ci_inputs, level,
        se_method, ci_dist, df, n_clusters, sd_diff, se_within, repeats_base, repeats_cand,
        correlation, test, p_value, mcnemar, n_permutations, seed, flips, per_category, mde,
        mde_note, alpha, power, max_drop, significant, regression, detectable, verdict``.
        ``ci_low``/``ci_high`` are ``paired_ci(ci_inputs, level)`` (Newcombe for scores in
        [0, 1]); ``se`` and ``mde`` are None, with ``se_note``/``mde_note`` saying why, when
        undefined. ``flips`` = ``{better_to_worse: {count, examples},
        worse_to_better: {count, examples}}`` (better_to_worse: base scored higher than
        cand on that item). ``se_within`` is the repeat-noise part of ``se`` (None unless
        both sides give ``item_var`` and ``n_samples``); ``repeats_*`` the repeats per item. ``verdict`` is one of ``regression`` (CI below −max_drop),
        ``improvement`` (CI above 0), ``within_max_drop`` (max_drop given and CI above
        −max_drop), ``not_detectable`` (|delta| < MDE and CI covers 0), ``inconclusive``.
    """
    pr = _pair(base, cand)
    n, xb, xc = pr.n, pr.xb, pr.xc
    res, se_note, ci_inputs, lo, hi = _interval(base, cand, pr, level)
    se = res["se"]
    m = mde(se, alpha, power)
    sd, corr = _spread(pr)
    se_within, k_base, k_cand = _within_se(base, cand, pr.bi, pr.ci, n)
    test_name, p, n_perm, mcn = _paired_test(
        pr, test, correct_above, n_permutations=n_permutations, seed=seed
    )
    flips = _flips(pr, correct_above, n_examples)
    per_cat = None if pr.categories is None else _per_category(base, cand, pr, level)
    delta = res["mean"]
    return {
        "n_paired": n,
        "n_unpaired_base": pr.n_base - n,
        "n_unpaired_cand": pr.n_cand - n,
        "base_mean": _f(xb.mean()) if n else None,
        "cand_mean": _f(xc.mean()) if n else None,
        "delta": delta,
        "se": se,
        "se_note": se_note,
        "ci_low": lo,
        "ci_high": hi,
        "ci_method": None if ci_inputs is None else ci_inputs["method"],
        "ci_inputs": ci_inputs,
        "level": float(level),
        "se_method": res["se_method"],
        "ci_dist": res["ci_dist"],
        "df": res["df"],
        "n_clusters": res["n_clusters"],
        "sd_diff": sd,
        "se_within": se_within,
        "repeats_base": k_base,
        "repeats_cand": k_cand,
        "correlation": _f(corr),
        "test": test_name,
        "test_requested": test,
        "correct_above": correct_above,
        "p_value": _f(p),
        "mcnemar": mcn,
        "n_permutations": int(n_perm),
        "seed": int(seed),
        "flips": flips,
        "per_category": per_cat,
        **_verdict(delta, lo, hi, m, se_note, p, alpha=alpha, power=power, max_drop=max_drop),
    }
