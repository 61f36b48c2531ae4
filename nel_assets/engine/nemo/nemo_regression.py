"""NeMo Evaluator 0.3.0's keys in a comparison (`regression.json`) and in a single run's report,
added next to nel's own. No Dagster import."""

from __future__ import annotations

from typing import Any


def regression_keys(base_items: dict[str, Any], cand_items: dict[str, Any],
                    comp: dict[str, Any]) -> dict[str, Any]:
    """NeMo Evaluator 0.3.0's per-benchmark regression keys for one nel comparison:
    `score_deltas` ({metric: {baseline, candidate, delta, relative_pct, ci_overlap}}),
    `runtime_deltas` and, when either side has categories, `category_deltas`.

    The metric is named as 0.3.0 names it (`pass@1` for 0/1 rewards, else `mean_reward`);
    `ci_overlap` compares the two scores' own intervals (nel's, as in the bundles), as 0.3.0
    does; nel's paired test is what decides the verdict.

    Args:
        base_items: the baseline's `stats.item_table`.
        cand_items: the candidate's.
        comp: nel's comparison of the two (`compare_scores` + `runtime`).
    """
    import numpy as np

    from nel_assets.engine import stats

    def interval(items: dict[str, Any]) -> dict[str, Any]:
        n = int(sum(items["n_samples"])) if items.get("binary") else None
        return stats.score_interval(np.asarray(items["scores"], dtype=float), None, n_samples=n)

    bi, ci = interval(base_items), interval(cand_items)
    metric = "pass@1" if base_items.get("binary") and cand_items.get("binary") else "mean_reward"
    b, c = bi.get("mean"), ci.get("mean")
    overlap = None
    if None not in (bi.get("ci_low"), bi.get("ci_high"), ci.get("ci_low"), ci.get("ci_high")):
        overlap = bool(bi["ci_low"] <= ci["ci_high"] and ci["ci_low"] <= bi["ci_high"])
    score = {"baseline": None if b is None else round(float(b), 4),
             "candidate": None if c is None else round(float(c), 4),
             "delta": None if b is None or c is None else round(float(c) - float(b), 4),
             "relative_pct": (round((float(c) - float(b)) / float(b) * 100, 2)
                              if b not in (None, 0) and c is not None else None),
             "ci_overlap": overlap}
    runtime = {}
    for key, d in (comp.get("runtime") or {}).items():
        if isinstance(d, dict) and isinstance(d.get("base"), dict):
            runtime[key] = {"baseline": d["base"].get("mean"), "candidate": d["cand"].get("mean"),
                            "delta": d.get("delta_mean")}
    out: dict[str, Any] = {"score_deltas": {metric: score}, "runtime_deltas": runtime}
    bc, cc = _category_means(base_items), _category_means(cand_items)
    if bc or cc:
        out["category_deltas"] = {
            cat: {"baseline": (bc.get(cat) or {}).get("mean_reward", 0),
                  "candidate": (cc.get(cat) or {}).get("mean_reward", 0),
                  "delta": round((cc.get(cat) or {}).get("mean_reward", 0)
                                 - (bc.get(cat) or {}).get("mean_reward", 0), 4)}
            for cat in sorted(set(bc) | set(cc))}
    return out


def _category_means(items: dict[str, Any]) -> dict[str, dict[str, float]]:
    """`{category: {mean_reward}}` over an item table's questions (empty without categories)."""
    cats = items.get("categories")
    if not cats:
        return {}
    groups: dict[str, list[float]] = {}
    for cat, score in zip(cats, items["scores"], strict=True):
        groups.setdefault(str(cat), []).append(float(score))
    return {k: {"mean_reward": round(sum(v) / len(v), 4)} for k, v in groups.items()}


def single_report_keys(doc: dict[str, Any]) -> dict[str, Any]:
    """0.3.0's top-level `regression.json` keys for a one-benchmark comparison (its `compare`
    writes that benchmark's report itself then): `report_version`, `score_deltas`,
    `runtime_deltas`, `category_deltas`, `verdict`, `verdict_reasons`, `threshold`, and
    `run_id`/`config` inside `baseline`/`candidate`. Empty for several benchmarks (0.3.0
    keys its file by benchmark then; nel's per-benchmark keys are under `benchmarks`)."""
    benches = doc.get("benchmarks") or {}
    if len(benches) != 1:
        return {}
    (comp,) = benches.values()
    out: dict[str, Any] = {"report_version": 1,
                           **{k: comp[k] for k in ("score_deltas", "runtime_deltas", "category_deltas")
                              if k in comp},
                           "verdict": comp.get("outcome"), "verdict_reasons": [comp.get("outcome_reason")],
                           "threshold": doc.get("max_drop")}
    for side in ("baseline", "candidate"):
        if isinstance(doc.get(side), dict):
            out[side] = {"run_id": doc[side].get("run_id") or doc[side].get("source"),
                         "config": doc[side].get("config") or {}, **doc[side]}
    return out
