"""`nel gate`'s verdict by NeMo Evaluator 0.3.0's rules: GO, NO-GO, INCONCLUSIVE.

The same policy file and result directories give the verdict NeMo Evaluator's ``nel gate``
gives (its ``engine.gate``), so its CI scripts keep their meaning. nel's own analysis
(Newcombe CIs, Bonferroni across benchmarks, items needed to settle: ``engine.gate.decide``)
is reported next to it. The rules:

* **Policy**: unset keys take NeMo Evaluator's defaults (``tier: supporting``, ``max_drop:
  0.015``, no metric); nel's ``metric: mean`` is its ``mean_reward``. A benchmark named in the
  policy that is not advisory is *required* and must resolve to ``mean_reward`` or
  ``pass@1``. Benchmarks not named in the policy are judged with the defaults.
* **Per benchmark**: a required benchmark absent on either side is MISSING. Otherwise, with
  at least 10 paired problems: the 95% CI of the paired per-problem deltas (t interval;
  clustered normal interval when every problem has a category and there are several), turned
  into *damage* (the drop, sign-flipped for ``lower_is_better``). BREACH when the relative
  drop exceeds ``max_relative_drop`` (point estimate; only below ``relative_guard_below``
  when given) or the damage CI lies above ``max_drop``; PASS when it lies at or below it;
  else INSUFFICIENT_EVIDENCE. With fewer than 10 paired problems: INSUFFICIENT_EVIDENCE,
  unless the runs' own score intervals for the metric (``benchmark.scores`` of their
  ``eval-*.json``) decide it (damage interval ``[c_lo − b_hi, c_hi − b_lo]``), as there.
* **Overall**: any critical or supporting BREACH or MISSING: NO-GO; else any
  INSUFFICIENT_EVIDENCE: INCONCLUSIVE; else GO. Advisory benchmarks never count.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy import stats as _st

from nel_assets.engine.verdicts.nemo_compare_rules import paired_values

__all__ = ["MIN_PAIRED_ITEMS", "BenchmarkGate", "gate_verdict", "policy_errors", "resolve"]

MIN_PAIRED_ITEMS = 10
SUPPORTED_METRICS = ("mean_reward", "pass@1")
_DEFAULTS = {"tier": "supporting", "max_drop": 0.015, "max_relative_drop": None,
             "relative_guard_below": None, "metric": None, "direction": "higher_is_better"}
_ALIASES = {"mean": "mean_reward"}  # nel's name for the per-item mean


@dataclass
class BenchmarkGate:
    """One benchmark's result, with NeMo Evaluator's ``BenchmarkGateResult`` keys."""

    benchmark: str
    tier: str
    status: str = "PASS"  # PASS | BREACH | INSUFFICIENT_EVIDENCE | MISSING
    metric: str = ""
    baseline_score: float | None = None
    candidate_score: float | None = None
    delta: float | None = None
    relative_drop_pct: float | None = None
    delta_ci_lower: float | None = None
    delta_ci_upper: float | None = None
    n_paired: int = 0
    max_drop_threshold: float = 0.0
    max_relative_drop_threshold: float | None = None
    direction: str = "higher_is_better"
    absolute_breached: bool = False
    relative_breached: bool = False
    reasons: list[str] = field(default_factory=list)


def resolve(policy: Any, name: str) -> dict[str, Any]:
    """A benchmark's settings as NeMo Evaluator resolves them (its defaults where unset)."""
    d, own = policy.defaults, policy.benchmarks.get(name)
    out = {}
    for key, default in _DEFAULTS.items():
        val = getattr(d, key, None) if key in d.model_fields_set else default
        if own is not None and key in own.model_fields_set and getattr(own, key, None) is not None:
            val = getattr(own, key)
        out[key] = val
    if out["metric"] is not None:
        out["metric"] = _ALIASES.get(out["metric"], out["metric"])
    return out


def required(policy: Any) -> list[str]:
    """Benchmarks named in the policy that are not advisory."""
    return [n for n in policy.benchmarks if resolve(policy, n)["tier"] != "advisory"]


def policy_errors(policy: Any) -> list[str]:
    """Why NeMo Evaluator's gate would refuse this policy (its ``validate_for_gate``)."""
    errs = []
    for name in sorted(required(policy)):
        metric = resolve(policy, name)["metric"]
        if not metric:
            errs.append(f"{name}: required benchmark must resolve to an explicit metric "
                        "(metric: mean_reward or pass@1)")
        elif metric not in SUPPORTED_METRICS:
            errs.append(f"{name}: unsupported metric {metric!r}; supported metrics: "
                        f"{', '.join(SUPPORTED_METRICS)}")
    return errs


def _select_metric(base_scores: Mapping[str, Any], cand_scores: Mapping[str, Any]) -> str:
    """NeMo Evaluator's pick when the policy names none: from the scores both bundles have."""
    both = [k for k in base_scores if k in cand_scores
            and isinstance(base_scores[k], Mapping) and base_scores[k].get("value") is not None
            and isinstance(cand_scores[k], Mapping) and cand_scores[k].get("value") is not None]
    for name in ("mean_reward", "pass@1"):
        if name in both:
            return name
    return next((k for k in both if k.startswith("scorer:")), "mean_reward")


def _delta_ci(deltas: np.ndarray, clusters: list[str] | None) -> tuple[float | None, float | None]:
    n = deltas.shape[0]
    if n < 2:
        return None, None
    mean = float(deltas.mean())
    z = float(_st.norm.ppf(0.975))
    if clusters and len(set(clusters)) > 1:
        sums: dict[str, float] = {}
        for r, c in zip(deltas - mean, clusters, strict=True):
            sums[c] = sums.get(c, 0.0) + float(r)
        g = len(sums)
        se = math.sqrt((g / (g - 1)) * sum(e * e for e in sums.values()) / (n * n))
        return round(mean - z * se, 6), round(mean + z * se, 6)
    se = float(deltas.std(ddof=1) / math.sqrt(n))
    q = float(_st.t.ppf(0.975, df=n - 1))
    return round(mean - q * se, 6), round(mean + q * se, 6)


def _thresholds(r: BenchmarkGate, cfg: Mapping[str, Any], *, point_estimate: bool) -> None:
    """NeMo Evaluator's ``_apply_thresholds``: relative drop, then the damage CI."""
    if r.delta is None:
        if not r.reasons:
            r.reasons.append("No metric delta available for gate decision")
        return
    higher = cfg["direction"] == "higher_is_better"
    damage = -r.delta if higher else r.delta
    lo = hi = None
    if r.delta_ci_lower is not None and r.delta_ci_upper is not None:
        lo, hi = ((round(-r.delta_ci_upper, 6), round(-r.delta_ci_lower, 6)) if higher
                  else (r.delta_ci_lower, r.delta_ci_upper))
    rel, guard, drop = cfg["max_relative_drop"], cfg["relative_guard_below"], float(cfg["max_drop"])
    # the relative limit applies only below the guard (when one is given)
    if (rel is not None and r.baseline_score not in (None, 0) and damage > 0
            and (guard is None or float(r.baseline_score) < guard)):
        relative = damage / abs(float(r.baseline_score))
        if relative > rel:
            r.relative_breached, r.status = True, "BREACH"
            r.reasons.append(f"Relative drop {relative * 100:.1f}% exceeds threshold {rel * 100:.1f}%")
            return
    if lo is not None and hi is not None:
        span = f"95% CI on damage [{lo:.4f}, {hi:.4f}]"
        if lo > drop:
            r.absolute_breached, r.status = True, "BREACH"
            r.reasons.append(f"{span} exceeds threshold {drop:.4f}")
        elif hi <= drop:
            r.status = "PASS"
            r.reasons.append(f"{span} is within threshold {drop:.4f}")
        else:
            r.status = "INSUFFICIENT_EVIDENCE"
            r.reasons.append(f"{span} straddles threshold {drop:.4f}")
        return
    if not point_estimate:
        r.status = "INSUFFICIENT_EVIDENCE"
        r.reasons.append("No confidence interval available for required benchmark")
        return
    if damage > drop:
        r.absolute_breached, r.status = True, "BREACH"
        r.reasons.append(f"Point estimate damage {damage:.4f} exceeds threshold {drop:.4f}")
        return
    r.status = "PASS"
    r.reasons.append(f"Point estimate damage {damage:.4f} is within threshold {drop:.4f}")


def _from_scores(r: BenchmarkGate, cfg: Mapping[str, Any], base_scores: Mapping[str, Any],
                 cand_scores: Mapping[str, Any]) -> None:
    """Few paired problems: the runs' own score intervals, as NeMo Evaluator falls back."""
    b, c = base_scores.get(r.metric), cand_scores.get(r.metric)
    if not isinstance(b, Mapping) or not isinstance(c, Mapping) or b.get("value") is None or c.get("value") is None:
        return  # nothing to fall back on: the status stays INSUFFICIENT_EVIDENCE
    r.baseline_score, r.candidate_score = b["value"], c["value"]
    r.delta = round(float(c["value"]) - float(b["value"]), 6)
    if r.baseline_score != 0:
        r.relative_drop_pct = round(100 * r.delta / r.baseline_score, 2)
    bounds = (b.get("ci_lower"), b.get("ci_upper"), c.get("ci_lower"), c.get("ci_upper"))
    if None not in bounds:
        r.delta_ci_lower = round(float(bounds[2]) - float(bounds[1]), 6)
        r.delta_ci_upper = round(float(bounds[3]) - float(bounds[0]), 6)
    _thresholds(r, cfg, point_estimate=r.tier == "advisory")


def own_scores(items: Mapping[str, Any]) -> dict[str, Any]:
    """A nel run's headline score in the shape of an ``eval-*.json``'s ``benchmark.scores``
    (``pass@1`` for 0/1 rewards, else ``mean_reward``; nel's interval, as nel exports it)."""
    from nel_assets.engine import stats

    n = int(sum(items["n_samples"])) if items.get("binary") else None
    si = stats.score_interval(np.asarray(items["scores"], dtype=float), None, n_samples=n)
    if si.get("mean") is None:
        return {}
    entry = {"value": round(float(si["mean"]), 4)}
    if si.get("ci_low") is not None and si.get("ci_high") is not None:
        entry.update(ci_lower=round(float(si["ci_low"]), 4), ci_upper=round(float(si["ci_high"]), 4))
    return {"pass@1" if items.get("binary") else "mean_reward": entry}


def gate_benchmark(name: str, cfg: Mapping[str, Any], base: Any, cand: Any) -> BenchmarkGate:
    """One benchmark, both sides present (``BenchRun``s: ``items`` and ``scores``; a side
    without ``scores``, a nel store run, gets ``own_scores``)."""
    r = BenchmarkGate(benchmark=name, tier=cfg["tier"], direction=cfg["direction"],
                      max_drop_threshold=float(cfg["max_drop"]),
                      max_relative_drop_threshold=cfg["max_relative_drop"])
    b_scores = base.scores if base.scores is not None else own_scores(base.items)
    c_scores = cand.scores if cand.scores is not None else own_scores(cand.items)
    r.metric = cfg["metric"] or _select_metric(b_scores, c_scores)
    if r.metric not in SUPPORTED_METRICS:
        r.status = "INSUFFICIENT_EVIDENCE"
        r.reasons.append(f"Metric {r.metric!r} is not supported for paired gating")
        _from_scores(r, cfg, b_scores, c_scores)
        return r
    keys, xb, xc = paired_values(base.items, cand.items,
                                 "scores" if r.metric == "mean_reward" else "pass_frac")
    r.n_paired = len(keys)
    if r.n_paired < MIN_PAIRED_ITEMS:
        r.status = "INSUFFICIENT_EVIDENCE"
        r.reasons.append(f"Only {r.n_paired} paired items (minimum {MIN_PAIRED_ITEMS})")
        _from_scores(r, cfg, b_scores, c_scores)
        return r
    r.baseline_score, r.candidate_score = round(float(xb.mean()), 6), round(float(xc.mean()), 6)
    d = xc - xb
    r.delta = round(float(d.mean()), 6)
    if r.baseline_score != 0:
        r.relative_drop_pct = round(100 * float(d.mean()) / r.baseline_score, 2)
    cats = base.items.get("categories")
    clusters = None
    if cats is not None and all(c is not None for c in cats):
        by_key = {str(k): str(c) for k, c in zip(base.items["items"], cats, strict=True)}
        clusters = [by_key[k] for k in keys]
    r.delta_ci_lower, r.delta_ci_upper = _delta_ci(d, clusters)
    _thresholds(r, cfg, point_estimate=False)
    return r


def gate_verdict(policy: Any, base: Any, cand: Any) -> dict[str, Any]:
    """NeMo Evaluator's gate report for two runs (``runs.Run``) under ``policy``.

    Returns:
        ``{verdict, verdict_reasons, benchmarks: [BenchmarkGate as dict], missing, warnings}``
        in NeMo Evaluator's ``gate -o`` shape.
    """
    bb, cb = base.benchmarks, cand.benchmarks
    missing = sorted(set(required(policy)) - (set(bb) & set(cb)))
    results = [BenchmarkGate(benchmark=n, tier=resolve(policy, n)["tier"], status="MISSING",
                             reasons=[f"Required benchmark {n!r} not found in evaluation results"])
               for n in missing]
    warnings = []
    if set(bb) - set(cb):
        warnings.append(f"Baseline-only benchmarks (no candidate): {', '.join(sorted(set(bb) - set(cb)))}")
    if set(cb) - set(bb):
        warnings.append(f"Candidate-only benchmarks (no baseline): {', '.join(sorted(set(cb) - set(bb)))}")
    for n in sorted(set(bb) & set(cb)):
        if n not in missing:
            results.append(gate_benchmark(n, resolve(policy, n), bb[n], cb[n]))
    gated = [r for r in results if r.tier in ("critical", "supporting")]
    reasons: list[str] = []

    def names(status: str) -> list[str]:
        return [f"{r.benchmark} [{r.tier}]" for r in gated if r.status == status]

    if names("BREACH") or names("MISSING"):
        for status in ("BREACH", "MISSING"):
            if names(status):
                reasons.append(f"{status}: {', '.join(names(status))}")
        verdict = "NO-GO"
    elif names("INSUFFICIENT_EVIDENCE"):
        reasons.append(f"INSUFFICIENT_EVIDENCE: {', '.join(names('INSUFFICIENT_EVIDENCE'))}")
        reasons.append("Action: re-run with more items, add repeats, or relax thresholds for these benchmarks.")
        verdict = "INCONCLUSIVE"
    else:
        passed = names("PASS")
        reasons.append(f"All {len(passed)} gated benchmark(s) passed" if passed else "No gated benchmarks evaluated")
        verdict = "GO"
    return {"report_version": 1, "verdict": verdict, "verdict_reasons": reasons,
            "benchmarks": [asdict(r) for r in results], "missing": missing, "warnings": warnings}
