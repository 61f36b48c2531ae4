"""Paired comparisons against direct formulas, scipy and brute force."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from scipy import stats as st

from nel_assets.engine import stats as S
from nel_assets.engine.verdicts import compare as C

TOL = 1e-9


def _side(keys, scores, **extra):
    return {"items": list(keys), "scores": list(map(float, scores)), **extra}


def _binary_pair(n: int, base_acc: float, b: int, c: int, seed: int = 0):
    """n paired 0/1 items: cand = base except b items 1->0 and c items 0->1 (exact counts)."""
    rng = np.random.default_rng(seed)
    base = np.zeros(n)
    base[rng.permutation(n)[: round(base_acc * n)]] = 1
    cand = base.copy()
    ones, zeros = np.flatnonzero(base == 1), np.flatnonzero(base == 0)
    cand[rng.choice(ones, b, replace=False)] = 0
    cand[rng.choice(zeros, c, replace=False)] = 1
    return base, cand


def _wilson(p: float, n: float, z: float) -> tuple[float, float]:
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(c - h, 0.0), min(c + h, 1.0)


def _newcombe_ref(base: np.ndarray, cand: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Newcombe (1998) method 10 written from the paper's 2×2 form, generalised to means
    by the effective n p(1-p)/SE² (unclustered, ≥ 30 items so no t factor)."""
    n = len(base)
    z = st.norm.ppf(0.5 + level / 2)
    sides = []
    for x in (base, cand):
        p = float(np.mean(x))
        binary = set(np.unique(x).tolist()) <= {0.0, 1.0}
        n_eff = n if binary else p * (1 - p) / st.sem(x) ** 2
        sides.append((p, *_wilson(p, n_eff, z)))
    (pb, lb, ub), (pc, lc, uc) = sides
    cov = float(np.sum((base - base.mean()) * (cand - cand.mean()))) / n**2
    scale = math.sqrt(float(np.sum((base - base.mean()) ** 2) * np.sum((cand - cand.mean()) ** 2))) / n**2
    num = cov - 1 / (2 * n * n) if cov > 1 / (2 * n * n) else min(cov, 0.0)
    phi = num / scale if scale else 0.0
    delta = pc - pb
    lo = delta - math.sqrt((pc - lc) ** 2 - 2 * phi * (pc - lc) * (ub - pb) + (ub - pb) ** 2)
    hi = delta + math.sqrt((uc - pc) ** 2 - 2 * phi * (uc - pc) * (pb - lb) + (pb - lb) ** 2)
    return lo, hi


def _newcombe_table(a: int, b: int, c: int, d: int, level: float = 0.95) -> tuple[float, float]:
    """Newcombe's method 10 on the paired 2×2 table, as the paper states it: a = both right,
    b = baseline only, c = candidate only, d = both wrong; CI of p_cand − p_base."""
    n = a + b + c + d
    z = st.norm.ppf(0.5 + level / 2)
    pb, pc = (a + b) / n, (a + c) / n
    lb, ub = _wilson(pb, n, z)
    lc, uc = _wilson(pc, n, z)
    denom = (a + b) * (c + d) * (a + c) * (b + d)
    num = a * d - b * c
    num = num - n / 2 if num > n / 2 else (num if num < 0 else 0)
    phi = num / math.sqrt(denom) if denom else 0.0
    delta = pc - pb
    lo = delta - math.sqrt((pc - lc) ** 2 - 2 * phi * (pc - lc) * (ub - pb) + (ub - pb) ** 2)
    hi = delta + math.sqrt((uc - pc) ** 2 - 2 * phi * (uc - pc) * (pb - lb) + (pb - lb) ** 2)
    return lo, hi


@pytest.mark.parametrize(("n", "acc", "b", "c"), [(400, 0.5, 0, 0), (400, 0.5, 10, 4),
                                                  (30, 0.9, 3, 0), (20, 1.0, 0, 0), (12, 0.5, 6, 0)])
def test_binary_ci_is_newcombe_method_10(n, acc, b, c):
    base, cand = _binary_pair(n, acc, b, c)
    res = C.compare_scores(_side(range(n), base), _side(range(n), cand))
    a = int(np.sum((base == 1) & (cand == 1)))
    d = int(np.sum((base == 0) & (cand == 0)))
    assert (res["ci_low"], res["ci_high"]) == pytest.approx(_newcombe_table(a, b, c, d), abs=TOL)
    assert res["ci_method"] == "newcombe"
    assert -1.0 <= res["ci_low"] < res["ci_high"] <= 1.0  # never a point, never outside
    # the recorded inputs rebuild it at any level (what the gate does)
    lo99, hi99 = C.paired_ci(res["ci_inputs"], 0.99)
    assert (lo99, hi99) == pytest.approx(_newcombe_table(a, b, c, d, 0.99), abs=TOL)


def test_paired_ci_never_leaves_minus_one_one():
    # 5 items: the baseline solves all, the candidate loses 4 of 5 (and half of the 5th)
    base, cand = np.ones(5), np.array([0, 0, 0, 0, 0.5])
    raw = S.mean_ci(cand - base)
    assert raw["ci_low"] < -1.0  # the old mean ± t·SE interval
    res = C.compare_scores(_side(range(5), base), _side(range(5), cand))
    assert -1.0 <= res["ci_low"] < res["delta"] < res["ci_high"] <= 1.0
    assert res["ci_method"] == "newcombe"


def test_zero_variance_in_differences_leaves_mde_undefined():
    """Identical answers: SE and MDE undefined (not 0.00), and the CI is still an interval."""
    base = np.repeat([1.0, 0.0], 50)
    res = C.compare_scores(_side(range(100), base), _side(range(100), base))
    assert res["delta"] == 0.0 and res["se"] is None and res["mde"] is None
    assert res["mde_note"] == "undefined (no variance in the differences)" == res["se_note"]
    assert res["ci_low"] < 0.0 < res["ci_high"] and res["ci_high"] - res["ci_low"] < 0.1
    assert res["verdict"] == "inconclusive"
    every = C.compare_scores(_side(range(10), np.ones(10)), _side(range(10), np.ones(10)))
    assert every["mde"] is None and every["ci_low"] < 0 < every["ci_high"]
    json.dumps(res, allow_nan=False)


def _mcnemar_direct(b: int, c: int) -> float:
    m = b + c
    tail = sum(math.comb(m, i) for i in range(min(b, c) + 1)) / 2**m
    return min(1.0, 2 * tail)


def test_paired_stats_match_references():
    rng = np.random.default_rng(0)
    n = 500
    base = rng.random(n)
    cand = np.clip(base + rng.normal(-0.02, 0.1, n), 0, 1)
    keys = np.arange(n)
    res = C.compare_scores(_side(keys, base), _side(keys[::-1], cand[::-1]), seed=1)
    d = cand - base
    assert res["n_paired"] == n and res["n_unpaired_base"] == 0
    assert res["delta"] == pytest.approx(d.mean(), abs=TOL)
    assert res["se"] == pytest.approx(st.sem(d), abs=TOL)
    assert res["sd_diff"] == pytest.approx(d.std(ddof=1), abs=TOL)
    assert res["correlation"] == pytest.approx(st.pearsonr(base, cand)[0], abs=TOL)
    assert res["base_mean"] == pytest.approx(base.mean(), abs=TOL)
    z = st.norm.ppf(0.975)
    # graded scores in [0, 1]: Newcombe's square-and-add on the sides' effective-n Wilson
    # intervals (changed deliberately from mean ± z·SE); with 500 items they nearly agree
    assert (res["ci_low"], res["ci_high"]) == pytest.approx(_newcombe_ref(base, cand), abs=TOL)
    assert res["ci_method"] == "newcombe"
    assert res["ci_low"] == pytest.approx(d.mean() - z * st.sem(d), abs=0.3 * st.sem(d))
    assert res["mde"] == pytest.approx((z + st.norm.ppf(0.8)) * st.sem(d), abs=TOL)
    assert res["test"] == "sign_flip" and res["n_permutations"] == 10_000
    # the permutation p-value is close to the paired t-test's on this well-behaved data
    assert res["p_value"] == pytest.approx(st.ttest_rel(cand, base).pvalue, abs=0.01)
    json.dumps(res, allow_nan=False)


@pytest.mark.parametrize(("b", "c"), [(0, 0), (3, 0), (10, 4), (40, 52), (7, 7)])
def test_mcnemar_exact_matches_direct_binomial(b, c):
    base, cand = _binary_pair(400, 0.5, b, c)
    res = C.compare_scores(_side(range(400), base), _side(range(400), cand))
    assert res["test"] == "mcnemar_exact"
    assert res["mcnemar"] == {"base_only_correct": b, "cand_only_correct": c}
    assert res["p_value"] == pytest.approx(_mcnemar_direct(b, c), abs=TOL)
    assert res["flips"]["better_to_worse"]["count"] == b
    assert res["flips"]["worse_to_better"]["count"] == c


def _brute_sign_flip(units: np.ndarray) -> float:
    t_obs = abs(units.sum())
    hits = total = 0
    for signs in itertools.product((-1.0, 1.0), repeat=len(units)):
        total += 1
        hits += abs(np.dot(signs, units)) >= t_obs - 1e-12
    return hits / total


def test_sign_flip_exact_and_monte_carlo_match_brute_force():
    rng = np.random.default_rng(4)
    small = rng.normal(0.3, 1, 10)
    p, used, exact = C.sign_flip_test(small)
    assert exact and used == 1024
    assert p == pytest.approx(_brute_sign_flip(small), abs=TOL)
    mid = rng.normal(0.25, 1, 15)
    ref = _brute_sign_flip(mid)
    p_mc, used, exact = C.sign_flip_test(mid, n_permutations=40_000, seed=3)
    assert not exact and used == 40_000
    assert p_mc == pytest.approx(ref, abs=0.01)
    # seeded: reproducible, and the seed matters
    assert C.sign_flip_test(mid, seed=3)[0] == C.sign_flip_test(mid, seed=3)[0]


def test_cluster_sign_flip_uses_cluster_sums():
    rng = np.random.default_rng(5)
    clusters = np.repeat(np.arange(9), 4)
    d = rng.normal(0.2, 1, 36)
    p, used, exact = C.sign_flip_test(d, clusters)
    sums = np.bincount(clusters, weights=d)
    assert exact and used == 2**9 and p == pytest.approx(_brute_sign_flip(sums), abs=TOL)


def test_clustered_compare_se_and_test():
    rng = np.random.default_rng(6)
    n = 600
    clusters = [f"passage{i // 6}" for i in range(n)]
    shared = np.repeat(rng.normal(0, 0.15, n // 6), 6)
    base = np.clip(0.6 + shared + rng.normal(0, 0.1, n), 0, 1)
    cand = np.clip(base + np.repeat(rng.normal(-0.01, 0.05, n // 6), 6), 0, 1)
    res = C.compare_scores(
        _side(range(n), base, clusters=clusters), _side(range(n), cand), n_permutations=10_000
    )
    ref = S.mean_ci(cand - base, clusters)
    assert res["se"] == pytest.approx(ref["se"], abs=TOL)
    assert res["se_method"] == "clustered" and res["n_clusters"] == 100
    assert res["test"] == "cluster_sign_flip"
    assert res["se"] > st.sem(cand - base)  # clustered differences: naive SE is too small


def test_three_point_regression_on_gsm8k_size_is_significant():
    n = 1319
    # 0.80 base; 70 items lost, 30 gained: net -40 items = -3.03 points
    base, cand = _binary_pair(n, 0.80, 70, 30, seed=1)
    res = C.compare_scores(_side(range(n), base), _side(range(n), cand))
    assert res["delta"] == pytest.approx(-40 / n, abs=TOL)
    assert res["test"] == "mcnemar_exact" and res["p_value"] < 1e-4
    assert res["significant"] and res["regression"] and res["detectable"]
    assert res["verdict"] == "regression"
    assert res["correlation"] > 0.7  # paired, strongly correlated item scores
    # with a 5-point tolerance the drop is not a regression beyond the tolerance
    loose = C.compare_scores(_side(range(n), base), _side(range(n), cand), max_drop=0.05)
    assert not loose["regression"] and loose["verdict"] == "within_max_drop"


def test_half_point_regression_is_not_detectable_with_mde():
    n = 1319
    base, cand = _binary_pair(n, 0.80, 30, 23, seed=2)  # net -7 items = -0.53 points
    res = C.compare_scores(_side(range(n), base), _side(range(n), cand))
    assert res["delta"] == pytest.approx(-7 / n, abs=TOL)
    assert not res["significant"] and not res["regression"]
    assert not res["detectable"] and res["verdict"] == "not_detectable"
    d = cand - base
    mde = (st.norm.ppf(0.975) + st.norm.ppf(0.8)) * st.sem(d)
    assert res["mde"] == pytest.approx(mde, abs=TOL)
    assert abs(res["delta"]) < res["mde"] < 0.03


def test_unpaired_flips_examples_and_categories():
    base = _side(["q1", "q2", "q3", "q4", "q5"], [1, 1, 0, 0.5, 1], categories=list("aabbb"))
    cand = _side(["q2", "q3", "q4", "q5", "q6", "q7"], [0, 1, 0.25, 1, 1, 0])
    res = C.compare_scores(base, cand)
    assert res["n_paired"] == 4 and res["n_unpaired_base"] == 1 and res["n_unpaired_cand"] == 2
    assert res["flips"]["better_to_worse"] == {"count": 2, "examples": ["q2", "q4"]}
    assert res["flips"]["worse_to_better"] == {"count": 1, "examples": ["q3"]}
    assert set(res["per_category"]) == {"a", "b"}
    assert res["per_category"]["a"]["delta"] == -1.0 and res["per_category"]["a"]["n_items"] == 1
    assert res["per_category"]["b"]["delta"] == pytest.approx((1 - 0.25) / 3, abs=TOL)
    assert res["test"] == "sign_flip_exact"
    json.dumps(res, allow_nan=False)


def test_compare_accepts_item_table_output_and_rejects_duplicates():
    rng = np.random.default_rng(8)
    pid = np.repeat(np.arange(100), 3)
    a = S.item_table(pid, (rng.random(300) < 0.6).astype(float))
    b = S.item_table(pid, (rng.random(300) < 0.6).astype(float))
    res = C.compare_scores(a, b)
    assert res["n_paired"] == 100 and res["test"] == "sign_flip"
    with pytest.raises(ValueError, match="unique"):
        C.compare_scores(_side([1, 1], [0, 1]), _side([1], [1]))


def test_empty_overlap():
    res = C.compare_scores(_side([1, 2], [1, 0]), _side([3], [1]))
    assert res["n_paired"] == 0 and res["delta"] is None and res["verdict"] == "inconclusive"
    json.dumps(res, allow_nan=False)


def test_se_within_from_repeats_matches_loop():
    rng = np.random.default_rng(10)
    n, k = 200, 4
    pid = np.repeat(np.arange(n), k)
    p = rng.beta(2, 2, n)
    rb = (rng.random(n * k) < np.repeat(p, k)).astype(float)
    rc = (rng.random(n * k) < np.repeat(p, k)).astype(float)
    rc[rng.random(n * k) < 0.05] = np.nan
    a, b = S.item_table(pid, rb), S.item_table(pid, rc)
    res = C.compare_scores(a, b)
    total = 0.0
    for q in range(n):
        xb, xc = rb[pid == q], rc[pid == q]
        xc = xc[~np.isnan(xc)]
        total += np.var(xb, ddof=1) / len(xb) + np.var(xc, ddof=1) / len(xc)
    assert res["se_within"] == pytest.approx(math.sqrt(total) / n, abs=TOL)
    assert res["repeats_base"] == pytest.approx(4.0) and res["repeats_cand"] < 4.0
    assert res["se_within"] < res["se"]
