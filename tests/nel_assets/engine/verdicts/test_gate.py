"""Gate policy loading and GO / NO-GO / INCONCLUSIVE decisions."""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as st

from nel_assets.engine.verdicts import compare as C
from nel_assets.engine.verdicts import gate as G


def _policy(**benchmarks) -> G.GatePolicy:
    return G.GatePolicy.model_validate(
        {"version": 1, "defaults": {"max_drop": 0.01}, "benchmarks": benchmarks}
    )


def _comp(delta: float, se: float, n: int = 1000, base_mean: float = 0.7, **extra) -> dict:
    return {
        "delta": delta,
        "se": se,
        "n_paired": n,
        "base_mean": base_mean,
        "cand_mean": base_mean + delta,
        "df": None,
        **extra,
    }


def _run(policy, comps, base=None, cand=None):
    names = set(comps)
    return G.decide(policy, comps, names if base is None else base, names if cand is None else cand)


# ---------------------------------------------------------------- loading


def test_load_policy_ok(tmp_path):
    f = tmp_path / "gate.yaml"
    f.write_text(
        textwrap.dedent("""\
        version: 1
        defaults:
          max_drop: 0.01
          direction: higher_is_better
          tier: critical
        benchmarks:
          gsm8k: {tier: critical, max_drop: 0.02}
          aime: {tier: supporting, max_relative_drop: 0.1, metric: "pass@1"}
          ifeval: {tier: advisory}
        """)
    )
    pol = G.load_policy(f)
    assert pol.resolved("gsm8k")["max_drop"] == 0.02
    assert pol.resolved("aime") == {
        "tier": "supporting",
        "max_drop": 0.01,
        "max_relative_drop": 0.1,
        "relative_guard_below": None,
        "metric": "pass@1",
        "direction": "higher_is_better",
    }
    assert pol.resolved("unlisted")["tier"] == "critical"


def test_load_policy_yaml_error_has_line(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("version: 1\nbenchmarks:\n  gsm8k: {tier: critical\n  x: 1\n")
    with pytest.raises(G.PolicyError, match=r"bad\.yaml:\d+:\d+: invalid YAML"):
        G.load_policy(f)


def test_load_policy_unknown_key_line_and_suggestion(tmp_path):
    f = tmp_path / "typo.yaml"
    f.write_text("version: 1\nbenchmarks:\n  gsm8k:\n    tier: critical\n    max_dorp: 0.01\n")
    with pytest.raises(G.PolicyError) as exc:
        G.load_policy(f)
    msg = str(exc.value)
    assert "typo.yaml:5: benchmarks.gsm8k.max_dorp: unknown key" in msg
    assert "did you mean 'max_drop'" in msg


def test_load_policy_bad_values(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("version: 1\ndefaults:\n  tier: blocker\nbenchmarks:\n  a: {max_drop: -1}\n")
    with pytest.raises(G.PolicyError) as exc:
        G.load_policy(f)
    msg = str(exc.value)
    assert "p.yaml:3: defaults.tier:" in msg and "p.yaml:5: benchmarks.a.max_drop:" in msg
    f.write_text("version: 2\n")
    with pytest.raises(G.PolicyError, match=r"p\.yaml:1: version"):
        G.load_policy(f)
    with pytest.raises(G.PolicyError, match="cannot read"):
        G.load_policy(tmp_path / "nope.yaml")


# ---------------------------------------------------------------- decisions


def test_go_nogo_inconclusive_single_critical():
    pol = _policy(gsm8k={"tier": "critical"})
    go = _run(pol, {"gsm8k": _comp(0.001, 0.002)})
    assert go.decision == "GO" and go.passed
    nogo = _run(pol, {"gsm8k": _comp(-0.05, 0.005)})
    assert nogo.decision == "NO-GO" and nogo.benchmarks[0].blocking
    assert "drop beyond allowed 0.0100" in nogo.benchmarks[0].reason
    inc = _run(pol, {"gsm8k": _comp(-0.008, 0.006, n=1319)})
    b = inc.benchmarks[0]
    assert inc.decision == "INCONCLUSIVE" and b.decision == "INCONCLUSIVE"
    # items from the MDE formula solved for n: n' = n (z_{.975}+z_{.8})² se² / gap²
    q = st.norm.ppf(0.975) + st.norm.ppf(0.8)
    n_total = math.ceil(1319 * (0.006 * q / 0.002) ** 2)
    assert b.items_needed == n_total - 1319
    assert f"~{n_total - 1319} more paired items" in b.reason
    assert b.repeats_needed is None


def test_inconclusive_reports_repeats_when_within_noise_known():
    pol = _policy(gsm8k={})
    comp = _comp(0.02, 0.02, n=500, se_within=0.019, repeats_cand=4.0)
    b = _run(pol, {"gsm8k": comp}).benchmarks[0]
    assert b.decision == "INCONCLUSIVE"
    target = 0.03 / (st.norm.ppf(0.975) + st.norm.ppf(0.8))
    r = 1 / (1 - (0.02**2 - target**2) / 0.019**2)
    assert b.repeats_needed == math.ceil(4 * r) and "repeats per item" in b.reason
    comp = _comp(0.02, 0.02, n=500, se_within=0.005, repeats_cand=4.0)
    b = _run(pol, {"gsm8k": comp}).benchmarks[0]
    assert b.repeats_needed is None and "more repeats alone cannot" in b.reason


def test_missing_benchmark_is_nogo():
    pol = _policy(gsm8k={}, mmlu={})
    res = G.decide(pol, {"gsm8k": _comp(0, 0.001)}, {"gsm8k", "mmlu"}, {"gsm8k"})
    mm = {b.name: b for b in res.benchmarks}["mmlu"]
    assert res.decision == "NO-GO" and mm.decision == "NO-GO" and mm.missing
    assert mm.reason == "missing in candidate" and mm.blocking
    res = G.decide(pol, {"gsm8k": _comp(0, 0.001)}, {"gsm8k"}, {"gsm8k"})
    assert "missing in baseline and candidate" in res.to_text()
    # present on both sides but the policy's metric was not compared
    pol = _policy(gsm8k={"metric": "pass@4"})
    res = _run(pol, {"gsm8k": {"mean": _comp(0, 0.001)}})
    assert res.decision == "NO-GO" and "no comparison for metric 'pass@4'" in res.to_text()
    res = _run(pol, {"gsm8k": {"pass@4": _comp(0, 0.001)}})
    assert res.decision == "GO"


def test_advisory_never_blocks():
    pol = _policy(gsm8k={}, ifeval={"tier": "advisory"}, extra={"tier": "advisory"})
    res = G.decide(
        pol,
        {"gsm8k": _comp(0, 0.001), "ifeval": _comp(-0.2, 0.01)},
        {"gsm8k", "ifeval"},
        {"gsm8k", "ifeval"},
    )
    by = {b.name: b for b in res.benchmarks}
    assert res.decision == "GO"
    assert by["ifeval"].decision == "NO-GO" and not by["ifeval"].blocking
    assert by["extra"].decision == "NO-GO" and by["extra"].missing and not by["extra"].blocking
    assert res.n_tests == 1  # advisory benchmarks do not spend alpha
    assert "(non-blocking)" in res.to_text()


def test_supporting_needs_two_failures():
    pol = _policy(a={"tier": "supporting"}, b={"tier": "supporting"}, c={"tier": "supporting"})
    bad, good, unsure = _comp(-0.1, 0.005), _comp(0.0, 0.001), _comp(-0.01, 0.01)
    one = _run(pol, {"a": bad, "b": good, "c": good})
    assert one.decision == "GO" and one.supporting["failed"] == 1
    assert not next(b for b in one.benchmarks if b.name == "a").blocking
    two = _run(pol, {"a": bad, "b": bad, "c": good})
    assert two.decision == "NO-GO" and all(b.blocking for b in two.benchmarks[:2])
    mixed = _run(pol, {"a": bad, "b": unsure, "c": good})
    assert mixed.decision == "INCONCLUSIVE"


def test_bonferroni_widens_cis():
    # z=2.1 from the margin: GO at 95%, but not at 1 - 0.05/3 (z_{0.99167} = 2.39)
    close = _comp(-0.01 + 2.1 * 0.004, 0.004)
    alone = _run(_policy(a={}), {"a": close})
    assert alone.decision == "GO" and alone.ci_level == pytest.approx(0.95)
    three = _run(_policy(a={}, b={}, c={}), {"a": close, "b": _comp(0, 1e-4), "c": _comp(0, 1e-4)})
    assert three.n_tests == 3 and three.ci_level == pytest.approx(1 - 0.05 / 3)
    assert three.decision == "INCONCLUSIVE" and three.benchmarks[0].decision == "INCONCLUSIVE"
    z = st.norm.ppf(1 - 0.05 / 6)
    assert three.benchmarks[0].ci_low == pytest.approx(close["delta"] - z * 0.004)
    none = G.GatePolicy.model_validate(
        {
            "version": 1,
            "correction": "none",
            "defaults": {"max_drop": 0.01},
            "benchmarks": {"a": {}, "b": {}, "c": {}},
        }
    )
    assert _run(none, {"a": close, "b": _comp(0, 1e-4), "c": _comp(0, 1e-4)}).decision == "GO"


def test_direction_and_relative_drop():
    # lower is better (e.g. an error rate): +0.05 is damage
    pol = _policy(err={"direction": "lower_is_better"})
    assert _run(pol, {"err": _comp(0.05, 0.005)}).decision == "NO-GO"
    assert _run(pol, {"err": _comp(-0.05, 0.005)}).decision == "GO"
    # relative guardrail: 10% of a 0.10 baseline = 0.01 < max_drop 0.02
    pol = _policy(aime={"max_drop": 0.02, "max_relative_drop": 0.1})
    res = _run(pol, {"aime": _comp(-0.015, 0.001, base_mean=0.10)})
    assert res.decision == "NO-GO" and res.benchmarks[0].allowed_drop == pytest.approx(0.01)


def test_identical_models_go_even_with_zero_margin():
    pol = G.GatePolicy.model_validate({"version": 1, "benchmarks": {"a": {}}})
    assert _run(pol, {"a": _comp(0.0, 0.0)}).decision == "GO"


def test_end_to_end_with_compare_and_serialisation():
    rng = np.random.default_rng(0)
    n = 1319
    base = (rng.random(n) < 0.8).astype(float)
    cand = base.copy()
    cand[rng.choice(np.flatnonzero(base == 1), 70, replace=False)] = 0  # -5.3 points
    side = lambda s: {"items": list(range(n)), "scores": s.tolist()}  # noqa: E731
    comps = {
        "gsm8k": C.compare_scores(side(base), side(cand)),
        "math": C.compare_scores(side(base), side(base)),
    }
    pol = _policy(gsm8k={}, math={}, ifeval={"tier": "advisory"})
    res = G.decide(pol, comps, {"gsm8k", "math"}, {"gsm8k", "math"})
    assert res.decision == "NO-GO"
    d = res.to_dict()
    json.dumps(d, allow_nan=False)
    assert d["benchmarks"]["gsm8k"]["decision"] == "NO-GO"
    assert d["benchmarks"]["math"]["decision"] == "GO"
    text = res.to_text(verbose=True)
    assert text.startswith("gate: NO-GO") and "MDE=" in text and "ifeval" in text


def test_gate_uses_the_comparisons_interval_method():
    """The gate rebuilds the comparison's Newcombe CI (same numbers at the same level)."""
    rng = np.random.default_rng(3)
    n = 40
    base = np.ones(n)
    cand = (rng.random(n) < 0.9).astype(float)
    side = lambda s: {"items": list(range(n)), "scores": s.tolist()}  # noqa: E731
    comp = C.compare_scores(side(base), side(cand))
    assert comp["ci_method"] == "newcombe"
    alone = _run(_policy(a={}), {"a": comp}).benchmarks[0]
    assert (alone.ci_low, alone.ci_high) == pytest.approx((comp["ci_low"], comp["ci_high"]))
    three = _run(_policy(a={}, b={}, c={}), {"a": comp, "b": comp, "c": comp}).benchmarks[0]
    assert (three.ci_low, three.ci_high) == pytest.approx(C.paired_ci(comp["ci_inputs"], 1 - 0.05 / 3))
    assert -1.0 <= three.ci_low < alone.ci_low < alone.ci_high < three.ci_high <= 1.0


def test_identical_models_gate_with_undefined_mde():
    """No variance in the differences: MDE undefined, but the Newcombe CI still decides."""
    n = 1319
    base = (np.arange(n) % 5 != 0).astype(float)
    side = {"items": list(range(n)), "scores": base.tolist()}
    comp = C.compare_scores(side, side)
    assert comp["mde"] is None and comp["se"] is None
    res = _run(_policy(a={}), {"a": comp})
    b = res.benchmarks[0]
    assert res.decision == "GO" and b.mde is None
    assert b.ci_low < 0 < b.ci_high  # an interval, not the point [0, 0]
    assert "MDE=undefined" in res.to_text(verbose=True)
    strict = G.GatePolicy.model_validate({"version": 1, "benchmarks": {"a": {}}})
    b = _run(strict, {"a": comp}).benchmarks[0]
    # zero margin: the interval alone cannot prove Δ ≥ 0, but no item changed, so nothing
    # regressed on this benchmark: GO, as NeMo Evaluator 0.3.0 decides it (CI scripts that
    # gate a model against itself must pass)
    assert b.decision == "GO" and b.reason.startswith(f"no item changed in {n} paired items")
    assert b.ci_low < 0 < b.ci_high
    one_flip = base.copy()
    one_flip[0] = 1.0 - one_flip[0]
    b = _run(strict, {"a": C.compare_scores(side, {"items": list(range(n)), "scores": one_flip.tolist()})}).benchmarks[0]
    assert b.decision == "INCONCLUSIVE"  # one item changed: the interval decides again


def test_relative_guard_below_limits_the_relative_drop_to_low_baselines(tmp_path: Path) -> None:
    """NeMo Evaluator's `relative_guard_below`: the relative limit applies only when the
    baseline scores below it (a high baseline is held to `max_drop` alone)."""
    f = tmp_path / "p.yaml"
    f.write_text("version: 1\nbenchmarks:\n  a: {tier: critical, max_drop: 0.2, max_relative_drop: 0.01,"
                 " relative_guard_below: 0.5}\n")
    pol = G.load_policy(f)
    assert pol.resolved("a")["relative_guard_below"] == 0.5
    high = {"a": C.compare_scores({"items": list(range(100)), "scores": [1.0] * 90 + [0.0] * 10},
                                  {"items": list(range(100)), "scores": [1.0] * 85 + [0.0] * 15})}
    dec = G.decide(pol, high, {"a"}, {"a"}).benchmarks[0]
    assert dec.allowed_drop == 0.2  # the baseline (0.9) is above the guard: no relative limit
