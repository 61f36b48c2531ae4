"""Every statistic in ``nel_assets.engine.stats`` against an independent reference."""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict

import numpy as np
import pytest
from scipy import stats as st

from nel_assets.engine import stats as S

TOL = 1e-9


def _rows(seed: int, n: int = 300, k: int = 4, fail: float = 0.03):
    rng = np.random.default_rng(seed)
    pid = np.repeat(rng.permutation(n) + 1000, k)  # non-contiguous ids, unsorted order
    p = rng.beta(1.5, 1.5, n)
    reward = (rng.random(n * k) < np.repeat(p, k)).astype(float)
    reward[rng.random(n * k) < fail] = np.nan
    return rng, pid, reward


def _plain(obj) -> None:
    """Recursively assert only JSON-native Python types (no numpy scalars, no NaN)."""
    if isinstance(obj, dict):
        for key, v in obj.items():
            assert isinstance(key, str)
            _plain(v)
    elif isinstance(obj, list):
        for v in obj:
            _plain(v)
    else:
        assert obj is None or type(obj) in (bool, int, float, str), type(obj)
        if isinstance(obj, float):
            assert math.isfinite(obj)


# ---------------------------------------------------------------- item means


def test_item_means_matches_loop_and_drops_failed():
    _, pid, reward = _rows(1)
    pid = np.concatenate([pid, [7, 7]])  # a question whose every request failed
    reward = np.concatenate([reward, [np.nan, np.nan]])
    ids, means, counts = S.item_means(pid, reward)
    ref = defaultdict(list)
    for q, r in zip(pid.tolist(), reward.tolist(), strict=True):
        if not math.isnan(r):
            ref[q].append(r)
    assert 7 not in ids.tolist()
    assert sorted(ref) == ids.tolist()
    for q, m, c in zip(ids.tolist(), means, counts, strict=True):
        assert m == pytest.approx(sum(ref[q]) / len(ref[q]), abs=TOL)
        assert c == len(ref[q])


def test_failed_request_is_not_scored_as_wrong():
    pid = np.array([0, 0, 1, 1])
    s = S.score_summary(pid, np.array([1.0, np.nan, 1.0, 1.0]))
    assert s["mean"] == 1.0
    assert s["n_failed_samples"] == 1 and s["n_samples"] == 3
    s = S.score_summary(np.array([0, 1]), [1.0, None])  # Arrow nulls arrive as None
    assert s["mean"] == 1.0 and s["n_items_dropped"] == 1 and s["n_items"] == 1


# ---------------------------------------------------------------- mean / CI


@pytest.mark.parametrize("seed", range(3))
def test_mean_ci_clt_matches_scipy(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(0.3, 1.0, 200)
    res = S.mean_ci(x)
    assert res["mean"] == pytest.approx(x.mean(), abs=TOL)
    assert res["se"] == pytest.approx(st.sem(x), abs=TOL)
    lo, hi = st.norm.interval(0.95, loc=x.mean(), scale=st.sem(x))
    assert (res["ci_low"], res["ci_high"]) == pytest.approx((lo, hi), abs=TOL)
    assert res["se_method"] == "clt" and res["ci_dist"] == "normal"


def test_mean_ci_small_n_uses_t():
    x = np.array([0.1, 0.4, 0.35, 0.8, 0.2, 0.9, 0.5])
    res = S.mean_ci(x, level=0.9)
    lo, hi = st.t.interval(0.9, len(x) - 1, loc=x.mean(), scale=st.sem(x))
    assert (res["ci_low"], res["ci_high"]) == pytest.approx((lo, hi), abs=TOL)
    assert res["ci_dist"] == "t" and res["df"] == 6


def _cluster_se_loop(x, groups):
    n = len(x)
    xbar = sum(x) / n
    sums: dict = defaultdict(float)
    for v, g in zip(x, groups, strict=True):
        sums[g] += v - xbar
    g = len(sums)
    return math.sqrt(g / (g - 1) * sum(s * s for s in sums.values())) / n


@pytest.mark.parametrize("seed", range(3))
def test_clustered_se_matches_loop_and_statsmodels(seed):
    rng = np.random.default_rng(seed)
    groups = rng.integers(0, 40, 400)
    x = rng.normal(size=40)[groups] + rng.normal(size=400)
    res = S.mean_ci(x, clusters=groups)
    assert res["se"] == pytest.approx(_cluster_se_loop(x.tolist(), groups.tolist()), abs=TOL)
    assert res["n_clusters"] == len(np.unique(groups))
    sm = pytest.importorskip("statsmodels.api")
    fit = sm.OLS(x, np.ones((len(x), 1))).fit(cov_type="cluster", cov_kwds={"groups": groups})
    assert res["se"] == pytest.approx(float(fit.bse[0]), abs=TOL)
    assert res["mean"] == pytest.approx(float(fit.params[0]), abs=TOL)


def test_singleton_clusters_equal_plain_se_and_string_labels():
    rng = np.random.default_rng(5)
    x = rng.random(120)
    plain = S.mean_ci(x)["se"]
    assert S.mean_ci(x, clusters=np.arange(120))["se"] == pytest.approx(plain, abs=TOL)
    # missing labels are singleton clusters, string/object labels work
    labels = np.array([None] * 120, dtype=object)
    assert S.mean_ci(x, clusters=labels)["se"] == pytest.approx(plain, abs=TOL)
    labels = np.array([f"p{i // 3}" for i in range(120)], dtype=object)
    ref = _cluster_se_loop(x.tolist(), labels.tolist())
    assert S.mean_ci(x, clusters=labels)["se"] == pytest.approx(ref, abs=TOL)


def test_mean_ci_degenerate_inputs_are_none():
    assert S.mean_ci([])["mean"] is None
    one = S.mean_ci([0.5])
    assert one["mean"] == 0.5 and one["se"] is None and one["ci_low"] is None
    assert S.mean_ci([1.0, 0.0], clusters=["a", "a"])["se"] is None


# ---------------------------------------------------------------- Wilson


@pytest.mark.parametrize(("s", "n"), [(0, 10), (3, 10), (10, 10), (417, 1319), (1, 2)])
def test_wilson_matches_formula_and_statsmodels(s, n):
    lo, hi = S.wilson_ci(s, n)
    z = st.norm.ppf(0.975)
    p = s / n
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert (lo, hi) == pytest.approx((max(c - h, 0), min(c + h, 1)), abs=TOL)
    smp = pytest.importorskip("statsmodels.stats.proportion")
    ref = smp.proportion_confint(s, n, alpha=0.05, method="wilson")
    assert (lo, hi) == pytest.approx(ref, abs=TOL)


def test_wilson_vectorised():
    lo, _hi = S.wilson_ci(np.array([1, 5]), np.array([10, 10]))
    assert lo.shape == (2,) and lo[1] == pytest.approx(S.wilson_ci(5, 10)[0], abs=TOL)


# ---------------------------------------------------------------- pass@k


def test_pass_at_k_matches_comb():
    rng = np.random.default_rng(3)
    n = rng.integers(1, 60, 500)
    c = rng.integers(0, n + 1)
    k = np.minimum(rng.integers(1, 60, 500), n)
    got = S.pass_at_k(n, c, k)
    ref = [
        1 - math.comb(int(a - b), int(kk)) / math.comb(int(a), int(kk))
        for a, b, kk in zip(n, c, k, strict=True)
    ]
    np.testing.assert_allclose(got, ref, atol=TOL, rtol=0)
    assert S.pass_at_k(10, 3, 11) != S.pass_at_k(10, 3, 11)  # k > n: NaN, not a number
    assert S.pass_at_k(200, 1, 100) == pytest.approx(0.5, abs=TOL)
    # large n: no overflow, still exact
    assert S.pass_at_k(5000, 7, 2500) == pytest.approx(
        1 - math.comb(4993, 2500) / math.comb(5000, 2500), abs=TOL
    )


def test_pass_at_k_table_default_ks_and_ref():
    _, pid, reward = _rows(4, n=200, k=8, fail=0.0)
    tab = S.pass_at_k_table(pid, reward)
    assert list(tab) == ["1", "2", "4", "8"]
    ids, _, _ = S.item_means(pid, reward)
    for k in (1, 2, 4, 8):
        vals = []
        for q in ids:
            r = reward[pid == q]
            vals.append(1 - math.comb(len(r) - int(r.sum()), k) / math.comb(len(r), k))
        assert tab[str(k)]["mean"] == pytest.approx(np.mean(vals), abs=TOL)
        assert tab[str(k)]["se"] == pytest.approx(st.sem(vals), abs=TOL)
    assert tab["1"]["mean"] == pytest.approx(S.score_summary(pid, reward)["mean"], abs=TOL)
    _, pid, reward = _rows(4, n=50, k=6, fail=0.0)
    assert list(S.pass_at_k_table(pid, reward)) == ["1", "2", "4", "6"]


def test_pass_at_k_table_items_short_of_k_are_reported():
    pid = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    reward = np.array([1, 0, 0, 0, 1, np.nan, 1, 1.0])
    tab = S.pass_at_k_table(pid, reward)
    assert tab["4"]["n_items"] == 1 and tab["2"]["n_items"] == 2


# ---------------------------------------------------------------- maj@k


def _maj_loop(pid, ext, corr, rep, k):
    by_q = defaultdict(list)
    for q, e, c, r in zip(pid, ext, corr, rep, strict=True):
        if not math.isnan(c):
            by_q[q].append((r, e, c))
    scores = []
    for q in sorted(by_q):
        samples = sorted(by_q[q], key=lambda t: t[0])
        if len(samples) < k:
            continue
        first = samples[:k]
        votes = Counter(e for _, e, _ in first if e)
        if not votes:
            scores.append(0.0)
            continue
        top = max(votes.values())
        order = [e for _, e, _ in first if e and votes[e] == top]
        win = order[0]
        cs = [c for _, e, c in first if e == win]
        scores.append(sum(cs) / len(cs))
    return float(np.mean(scores)), len(scores)


@pytest.mark.parametrize("seed", range(3))
def test_maj_at_k_matches_loop(seed):
    rng = np.random.default_rng(seed)
    n, k = 150, 8
    pid = np.repeat(np.arange(n), k)
    rep = np.tile(np.arange(k), n)
    perm = rng.permutation(n * k)  # shuffled rows: ordering must come from `repeat`
    pid, rep = pid[perm], rep[perm]
    truth = rng.integers(0, 4, n)
    ans = rng.integers(0, 4, n * k)
    ext = np.array([str(a) for a in ans], dtype=object)
    ext[rng.random(n * k) < 0.1] = None
    corr = (ans == truth[pid]).astype(float)
    corr[rng.random(n * k) < 0.05] = np.nan
    got = S.maj_at_k(pid, ext, corr, [1, 2, 3, 4, 8], repeat=rep)
    for kk in (1, 2, 3, 4, 8):
        ref, n_items = _maj_loop(pid.tolist(), ext.tolist(), corr.tolist(), rep.tolist(), kk)
        assert got[str(kk)]["mean"] == pytest.approx(ref, abs=TOL)
        assert got[str(kk)]["n_items"] == n_items


def test_maj_at_k_tie_goes_to_first_answer():
    pid = [0, 0, 0, 0]
    ext = ["5", "7", "7", "5"]
    corr = [1.0, 0.0, 0.0, 1.0]
    assert S.maj_at_k(pid, ext, corr, [2, 4])["2"]["mean"] == 1.0  # 1-1 tie: "5" came first
    assert S.maj_at_k(pid, ext, corr, [3])["3"]["mean"] == 0.0  # 2-1: "7"


# ---------------------------------------------------------------- repeats


def test_repeat_variance_matches_loop():
    _, pid, reward = _rows(7, n=250, k=5, fail=0.05)
    rv = S.repeat_variance(pid, reward)
    groups = defaultdict(list)
    for q, r in zip(pid.tolist(), reward.tolist(), strict=True):
        if not math.isnan(r):
            groups[q].append(r)
    means = [np.mean(v) for v in groups.values()]
    within = np.mean([np.var(v, ddof=1) for v in groups.values() if len(v) >= 2])
    k_h = len(groups) / sum(1 / len(v) for v in groups.values())
    between = max(np.var(means, ddof=1) - within / k_h, 0)
    n = len(groups)
    assert rv["within_var"] == pytest.approx(within, abs=TOL)
    assert rv["between_var"] == pytest.approx(between, abs=TOL)
    assert rv["se_current"] == pytest.approx(st.sem(means), abs=TOL)
    assert rv["se_by_repeats"]["8"] == pytest.approx(math.sqrt((between + within / 8) / n), abs=TOL)
    assert rv["se_by_repeats"]["inf"] < rv["se_by_repeats"]["32"] < rv["se_by_repeats"]["1"]


def test_repeat_variance_predicts_se():
    """Miller's decomposition: the projected SE for K'=1 matches the SE of a 1-repeat run."""
    rng = np.random.default_rng(11)
    n, k = 2000, 8
    p = rng.beta(0.7, 0.7, n)
    pid = np.repeat(np.arange(n), k)
    reward = (rng.random(n * k) < np.repeat(p, k)).astype(float)
    rv = S.repeat_variance(pid, reward)
    one = S.mean_ci(reward[::k])["se"]  # the first repeat only
    assert rv["se_by_repeats"]["1"] == pytest.approx(one, rel=0.05)
    assert rv["se_by_repeats"]["8"] == pytest.approx(rv["se_current"], rel=0.01)


def test_repeat_variance_single_sample_has_no_decomposition():
    rv = S.repeat_variance(np.arange(50), np.random.default_rng(0).random(50))
    assert rv["within_var"] is None and rv["se_current"] is not None


# ---------------------------------------------------------------- summary / category


def test_score_summary_keys_types_and_values():
    _, pid, reward = _rows(8, n=240, k=4)
    cat = np.array(["alg", "geo", "num"], dtype=object)[pid % 3]
    clus = (pid // 4).astype(object)
    ext = np.where(reward == 1, "42", "x").astype(object)
    s = S.score_summary(pid, reward, category=cat, cluster=clus, extracted=ext)
    json.dumps(s, allow_nan=False)
    _plain(s)
    expected = {
        "mean",
        "se",
        "se_note",
        "ci_low",
        "ci_high",
        "ci_method",
        "ci_n_eff",
        "ci_note",
        "level",
        "se_method",
        "ci_dist",
        "n_items",
        "n_samples",
        "n_failed_samples",
        "n_items_dropped",
        "n_repeats",
        "binary",
        "pass_at_k",
        "maj_at_k",
        "repeat_variance",
        "per_category",
        "n_clusters",
    }
    assert set(s) == expected
    ids, means, _ = S.item_means(pid, reward)
    assert s["mean"] == pytest.approx(means.mean(), abs=TOL)
    item_clus = np.array([q // 4 for q in ids])
    assert s["se"] == pytest.approx(_cluster_se_loop(means.tolist(), item_clus.tolist()), abs=TOL)
    assert s["se_method"] == "clustered" and s["n_clusters"] == len(set(item_clus.tolist()))
    assert s["n_repeats"] == 4 and s["binary"] is True
    assert s["ci_method"] == "wilson_effective_n"  # clustered means of repeats
    assert s["n_failed_samples"] == int(np.isnan(reward).sum())
    assert set(s["pass_at_k"]) == {"1", "2", "4"} and set(s["maj_at_k"]) == {"1", "2", "4"}
    assert set(s["per_category"]) == {"alg", "geo", "num"}
    assert sum(v["n_items"] for v in s["per_category"].values()) == s["n_items"]


def test_score_summary_single_repeat_binary_has_wilson():
    rng = np.random.default_rng(2)
    reward = (rng.random(400) < 0.3).astype(float)
    s = S.score_summary(np.arange(400), reward)
    assert (s["ci_low"], s["ci_high"]) == pytest.approx(
        S.wilson_ci(int(reward.sum()), 400), abs=TOL
    )
    assert s["ci_method"] == "wilson" and s["ci_n_eff"] == 400
    assert s["se"] == pytest.approx(st.sem(reward), abs=TOL)
    assert s["maj_at_k"] is None and s["per_category"] is None and s["n_clusters"] is None
    _plain(s)


def test_score_summary_non_binary_has_no_pass_at_k():
    s = S.score_summary(np.arange(50), np.linspace(0, 1, 50))
    assert s["binary"] is False and s["pass_at_k"] == {}
    assert s["ci_method"] == "wilson_effective_n" and s["ci_note"] is None


def test_score_summary_empty():
    s = S.score_summary(np.array([1, 2]), np.array([np.nan, np.nan]))
    assert s["mean"] is None and s["n_items"] == 0 and s["n_items_dropped"] == 2
    json.dumps(s, allow_nan=False)


def test_per_category_matches_direct():
    rng = np.random.default_rng(9)
    pid = np.repeat(np.arange(90), 2)
    reward = rng.random(180)
    cat = np.array(["a", "b", None], dtype=object)[pid % 3]
    out = S.per_category(pid, reward, cat)
    assert set(out) == {"a", "b", "(none)"}
    ids, means, _ = S.item_means(pid, reward)
    a = means[ids % 3 == 0]
    assert out["a"]["mean"] == pytest.approx(a.mean(), abs=TOL)
    assert out["a"]["se"] == pytest.approx(st.sem(a), abs=TOL)
    assert out["a"]["n_items"] == 30


def test_item_table_round_trip():
    pid = np.array([3, 3, 1, 1, 2])
    tab = S.item_table(pid, [1.0, 0.0, 1.0, np.nan, np.nan], cluster=["x", "x", "y", "y", "z"])
    assert tab["items"] == [1, 3] and tab["scores"] == [1.0, 0.5]
    assert tab["clusters"] == ["y", "x"] and tab["n_samples"] == [1, 2]
    _plain(tab)


# ---------------------------------------------------------------- bootstrap


def test_bootstrap_seeded_and_matches_loop():
    rng = np.random.default_rng(0)
    x = rng.exponential(size=300)
    a = S.bootstrap_ci(np.median, x, n_resamples=2000, seed=42)
    b = S.bootstrap_ci(np.median, x, n_resamples=2000, seed=42)
    assert a == b
    assert S.bootstrap_ci(np.median, x, n_resamples=2000, seed=43) != a
    # reference: the same index stream, one resample at a time
    idx = np.random.default_rng(42).integers(0, 300, size=(2000, 300))
    ref = np.array([np.median(x[i]) for i in idx])
    assert a["ci_low"] == pytest.approx(np.quantile(ref, 0.025), abs=TOL)
    assert a["ci_high"] == pytest.approx(np.quantile(ref, 0.975), abs=TOL)
    assert a["se"] == pytest.approx(ref.std(ddof=1), abs=TOL)
    assert a["estimate"] == pytest.approx(np.median(x), abs=TOL)


def test_bootstrap_of_mean_agrees_with_analytic():
    x = np.random.default_rng(1).normal(size=500)
    b = S.bootstrap_ci(np.mean, x, n_resamples=10_000, seed=0, max_block=1_000_000)
    a = S.mean_ci(x)
    assert b["se"] == pytest.approx(a["se"], rel=0.05)
    assert b["ci_low"] == pytest.approx(a["ci_low"], abs=0.2 * a["se"])


def test_score_interval_stays_in_the_unit_range_with_few_items() -> None:
    # 3 of 6 right: the t interval alone reaches below 0 and above 1; Wilson stays inside.
    s = S.score_summary(np.arange(6), np.array([1, 0, 1, 0, 1, 0.0]))
    raw = S.mean_ci(np.array([1, 0, 1, 0, 1, 0.0]))
    assert raw["ci_low"] < 0 < 1 < raw["ci_high"]
    assert (s["ci_low"], s["ci_high"]) == pytest.approx(S.wilson_ci(3, 6), abs=TOL)
    assert 0 < s["ci_low"] < 0.5 < s["ci_high"] < 1 and s["ci_method"] == "wilson"


def _wilson_at(p: float, n_eff: float) -> tuple[float, float]:
    """Wilson's formula with a real-valued n (the effective-n interval's definition)."""
    z = st.norm.ppf(0.975)
    c = (p + z * z / (2 * n_eff)) / (1 + z * z / n_eff)
    h = z / (1 + z * z / n_eff) * math.sqrt(p * (1 - p) / n_eff + z * z / (4 * n_eff**2))
    return max(c - h, 0.0), min(c + h, 1.0)


@pytest.mark.parametrize("value", [0.0, 1.0])
def test_all_right_or_all_wrong_with_repeats_is_not_a_point(value: float) -> None:
    """Every repeat of every question right (or wrong): Wilson with n = questions, SE undefined."""
    pid = np.repeat(np.arange(25), 4)
    s = S.score_summary(pid, np.full(100, value))
    assert s["mean"] == value and s["se"] is None
    assert s["se_note"] == "undefined (no variation in the scores)"
    assert (s["ci_low"], s["ci_high"]) == pytest.approx(S.wilson_ci(25 * value, 25), abs=TOL)
    assert s["ci_method"] == "wilson" and s["ci_n_eff"] == 25
    assert s["ci_high"] - s["ci_low"] > 0.1  # 25 questions cannot pin a score to 0 or 1
    json.dumps(s, allow_nan=False)


def test_effective_n_interval_matches_formula() -> None:
    """Means of repeats: Wilson at n_eff = p(1-p)/SE², t-adjusted below 30 questions."""
    rng = np.random.default_rng(12)
    for n in (12, 300):
        pid = np.repeat(np.arange(n), 4)
        reward = (rng.random(4 * n) < np.repeat(rng.beta(3, 1, n), 4)).astype(float)
        s = S.score_summary(pid, reward)
        means = reward.reshape(n, 4).mean(1)
        p, se = means.mean(), st.sem(means)
        n_eff = p * (1 - p) / se**2
        if n < 30:  # Korn & Graubard's small-sample factor (z / t_{n-1})²
            n_eff *= (st.norm.ppf(0.975) / st.t.ppf(0.975, n - 1)) ** 2
        n_eff = min(n_eff, 4 * n)
        assert s["ci_method"] == "wilson_effective_n"
        assert s["ci_n_eff"] == pytest.approx(n_eff, rel=1e-9)
        assert (s["ci_low"], s["ci_high"]) == pytest.approx(_wilson_at(p, n_eff), abs=TOL)
        assert s["se"] == pytest.approx(se, abs=TOL)


def test_undefined_quantities_are_said() -> None:
    one = S.score_summary(np.array([0]), np.array([1.0]))
    assert one["se"] is None and one["se_note"] == "undefined (1 item)"
    assert (one["ci_low"], one["ci_high"]) == pytest.approx(S.wilson_ci(1, 1), abs=TOL)
    none = S.score_summary(np.array([0, 1]), np.array([np.nan, np.nan]))
    assert none["ci_low"] is None and none["ci_method"] is None
    assert none["ci_note"] == "undefined (no scored items)"
    # unbounded rewards keep the t/normal interval, labelled as such
    wide = S.score_interval(np.array([-3.0, 2.0, 5.0, 1.0]))
    assert wide["ci_method"] == "t" and wide["ci_low"] < -3.0
    # graded scores with no variation: SE undefined, Wilson with n = items (never a point)
    flat = S.score_interval(np.full(40, 0.5))
    assert flat["se"] is None and flat["ci_note"].startswith("SE not estimable")
    assert (flat["ci_low"], flat["ci_high"]) == pytest.approx(S.wilson_ci(20, 40), abs=TOL)


def test_zero_clustered_se_is_undefined_not_zero() -> None:
    # two clusters whose residual sums are both 0: the CR1 SE is exactly 0, which is no SE
    s = S.score_interval(np.array([0.0, 1.0, 0.0, 1.0]), clusters=["a", "a", "b", "b"])
    assert s["se"] is None and s["se_note"] == "undefined (no variance between clusters)"
    assert s["ci_method"] == "wilson_effective_n" and s["ci_n_eff"] == 2.0
    assert (s["ci_low"], s["ci_high"]) == pytest.approx(S.wilson_ci(1, 2), abs=TOL)
