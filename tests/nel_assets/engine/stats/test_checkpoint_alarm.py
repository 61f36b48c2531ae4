"""The checkpoint regression alarm: hand-computed paired deltas, planted drops, errors, and
the false-alarm rate by simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as st
from scipy.special import expit

from benchmarks.errors import NelError
from nel_assets.engine.stats.checkpoint_alarm import (
    Checkpoint,
    checkpoint_alarm,
    cusum_threshold,
    paired_delta,
)


def test_paired_delta_and_se_by_hand():
    prev = {"a": 1.0, "b": 0.0, "c": 1.0, "d": [1.0, 0.0], "gone": 1.0}
    # "d" averages its repeats (a failed NaN repeat is left out); "new" is not shared.
    cur = {"a": 0.0, "b": 0.0, "c": 1.0, "d": [1.0, 0.0, float("nan")], "new": 0.0}
    res = checkpoint_alarm([(100, prev), (200, cur)])
    first, row = res.rows
    assert (first.step, first.delta, first.alarm) == (100, None, False)
    # differences over shared items a, b, c, d: [-1, 0, 0, 0]
    assert row.n_shared == 4 and row.prev_step == 100 and row.step == 200
    assert row.delta == pytest.approx(-0.25)
    # sd = sqrt(((-0.75)^2 + 3 * 0.25^2) / 3) = 0.5; se = 0.5 / sqrt(4)
    assert row.se == pytest.approx(0.25)
    # t = -1 with 3 df, mapped to the normal score with the same tail probability
    assert row.statistic == pytest.approx(st.norm.ppf(st.t.cdf(-1.0, 3)), abs=1e-9)
    assert res.step_noise == pytest.approx(0.25)


def test_step_noise_is_rms_of_paired_ses():
    a = {i: float(i % 2) for i in range(10)}
    b = {i: float(i % 3 == 0) for i in range(10)}
    c = {i: float(i % 4 == 0) for i in range(10)}
    res = checkpoint_alarm([(1, a), (2, b), (3, c)])
    ses = []
    for x, y in ((a, b), (b, c)):
        d = np.array([y[i] - x[i] for i in range(10)])
        ses.append(d.std(ddof=1) / math.sqrt(10))
        assert paired_delta(x, y)[2] == pytest.approx(ses[-1])
    assert res.step_noise == pytest.approx(math.sqrt((ses[0] ** 2 + ses[1] ** 2) / 2))
    assert [r.se for r in res.rows[1:]] == pytest.approx(ses)


def _series(rng, *, n_ckpt: int, items: int, drop_at: int | None, drop_logit: float,
            walk: bool = False):
    """Binary item scores per checkpoint from a latent item model (see the bench)."""
    difficulty = rng.normal(0, 1.5, items)
    if walk:  # persistent per-item changes: consecutive deltas are independent
        noise = np.cumsum(rng.normal(0, 0.3, (n_ckpt, items)), axis=0)
    else:
        noise = rng.normal(0, 0.3, (n_ckpt, items))
    ability = np.full(n_ckpt, 0.5)
    if drop_at is not None:
        ability[drop_at:] -= drop_logit
    p = expit(ability[:, None] - difficulty[None, :] + noise)
    x = (rng.random((n_ckpt, items)) < p).astype(float).tolist()
    return [Checkpoint(10 * (t + 1), dict(enumerate(x[t]))) for t in range(n_ckpt)]


def test_alarm_fires_at_a_planted_large_drop_and_not_before():
    rng = np.random.default_rng(7)
    for _ in range(5):
        series = _series(rng, n_ckpt=8, items=400, drop_at=5, drop_logit=1.5)
        res = checkpoint_alarm(series)
        assert res.first_alarm_step == series[5].step
        assert [r.alarm for r in res.rows[:5]] == [False] * 5
        assert res.rows[5].statistic < -(res.threshold + res.reference)
        assert res.rows[5].delta < -0.15


def test_identical_checkpoints_never_alarm():
    scores = {i: [float(i % 2), float(i % 3 == 0)] for i in range(50)}
    res = checkpoint_alarm([(s, dict(scores)) for s in range(0, 60, 10)])
    assert res.first_alarm_step is None
    assert all(r.delta == 0.0 and r.statistic == 0.0 and not r.alarm for r in res.rows[1:])
    assert res.step_noise == 0.0


def test_uniform_drop_with_no_spread_uses_the_sign_test():
    up = {i: 1.0 for i in range(12)}
    down = {i: 0.0 for i in range(12)}
    res = checkpoint_alarm([(1, up), (2, up), (3, down)])
    row = res.rows[2]
    assert row.delta == -1.0 and row.se == 0.0
    assert row.statistic == pytest.approx(st.norm.ppf(0.5**12))
    assert res.first_alarm_step == 3
    # one shared item carries no evidence either way
    one = checkpoint_alarm([(1, {"q": 1.0}), (2, {"q": 0.0})])
    assert one.rows[1].statistic == 0.0 and one.rows[1].se is None and one.first_alarm_step is None


@pytest.mark.parametrize(
    ("series", "needle"),
    [
        ([(1, {"a": 1.0})], "at least 2 checkpoints"),
        ([], "at least 2 checkpoints"),
        ([(1, {"a": 1.0}), (2, {"b": 1.0})], "share no scored item"),
        ([(1, {"a": 1.0}), (2, {"a": float("nan")})], "share no scored item"),
        ([(2, {"a": 1.0}), (1, {"a": 1.0})], "steps must increase: step 1 comes after step 2"),
        ([(2, {"a": 1.0}), (2, {"a": 1.0})], "steps must increase"),
        ([(1, {"a": 1.5}), (2, {"a": 1.0})], "outside [0, 1]"),
        ([(1, {"a": "yes"}), (2, {"a": 1.0})], "not a number"),
        ([(1, [0.5]), (2, {"a": 1.0})], "scores must map item id"),
        ([(1, {"a": 1.0}), (2.5, {"a": 1.0})], "step must be an integer"),
        ([("1k", {"a": 1.0}), (2, {"a": 1.0})], "step must be an integer"),
        ([1, 2], "must be (step, scores)"),
    ],
)
def test_bad_input_is_a_one_line_error(series, needle):
    with pytest.raises(NelError) as exc:
        checkpoint_alarm(series)
    msg = str(exc.value)
    assert needle in msg and "\n" not in msg


def test_bad_parameters_are_one_line_errors():
    ok = [(1, {"a": 1.0}), (2, {"a": 1.0})]
    for kwargs in ({"alpha": 0.0}, {"alpha": 1.5}, {"horizon": 1}, {"reference": -1.0}):
        with pytest.raises(NelError) as exc:
            checkpoint_alarm(ok, **kwargs)
        assert "\n" not in str(exc.value)


def _binomial_bound(n: int, alpha: float, tail: float = 1e-3) -> int:
    """The largest false-alarm count a rate ≤ alpha exceeds with probability < ``tail``."""
    return int(st.binom.ppf(1 - tail, n, alpha))


def test_threshold_calibration_matches_monte_carlo():
    """i.i.d. N(0, 1) scores (the calibration's model): the rate is alpha, not just ≤ alpha."""
    rng = np.random.default_rng(11)
    n, steps, alpha = 20_000, 9, 0.05
    h = cusum_threshold(alpha, steps, 1.5)
    z = rng.standard_normal((n, steps))
    c = np.zeros(n)
    fired = np.zeros(n, dtype=bool)
    for j in range(steps):
        c = np.maximum(0.0, c - z[:, j] - 1.5)
        fired |= c > h
    # 3.3 binomial SDs either side of alpha (a miscalibration of 0.01 would fail)
    sd = math.sqrt(alpha * (1 - alpha) / n)
    assert abs(fired.mean() - alpha) < 3.3 * sd
    assert cusum_threshold(0.01, steps, 1.5) > h > cusum_threshold(alpha, 2, 1.5)


@pytest.mark.parametrize("walk", [False, True], ids=["fresh-noise", "random-walk"])
def test_false_alarm_rate_on_300_clean_series_is_controlled(walk):
    rng = np.random.default_rng(2026 + walk)
    n_series, alpha = 300, 0.05
    clean = [_series(rng, n_ckpt=10, items=150, drop_at=None, drop_logit=0.0, walk=walk)
             for _ in range(n_series)]
    fa = sum(checkpoint_alarm(s, alpha=alpha, horizon=10).first_alarm_step is not None
             for s in clean)
    bound = _binomial_bound(n_series, alpha)  # 26 of 300
    assert fa <= bound, (fa, bound)
    # The same count can fail: a threshold for alpha = 0.3 is over the bound on these series.
    loose = sum(checkpoint_alarm(s, alpha=0.3, horizon=10).first_alarm_step is not None
                for s in clean)
    assert loose > bound, (loose, bound)
