"""Comparison assets (candidate vs baseline) and the gate asset check.

``comparison`` is partitioned by *candidate* model (the shared ``model`` dynamic partitions).
It depends on every benchmark's ``bundle`` asset with the same partition, so materializing a
new bundle for a candidate makes that candidate's comparison stale. The baseline (a service
name from ``comparison.baseline`` in the config) is read from the store by partition key, not
through a second ``AssetIn`` on the same upstream (broken in Dagster 1.13, DESIGN.md §3).

Outputs under ``<out>/comparison/comparison/model=<candidate>/``:
``comparison.parquet`` (one flat row per benchmark, read by the DuckDB ``comparisons`` view),
``regression.json`` (the full ``compare_runs`` document plus the gate decision) and
``side_by_side.html`` (the items that flipped, both answers; metadata ``side_by_side``).

``gate`` is a **blocking** asset check on ``comparison``: NO-GO fails it with ERROR severity
(downstream assets in the run are skipped and the UI shows it red); INCONCLUSIVE fails it
with WARN severity (visible, not blocking: more data is needed, not a rollback); GO passes.
The policy is ``comparison.policy`` (a gate YAML), else a default built from
``comparison.max_drop`` (score units: 0.01 = one point).
"""

# No `from __future__ import annotations`: Dagster inspects the context annotations.

import hashlib
import json
from pathlib import Path
from typing import Any

import dagster as dg

from nel_resources.resources import ResultStoreResource
from nel_resources.specs import ComparisonSpec, ResolvedConfig

COMPARISON_KEY = dg.AssetKey(["comparison"])
COMPARISON_COLUMNS = ("benchmark", "baseline", "candidate", "base_mean", "cand_mean", "delta", "se",
                      "ci_low", "ci_high", "ci_method", "p_value", "mde", "verdict", "n_paired", "n_unpaired_base",
                      "n_unpaired_cand", "test", "gate_decision")


SIDE_BY_SIDE = "side_by_side.html"  # the flipped items' page, beside regression.json


def comparison_dir(root: Path, candidate: str) -> Path:
    """Where a candidate's comparison files live."""
    return root / "comparison" / "comparison" / f"model={candidate}"


def gate_policy(comp: ComparisonSpec) -> Any:
    """The gate policy of a config: its file, else the default built from ``max_drop``.

    Raises:
        NelError: Unreadable/invalid policy, or a threshold written in points (> 1).
    """
    from nel_assets.engine.results.runs import check_drop_units, load_checked_policy
    from nel_assets.engine.verdicts.gate import GatePolicy, PolicyDefaults

    if comp.policy:
        return load_checked_policy(comp.policy)
    check_drop_units(comp.max_drop, "comparison.max_drop")
    return GatePolicy(version=1, defaults=PolicyDefaults(max_drop=comp.max_drop or 0.0))


def compare_partition(resolved: ResolvedConfig, root: Path, candidate: str) -> dict[str, Any]:
    """Compare ``candidate`` with the configured baseline from the store and write the files.

    Args:
        resolved: The resolved config (baseline, policy, benchmarks).
        root: The output dir (result store root).
        candidate: The candidate model key (partition).

    Returns:
        The regression document with a ``gate`` section.
    """
    from nel_assets.engine.results.runs import compare_runs, run_from_store, write_regression
    from nel_assets.engine.verdicts.gate import decide
    from nel_resources.storage.arrow import pa
    from nel_resources.storage.store import ResultStore, write_parquet_atomic

    comp = resolved.comparison
    assert comp.baseline is not None
    store = ResultStore(root)
    baseline = comp.baseline
    folders = [b.asset_name for b in resolved.benchmarks]
    base = run_from_store(store, baseline, benchmarks=folders)
    cand = run_from_store(store, candidate, benchmarks=folders)
    policy = gate_policy(comp)
    doc = compare_runs(base, cand, max_drop=comp.max_drop, alpha=policy.alpha)
    # Every configured benchmark is required: one missing on a side is NO-GO, never silently
    # dropped (decide() only requires the benchmarks its policy names).
    from nel_assets.engine.verdicts.gate import BenchmarkPolicy

    extra = {b.name: BenchmarkPolicy() for b in resolved.benchmarks if b.name not in policy.benchmarks}
    if extra:
        policy = policy.model_copy(update={"benchmarks": {**policy.benchmarks, **extra}})
    comps = dict(doc["benchmarks"])
    result = decide(policy, comps, set(base.benchmarks), set(cand.benchmarks))
    doc["gate"] = result.to_dict()
    decisions = {b.name: b.decision for b in result.benchmarks}
    rows = []
    for name in sorted(set(comps) | set(decisions)):
        c = comps.get(name, {})
        rows.append({"benchmark": name, "baseline": baseline, "candidate": candidate,
                     **{k: c.get(k) for k in COMPARISON_COLUMNS[3:-1]},
                     "gate_decision": decisions.get(name)})
    schema = pa.schema([
        ("benchmark", pa.string()), ("baseline", pa.string()), ("candidate", pa.string()),
        ("base_mean", pa.float64()), ("cand_mean", pa.float64()), ("delta", pa.float64()),
        ("se", pa.float64()), ("ci_low", pa.float64()), ("ci_high", pa.float64()),
        ("ci_method", pa.string()), ("p_value", pa.float64()), ("mde", pa.float64()), ("verdict", pa.string()),
        ("n_paired", pa.int64()), ("n_unpaired_base", pa.int64()), ("n_unpaired_cand", pa.int64()),
        ("test", pa.string()), ("gate_decision", pa.string()),
    ])
    d = comparison_dir(store.root, candidate)
    write_parquet_atomic(d / "comparison.parquet", pa.Table.from_pylist(rows, schema=schema))
    write_regression(d / "regression.json", doc)
    _write_side_by_side(store, base, cand, d / SIDE_BY_SIDE)
    return doc


def _write_side_by_side(store: Any, base: Any, cand: Any, path: Path) -> None:
    """The flipped items' page of the comparison (pass = item mean above 0, as `nel compare`)."""
    from nel_assets.engine.reports.side_by_side import run_pairs, write_side_by_side

    write_side_by_side(path, run_pairs(base, cand), baseline=base.model, candidate=cand.model)


def build_comparison_assets(resolved: ResolvedConfig) -> list[dg.AssetsDefinition | dg.AssetChecksDefinition]:
    """The ``comparison`` asset and its blocking ``gate`` check ([] without a baseline).

    Args:
        resolved: The resolved config; its ``comparison.baseline`` is the baseline's model
            partition.

    Returns:
        ``[comparison_asset, gate_check]`` or ``[]``.
    """
    comp = resolved.comparison
    if not comp.baseline:
        return []
    from nel_assets.partitions import MODEL_PARTITIONS

    baseline = comp.baseline
    bundle_keys = [dg.AssetKey([b.asset_name, "bundle"]) for b in resolved.benchmarks]
    code_version = hashlib.sha256(comp.settings_json.encode()).hexdigest()[:12]

    @dg.asset(key=COMPARISON_KEY, group_name="comparison", partitions_def=MODEL_PARTITIONS,
              deps=bundle_keys, code_version=code_version, kinds={"parquet"},
              description=f"Paired comparison of each candidate model with the baseline "
              f"{comp.baseline_name!r} on every benchmark (regression.json + flat rows).")
    def comparison(context: dg.AssetExecutionContext, nel_store: ResultStoreResource) -> dg.MaterializeResult:
        from benchmarks.errors import NelError
        from nel_assets.engine.reports.compare_text import mde_text

        candidate = context.partition_key
        try:
            doc = compare_partition(resolved, nel_store.store().root, candidate)
        except NelError as exc:
            raise dg.Failure(description=str(exc)) from None
        d = comparison_dir(nel_store.store().root, candidate)
        table = ["| benchmark | Δ (pts) | 95% CI | p | MDE | verdict |", "|---|---:|---|---:|---:|---|"]
        for name, c in doc["benchmarks"].items():
            def p(x: Any) -> str:
                return "n/a" if x is None else f"{100 * x:+.2f}"
            table.append(f"| {name} | {p(c['delta'])} | [{p(c['ci_low'])}, {p(c['ci_high'])}] | "
                         f"{'n/a' if c['p_value'] is None else format(c['p_value'], '.3g')} | "
                         f"{p(c['mde']) if c.get('mde') is not None else mde_text(c)} | {c['verdict']} |")
        version = hashlib.sha256(json.dumps(
            {k: doc[k] for k in ("benchmarks", "missing", "gate")}, sort_keys=True, default=str,
        ).encode()).hexdigest()[:16]
        if candidate == baseline:
            context.log.info(f"{candidate} is the baseline: comparing it with itself")
        return dg.MaterializeResult(metadata={
            "baseline": baseline, "candidate": candidate,
            "regressions": ", ".join(doc["regressions"]) or "none",
            "missing_in_baseline": ", ".join(doc["missing"]["baseline"]) or "none",
            "missing_in_candidate": ", ".join(doc["missing"]["candidate"]) or "none",
            "gate_decision": doc["gate"]["decision"],
            "comparison": dg.MetadataValue.md("\n".join(table)),
            "path": dg.MetadataValue.path(str(d / "regression.json")),
            "side_by_side": dg.MetadataValue.path(str(d / SIDE_BY_SIDE)),
        }, data_version=dg.DataVersion(version))

    @dg.asset_check(asset=COMPARISON_KEY, name="gate", blocking=True, partitions_def=MODEL_PARTITIONS,
                    description="GO / NO-GO / INCONCLUSIVE release gate on the comparison; NO-GO "
                    "fails with ERROR severity and blocks downstream assets.")
    def gate(context: dg.AssetCheckExecutionContext, nel_store: ResultStoreResource) -> dg.AssetCheckResult:
        candidate = context.partition_key
        path = comparison_dir(nel_store.store().root, candidate) / "regression.json"
        if not path.exists():
            return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.ERROR,
                                       metadata={"reason": f"no comparison at {path}"})
        g = json.loads(path.read_text())["gate"]
        decision = g["decision"]
        md: dict[str, Any] = {"decision": decision, "candidate": candidate, "baseline": baseline,
                              "ci_level": g["ci_level"], "correction": g["correction"]}
        for name, b in g["benchmarks"].items():
            md[f"{name}"] = f"{b['decision']} ({b['tier']}): {b['reason']}"
        return dg.AssetCheckResult(
            passed=decision == "GO",
            severity=dg.AssetCheckSeverity.WARN if decision == "INCONCLUSIVE" else dg.AssetCheckSeverity.ERROR,
            metadata=md,
            description=f"gate {decision} for {candidate} vs {baseline}",
        )

    return [comparison, gate]
