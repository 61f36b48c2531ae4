"""Coverage by simulation: the CIs we report must cover the truth at their nominal rate.

Binary items are generated from a latent Gaussian with a shared cluster effect, so the true
accuracy is known exactly: P(a + u + e > 0) = Φ(a / sqrt(σ_u² + σ_e²)).
"""

from __future__ import annotations

import numpy as np
from scipy import stats as st

from nel_assets.engine import stats as S

N_SIM = 1500


def _coverage(lo: np.ndarray, hi: np.ndarray, truth: float) -> float:
    return float(np.mean((lo <= truth) & (truth <= hi)))


def test_clustered_ci_covers_and_naive_undercovers():
    rng = np.random.default_rng(2024)
    n_clusters, size = 200, 5
    a, su, se = 0.3, 1.0, 0.7
    truth = float(st.norm.cdf(a / np.hypot(su, se)))
    u = rng.normal(0, su, (N_SIM, n_clusters, 1))
    e = rng.normal(0, se, (N_SIM, n_clusters, size))
    x = (a + u + e > 0).reshape(N_SIM, -1).astype(float)
    clusters = np.repeat(np.arange(n_clusters), size)
    lo_c, hi_c, lo_n, hi_n = (np.empty(N_SIM) for _ in range(4))
    for i in range(N_SIM):  # the real function, once per simulated eval
        c = S.mean_ci(x[i], clusters)
        nv = S.mean_ci(x[i])
        lo_c[i], hi_c[i], lo_n[i], hi_n[i] = c["ci_low"], c["ci_high"], nv["ci_low"], nv["ci_high"]
    clustered = _coverage(lo_c, hi_c, truth)
    naive = _coverage(lo_n, hi_n, truth)
    print(f"clustered={clustered:.3f} naive={naive:.3f}")
    assert 0.93 <= clustered <= 0.97, clustered
    assert naive < 0.90, naive


def test_repeats_ci_over_questions_covers_while_per_sample_ci_undercovers():
    """Miller: average repeats per question first; treating n·K samples as iid undercovers."""
    rng = np.random.default_rng(0)
    n, k, sims = 400, 4, 2000
    p = rng.beta(0.6, 0.6, n)  # a population of question difficulties; truth = their mean
    truth = float(p.mean())
    pid = np.repeat(np.arange(n), k)
    cover_item = cover_iid = 0
    for _ in range(sims):
        qs = rng.integers(0, n, n)  # each eval draws its questions from the population
        r = (rng.random((n, k)) < p[qs][:, None]).astype(float).reshape(-1)
        s = S.score_summary(pid, r)
        cover_item += s["ci_low"] <= truth <= s["ci_high"]
        iid = S.mean_ci(r)  # the anti-pattern: SE over n·K samples
        cover_iid += iid["ci_low"] <= truth <= iid["ci_high"]
    print(f"item={cover_item / sims:.3f} iid={cover_iid / sims:.3f}")
    assert 0.93 <= cover_item / sims <= 0.97, cover_item / sims
    assert cover_iid / sims < 0.85, cover_iid / sims


def test_wilson_covers_small_binary():
    rng = np.random.default_rng(3)
    n, p = 40, 0.1
    s = rng.binomial(n, p, 20_000)
    lo, hi = S.wilson_ci(s, np.full(s.shape, n))
    cov = _coverage(lo, hi, p)
    assert 0.92 <= cov <= 0.98, cov


def _boundary_coverage(n: int, k: int, sims: int, seed: int) -> tuple[float, float]:
    """Coverage of the reported score CI and of the plain CLT one, true accuracy ≈ 0.98.

    Questions are drawn from a population whose per-question accuracy is Beta(49, 1) (mean
    0.98, some questions harder than others); the truth is the population's mean.
    """
    rng = np.random.default_rng(seed)
    pop = rng.beta(49.0, 1.0, 5000)
    truth = float(pop.mean())
    pid = np.repeat(np.arange(n), k)
    ours = clt = 0
    for _ in range(sims):
        p = pop[rng.integers(0, pop.shape[0], n)]
        r = (rng.random((n, k)) < p[:, None]).astype(float).reshape(-1)
        s = S.score_summary(pid, r)  # what every surface shows
        assert 0.0 <= s["ci_low"] < s["ci_high"] <= 1.0, s  # never a point, never outside
        ours += s["ci_low"] <= truth <= s["ci_high"]
        c = S.mean_ci(r.reshape(n, k).mean(axis=1))  # the old CLT/t interval
        clt += c["ci_low"] is not None and c["ci_low"] <= truth <= c["ci_high"]
    return ours / sims, clt / sims


def test_score_ci_covers_near_the_boundary_where_clt_does_not():
    """p ≈ 0.98 with few items: all-right runs are common and the CLT interval is [1, 1]."""
    single, single_clt = _boundary_coverage(n=30, k=1, sims=1500, seed=21)
    repeats, repeats_clt = _boundary_coverage(n=15, k=4, sims=1500, seed=22)
    print(f"single={single:.3f} (clt {single_clt:.3f}) repeats={repeats:.3f} (clt {repeats_clt:.3f})")
    assert single >= 0.93, single
    assert repeats >= 0.93, repeats
    assert single_clt < 0.85, single_clt
    assert repeats_clt < 0.85, repeats_clt
