"""GO / NO-GO / INCONCLUSIVE release gates over several benchmarks' paired comparisons.

The policy file follows NeMo Evaluator's gate format::

    version: 1
    defaults: {max_drop: 0.01, max_relative_drop: null, metric: mean,
               direction: higher_is_better, tier: critical}
    benchmarks:
      gsm8k: {tier: critical, max_drop: 0.01}
      aime:  {tier: supporting, max_relative_drop: 0.10}
      ifeval: {tier: advisory}

Thresholds are in score units (per-item mean scores; 0.01 = one point of accuracy).

Decision rule per benchmark, with ``improvement = delta`` (``−delta`` when lower is better)
and ``allowed = min(max_drop, max_relative_drop·|base_mean|)`` over the thresholds given
(0 when none is):

* **NO-GO** when the corrected CI of the improvement lies entirely below ``−allowed`` (the
  damage is confidently larger than allowed), or the benchmark is missing on either side.
* **GO** when the corrected CI lies entirely at or above ``−allowed``.
* **INCONCLUSIVE** otherwise, with how many paired items (from the MDE formula solved for
  n) or repeats (when the comparison knows its repeat-noise share) would settle it.

The CI is the comparison's own (``compare.paired_ci`` on its ``ci_inputs``: Newcombe's
paired interval for scores in [0, 1]) rebuilt at the corrected level, so the gate, ``nel
compare`` and the reports use one interval method.

Multiplicity: **Bonferroni** across the m benchmarks that can block (critical and supporting
with a comparison): each CI is built at level ``1 − α/m``. Bonferroni rather than Holm
because the decision is read off confidence intervals against a margin, and Bonferroni gives
simultaneous CIs (all m cover at once with probability ≥ 1 − α); Holm is a step-down
procedure for p-values with no matching simultaneous intervals. Advisory benchmarks never
block, so they do not spend α (their CI uses the uncorrected level).

Tiers:

* ``critical``: its own NO-GO / INCONCLUSIVE decides the overall result.
* ``supporting``: a single failing supporting benchmark does not block (supporting metrics
  are noisy and there are several of them); the *group* is NO-GO when ≥ 2 supporting
  benchmarks are NO-GO, INCONCLUSIVE when ≥ 2 are NO-GO-or-INCONCLUSIVE (two failures are
  still possible once the undecided ones are settled), else GO.
* ``advisory``: reported, never blocks (not even when missing).

A critical or supporting benchmark missing on either side is NO-GO on its own (a required
benchmark that was not evaluated cannot be certified; this is a broken run, not a noisy
score). ``BenchmarkDecision.blocking`` says whether a benchmark is currently holding the
release back.

Overall decision = the worst of the critical decisions and the supporting group decision
(NO-GO > INCONCLUSIVE > GO).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from scipy import stats as _st

from nel_assets.engine.verdicts.compare import paired_ci

__all__ = [
    "BenchmarkDecision",
    "BenchmarkPolicy",
    "GatePolicy",
    "GateResult",
    "PolicyDefaults",
    "PolicyError",
    "decide",
    "load_policy",
]

Tier = Literal["critical", "supporting", "advisory"]
Direction = Literal["higher_is_better", "lower_is_better"]
Decision = Literal["GO", "NO-GO", "INCONCLUSIVE"]
_RANK = {"GO": 0, "INCONCLUSIVE": 1, "NO-GO": 2}


class PolicyError(ValueError):
    """A gate policy file that cannot be used; the message names file, line and key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PolicyDefaults(_Strict):
    """Thresholds applied to every benchmark unless it overrides them."""

    max_drop: float | None = Field(None, ge=0)
    max_relative_drop: float | None = Field(None, ge=0, le=1)
    relative_guard_below: float | None = Field(None, ge=0, le=1)
    metric: str = "mean"
    direction: Direction = "higher_is_better"
    tier: Tier = "critical"


class BenchmarkPolicy(_Strict):
    """Per-benchmark overrides (unset fields fall back to ``defaults``)."""

    tier: Tier | None = None
    max_drop: float | None = Field(None, ge=0)
    max_relative_drop: float | None = Field(None, ge=0, le=1)
    relative_guard_below: float | None = Field(None, ge=0, le=1)
    metric: str | None = None
    direction: Direction | None = None


class GatePolicy(_Strict):
    """A gate policy (NeMo Evaluator format, version 1) plus nel's statistical knobs.

    ``alpha`` is the family-wise error rate shared by the blocking benchmarks and
    ``correction`` is ``bonferroni`` (default) or ``none``.
    """

    version: Literal[1]
    defaults: PolicyDefaults = PolicyDefaults()
    benchmarks: dict[str, BenchmarkPolicy] = Field(default_factory=dict)
    alpha: float = Field(0.05, gt=0, lt=1)
    correction: Literal["bonferroni", "none"] = "bonferroni"

    def resolved(self, name: str) -> dict[str, Any]:
        """The effective settings for one benchmark (its own, else the defaults)."""
        own = self.benchmarks.get(name, BenchmarkPolicy())
        d = self.defaults
        explicit = own.model_fields_set
        return {
            "tier": own.tier or d.tier,
            "max_drop": own.max_drop if "max_drop" in explicit else d.max_drop,
            "max_relative_drop": own.max_relative_drop
            if "max_relative_drop" in explicit
            else d.max_relative_drop,
            "relative_guard_below": own.relative_guard_below
            if "relative_guard_below" in explicit
            else d.relative_guard_below,
            "metric": own.metric or d.metric,
            "direction": own.direction or d.direction,
        }


# --------------------------------------------------------------------------- loading


def _line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the deepest YAML node reachable along a pydantic error location."""
    line = None if node is None else node.start_mark.line + 1
    for part in loc:
        if not isinstance(node, yaml.MappingNode):
            break
        for key, value in node.value:
            if str(key.value) == str(part):
                line = key.start_mark.line + 1
                node = value
                break
        else:
            break
    return line


_FIELDS_AT = {
    (): set(GatePolicy.model_fields),
    ("defaults",): set(PolicyDefaults.model_fields),
}


def _suggest(loc: tuple[Any, ...]) -> str:
    parent = tuple(loc[:-1])
    allowed = _FIELDS_AT.get(parent)
    if allowed is None and len(parent) == 2 and parent[0] == "benchmarks":
        allowed = set(BenchmarkPolicy.model_fields)
    if not allowed:
        return ""
    close = difflib.get_close_matches(str(loc[-1]), sorted(allowed), n=1)
    return (
        f" (did you mean {close[0]!r}?)" if close else f" (allowed: {', '.join(sorted(allowed))})"
    )


def load_policy(path: str | Path) -> GatePolicy:
    """Read and validate a gate policy YAML file.

    Args:
        path: The policy file.

    Returns:
        The validated policy.

    Raises:
        PolicyError: Unreadable file, invalid YAML (``file:line:col``), or an invalid or
            unknown key (``file:line: dotted.key: message``, with a suggestion for typos).
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(f"{p}: cannot read gate policy: {exc.strerror or exc}") from exc
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{p}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(p)
        problem = getattr(exc, "problem", None) or str(exc)
        raise PolicyError(f"{where}: invalid YAML: {problem}") from exc
    if not isinstance(data, dict):
        raise PolicyError(f"{p}:1: a gate policy must be a mapping with 'version: 1'")
    try:
        return GatePolicy.model_validate(data)
    except ValidationError as exc:
        msgs = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            line = _line_of(node, loc)
            key = ".".join(str(x) for x in loc) or "(top level)"
            hint = _suggest(loc) if err["type"] == "extra_forbidden" else ""
            msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
            msgs.append(f"{p}:{line if line is not None else '?'}: {key}: {msg}{hint}")
        raise PolicyError("invalid gate policy:\n" + "\n".join(msgs)) from None


# --------------------------------------------------------------------------- decisions


@dataclass
class BenchmarkDecision:
    """One benchmark's gate outcome. CIs are on ``delta`` (cand − base) at the corrected
    level; ``allowed_drop`` is the resolved threshold in score units."""

    name: str
    tier: str
    decision: str
    blocking: bool
    reason: str
    metric: str
    direction: str
    allowed_drop: float | None = None
    delta: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    ci_level: float | None = None
    base_mean: float | None = None
    cand_mean: float | None = None
    n_paired: int | None = None
    mde: float | None = None
    items_needed: int | None = None
    repeats_needed: int | None = None
    missing: bool = False


@dataclass
class GateResult:
    """The overall decision and every benchmark's, with the multiplicity settings used."""

    decision: str
    benchmarks: list[BenchmarkDecision]
    alpha: float
    correction: str
    n_tests: int
    ci_level: float
    supporting: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """True only for GO."""
        return self.decision == "GO"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (``benchmarks`` keyed by name, in policy order)."""
        return {
            "decision": self.decision,
            "alpha": self.alpha,
            "correction": self.correction,
            "n_tests": self.n_tests,
            "ci_level": self.ci_level,
            "supporting": dict(self.supporting),
            "benchmarks": {b.name: asdict(b) for b in self.benchmarks},
        }

    def to_text(self, verbose: bool = False) -> str:
        """Human-readable report: one line per benchmark, details when ``verbose``."""
        lines = [
            f"gate: {self.decision}  ({self.n_tests} blocking benchmark(s), multiplicity "
            f"correction: {self.correction}, CI level {self.ci_level:.4g}, family α={self.alpha:g})"
        ]
        width = max((len(b.name) for b in self.benchmarks), default=4)
        for b in self.benchmarks:
            flag = " (non-blocking)" if b.decision != "GO" and not b.blocking else ""
            lines.append(f"  {b.name:<{width}}  {b.decision:<12} {b.tier:<10} {b.reason}{flag}")
            if verbose and b.delta is not None:
                ci = (
                    f"[{b.ci_low:+.4f}, {b.ci_high:+.4f}]"
                    if b.ci_low is not None and b.ci_high is not None
                    else "[n/a]"
                )
                allowed = "n/a" if b.allowed_drop is None else f"{b.allowed_drop:.4f}"
                mde = "undefined" if b.mde is None else f"{b.mde:.4f}"
                lines.append(
                    f"  {'':<{width}}  metric={b.metric} {b.direction} base={b.base_mean} "
                    f"cand={b.cand_mean} delta={b.delta:+.4f} CI{ci} allowed_drop={allowed} "
                    f"n={b.n_paired} MDE={mde}"
                )
        if self.supporting.get("count"):
            s = self.supporting
            lines.append(
                f"  supporting group: {s['decision']} ({s['failed']} failed, "
                f"{s['inconclusive']} inconclusive of {s['count']}; NO-GO needs ≥2 failures)"
            )
        return "\n".join(lines)


def _pick(comp: Mapping[str, Any] | None, metric: str) -> Mapping[str, Any] | None:
    """A comparison is either one compare result or a mapping metric -> compare result."""
    if comp is None:
        return None
    if "delta" in comp:
        return comp
    sub = comp.get(metric)
    return sub if isinstance(sub, Mapping) else None


def _fmt(x: float) -> str:
    return f"{x:+.4f}"


def _settle(
    comp: Mapping[str, Any], gap: float, q_total: float
) -> tuple[int | None, int | None, str]:
    """Items (and repeats) that would put the CI clear of the margin with 80% power.

    Target SE: ``gap / (z_{1−α'/2} + z_{0.8})`` (the MDE formula solved for the SE). Items:
    SE scales as 1/sqrt(n), so ``n' = n·(SE/target)²``. Repeats: only the within-question
    part shrinks, ``SE²(r·K) = SE² − SE²_within·(1 − 1/r)``.
    """
    se, n = comp.get("se"), comp.get("n_paired") or 0
    if se is None or n < 2:
        why = comp.get("se_note") or "undefined (too few paired items)"
        return None, None, f"the paired SE is {why}, so the items needed cannot be estimated"
    if gap <= 0:
        return None, None, "the estimate sits on the margin; more data cannot settle it"
    target = gap / q_total
    n_total = math.ceil(n * (se / target) ** 2)
    items = max(n_total - n, 1)
    msg = f"~{items} more paired items (n≈{n_total}) would settle it at 80% power"
    reps = None
    w, k = comp.get("se_within"), comp.get("repeats_cand") or comp.get("repeats_base")
    if w and k:
        need = se * se - target * target  # variance to remove
        if need < w * w:
            r = 1.0 / (1.0 - need / (w * w))
            reps = math.ceil(k * r)
            msg += f", or ~{reps} repeats per item"
        else:
            msg += "; more repeats alone cannot (item-to-item variation dominates)"
    return items, reps, msg


def _decide_one(
    name: str,
    cfg: dict[str, Any],
    comp: Mapping[str, Any],
    level: float,
) -> BenchmarkDecision:
    sign = 1.0 if cfg["direction"] == "higher_is_better" else -1.0
    base_mean = comp.get("base_mean")
    limits = []
    if cfg["max_drop"] is not None:
        limits.append(float(cfg["max_drop"]))
    guard = cfg.get("relative_guard_below")
    # as NeMo Evaluator: the relative limit applies only to baselines below the guard
    if cfg["max_relative_drop"] is not None and base_mean is not None and (
            guard is None or float(base_mean) < float(guard)):
        limits.append(float(cfg["max_relative_drop"]) * abs(float(base_mean)))
    allowed = min(limits) if limits else 0.0
    dec = BenchmarkDecision(
        name=name,
        tier=cfg["tier"],
        decision="INCONCLUSIVE",
        blocking=cfg["tier"] != "advisory",
        reason="",
        metric=cfg["metric"],
        direction=cfg["direction"],
        allowed_drop=allowed,
        delta=comp.get("delta"),
        base_mean=base_mean,
        cand_mean=comp.get("cand_mean"),
        n_paired=comp.get("n_paired"),
        ci_level=level,
    )
    delta, se = comp.get("delta"), comp.get("se")
    df = comp.get("df")
    p = 0.5 + level / 2.0
    q = float(_st.t.ppf(p, df)) if df else float(_st.norm.ppf(p))
    # The comparison's own interval method (Newcombe for scores), rebuilt at this level, so
    # the gate and `nel compare` never disagree on how an interval is made.
    inputs = comp.get("ci_inputs")
    if inputs is not None:
        lo, hi = paired_ci(inputs, level)
    elif delta is not None and se is not None:
        lo, hi = delta - q * se, delta + q * se
    else:
        lo = hi = None
    if delta is None or lo is None or hi is None:
        dec.reason = f"not enough paired items ({comp.get('n_paired', 0)}) for a CI"
        return dec
    dec.ci_low, dec.ci_high = lo, hi
    # improvement-oriented bounds: positive = better, whatever the metric's direction
    ilo, ihi = (lo, hi) if sign > 0 else (-hi, -lo)
    q_total = q + float(_st.norm.ppf(0.8))
    dec.mde = None if se is None else q_total * se
    ci_txt = f"Δ={_fmt(delta)} CI[{_fmt(lo)}, {_fmt(hi)}] at {level:.4g}"
    flips = comp.get("flips") or {}
    changed = sum(int((flips.get(k) or {}).get("count") or 0) for k in ("better_to_worse", "worse_to_better"))
    if ihi < -allowed:
        dec.decision = "NO-GO"
        dec.reason = f"drop beyond allowed {allowed:.4f}: {ci_txt}"
    elif flips and changed == 0:
        # Both sides scored every shared item the same: nothing regressed on this benchmark
        # (NeMo Evaluator's gate says GO here too, however few the items).
        dec.decision = "GO"
        dec.reason = f"no item changed in {comp.get('n_paired')} paired items: {ci_txt}"
    elif ilo >= -allowed:
        dec.decision = "GO"
        dec.reason = f"no drop beyond allowed {allowed:.4f}: {ci_txt}"
    else:
        gap = abs(sign * delta + allowed)
        items, reps, how = _settle(comp, gap, q_total)
        dec.items_needed, dec.repeats_needed = items, reps
        dec.reason = f"CI straddles −{allowed:.4f}: {ci_txt}; {how}"
    return dec


def decide(
    policy: GatePolicy,
    comparisons: Mapping[str, Mapping[str, Any]],
    present_base: set[str],
    present_cand: set[str],
) -> GateResult:
    """Apply a gate policy to per-benchmark paired comparisons.

    Args:
        policy: The validated policy.
        comparisons: ``{benchmark: compare_scores(...) result}`` or
            ``{benchmark: {metric: compare_scores(...) result}}``.
        present_base: Benchmarks that have a baseline bundle.
        present_cand: Benchmarks that have a candidate bundle.

    Returns:
        The ``GateResult``. Benchmarks: those named in the policy (required), then any other
        compared benchmark (judged with the defaults), in that order.
    """
    names = list(policy.benchmarks) + sorted(set(comparisons) - set(policy.benchmarks))
    cfgs = {n: policy.resolved(n) for n in names}
    comps = {n: _pick(comparisons.get(n), cfgs[n]["metric"]) for n in names}

    def missing(n: str) -> str | None:
        sides = [
            s
            for s, present in (("baseline", present_base), ("candidate", present_cand))
            if n not in present
        ]
        if sides:
            return f"missing in {' and '.join(sides)}"
        if comps[n] is None:
            return f"no comparison for metric {cfgs[n]['metric']!r}"
        return None

    blocking = [n for n in names if cfgs[n]["tier"] != "advisory" and missing(n) is None]
    m = len(blocking)
    alpha = policy.alpha
    corrected = 1.0 - alpha / m if policy.correction == "bonferroni" and m > 1 else 1.0 - alpha

    decisions: list[BenchmarkDecision] = []
    for n in names:
        cfg = cfgs[n]
        why = missing(n)
        if why is not None:
            decisions.append(
                BenchmarkDecision(
                    name=n,
                    tier=cfg["tier"],
                    decision="NO-GO",
                    blocking=cfg["tier"] != "advisory",
                    reason=why,
                    missing=True,
                    metric=cfg["metric"],
                    direction=cfg["direction"],
                )
            )
            continue
        level = corrected if cfg["tier"] != "advisory" else 1.0 - alpha
        comp = comps[n]
        assert comp is not None  # missing() covers None
        decisions.append(_decide_one(n, cfg, comp, level))

    sup = [d for d in decisions if d.tier == "supporting"]
    failed = sum(d.decision == "NO-GO" for d in sup)
    unsure = sum(d.decision == "INCONCLUSIVE" for d in sup)
    if failed >= 2:
        sup_dec = "NO-GO"
    elif failed + unsure >= 2:
        sup_dec = "INCONCLUSIVE"
    else:
        sup_dec = "GO"
    worst = "GO"
    for d in decisions:
        if d.tier == "critical" or (d.tier == "supporting" and d.missing):
            # critical decisions count on their own; so does a required benchmark not run
            d.blocking = d.decision != "GO"
            worst = max(worst, d.decision, key=_RANK.__getitem__)
        elif d.tier == "supporting":
            # a supporting benchmark holds the release back only through the group rule
            d.blocking = d.decision != "GO" and sup_dec != "GO"
        else:
            d.blocking = False
    if sup:
        worst = max(worst, sup_dec, key=_RANK.__getitem__)
    return GateResult(
        decision=worst,
        benchmarks=decisions,
        alpha=alpha,
        correction=policy.correction if m > 1 else "none",
        n_tests=m,
        ci_level=corrected,
        supporting={
            "decision": sup_dec,
            "failed": failed,
            "inconclusive": unsure,
            "count": len(sup),
        },
    )
