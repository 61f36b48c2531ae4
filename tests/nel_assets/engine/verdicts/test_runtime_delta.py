"""Runtime deltas of two runs against numpy quantiles and scipy's Welch test."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats as st

from nel_assets.engine.verdicts.runtime_delta import runtime_delta


def test_runtime_delta():
    rng = np.random.default_rng(9)
    base = {"model_ms": rng.gamma(2, 200, 400), "completion_tokens": rng.integers(50, 300, 400)}
    cand = {"model_ms": rng.gamma(2, 150, 300), "completion_tokens": rng.integers(50, 300, 300)}
    out = runtime_delta(base, cand)
    lat = out["model_ms"]
    assert lat["delta_mean"] == pytest.approx(cand["model_ms"].mean() - base["model_ms"].mean())
    assert lat["base"]["p95"] == pytest.approx(np.quantile(base["model_ms"], 0.95))
    w = st.ttest_ind(cand["model_ms"], base["model_ms"], equal_var=False)
    lo, hi = w.confidence_interval(0.95)
    assert (lat["ci_low"], lat["ci_high"]) == pytest.approx((lo, hi), abs=1e-6)
    tps = out["tokens_per_s"]
    ref = base["completion_tokens"].sum() / (base["model_ms"].sum() / 1000)
    assert tps["base"] == pytest.approx(ref)
    assert tps["rel_delta"] == pytest.approx(tps["cand"] / tps["base"] - 1)
    json.dumps(out, allow_nan=False)
