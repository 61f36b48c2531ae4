"""CI jobs built from the config: `evaluate`, `compare` and `gate`.

`dagster job execute -m dagster_project.definitions -j <job>` (or `dg launch --job <job>`)
runs one of them in-process and exits non-zero when it fails, so CI follows the gate:

- `evaluate`: materialize the stale (model, shard) partitions of every benchmark, then the
  bundles and reports of the models that changed (exactly what `nel eval run` does);
- `compare`: materialize every candidate's comparison with the baseline (gate not run);
- `gate`: the comparisons with their blocking gate checks; a NO-GO fails the job.

One asset job cannot do this: shard results (model × shard), bundles (model) and the
dataset (shard) have different partitions, and a run targets one partition key.
So each job is a single op that drives the asset graph partition by partition on the
persistent instance next to the results; every materialization is a real asset run
there, with its code version and provenance, visible in the UI.
"""

# No `from __future__ import annotations`: Dagster inspects the context annotation.

from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg

from nel_resources.config import NelConfig
from nel_resources.specs import ResolvedConfig


def comparison_keys(assets: Sequence[Any]) -> list[dg.AssetKey]:
    """Keys of the comparison assets among `assets`."""
    return [k for a in assets if isinstance(a, dg.AssetsDefinition) and not isinstance(a, dg.AssetChecksDefinition)
            for k in a.keys if k.path[-1] == "comparison" or k.path[0] == "comparison"]


def candidate_models(resolved: ResolvedConfig, instance: dg.DagsterInstance) -> list[str]:
    """Model partitions to compare with the baseline: configured models that have results."""
    from nel_assets.partitions import MODEL_PARTITIONS

    baseline = resolved.comparison.baseline
    known = set(instance.get_dynamic_partitions(MODEL_PARTITIONS.name))
    return [m for m in resolved.model_partitions if m in known and m != baseline]


def _instance(resolved: ResolvedConfig) -> dg.DagsterInstance:
    from dagster_project.instance_config import open_instance
    from dagster_project.run_output import dagster_home_at

    return open_instance(dagster_home_at(resolved.output_dir, resolved.dagster_home))


def _run_comparisons(context: dg.OpExecutionContext, resolved: ResolvedConfig, assets: Sequence[Any],
                     resources: Mapping[str, Any], *, with_gate: bool) -> None:
    keys = comparison_keys(assets)
    if not keys:
        context.log.warning("no comparison assets: set `comparison.baseline` in the config")
        return
    instance = _instance(resolved)
    selection = dg.AssetSelection.assets(*keys)
    if not with_gate:
        selection = selection.without_checks()
    no_go: list[str] = []
    models = candidate_models(resolved, instance)
    if not models:
        context.log.warning("no candidate models with results to compare; run `evaluate` first")
    for m in models:
        r = dg.materialize(list(assets), instance=instance, resources=dict(resources), selection=selection,
                           partition_key=m, raise_on_error=False,
                           tags={"nel/job": context.job_name, "nel/parent_run_id": context.run_id})
        evals = r.get_asset_check_evaluations()
        for e in evals:
            verdict = "GO" if e.passed else "NO-GO"
            context.log.info(f"gate {e.asset_check_key.name} on {m}: {verdict}")
            if not e.passed and e.severity == dg.AssetCheckSeverity.ERROR:
                no_go.append(f"{m}: {e.asset_check_key.name}"
                             + (f" ({e.description})" if e.description else ""))
        if not r.success and not (with_gate and no_go):
            raise dg.Failure(f"comparison of {m} failed (see run {r.run_id} in the Dagster UI)")
    if no_go:
        raise dg.Failure("gate: NO-GO for " + "; ".join(no_go))


def build_jobs(cfg: NelConfig, resolved: ResolvedConfig, assets: Sequence[Any],
               resources: Mapping[str, Any]) -> list[dg.JobDefinition]:
    """The `evaluate`, `compare` and `gate` jobs of a config and its resolved specs
    (in-process executor); `evaluate` runs `cfg` as `nel eval run` does."""

    @dg.op(name="evaluate_stale_partitions", description="Materialize stale shards, then bundles and reports.")
    def evaluate_op(context: dg.OpExecutionContext) -> None:
        from dagster_project.runner import run_eval

        summary = run_eval(cfg, resume=True, progress=False)
        for oc in summary.benchmarks:
            context.log.info(f"{oc.benchmark}: ran {len(oc.shards_run)} of {oc.shards_total} shards "
                             f"({oc.shards_fresh} fresh), {oc.requests_sent} requests")
            for m, b in oc.bundles.items():
                s = b["score"]
                context.log.info(f"{oc.benchmark}/{m}: score {s.get('mean')} "
                                 f"95% CI [{s.get('ci_low')}, {s.get('ci_high')}] ({s.get('ci_method')}) "
                                 f"n={s.get('n_items')} (fractions)")
        # run_eval isolates failures instead of raising: the job still fails when any did.
        if summary.failures:
            raise dg.Failure("; ".join(f"{f.benchmark}/{f.model}: {f.reason}" for f in summary.failures)
                             + f" (record: {summary.checkpoint_path}, tracebacks: {summary.log_path})")

    @dg.op(name="compare_with_baseline", description="Materialize every candidate's comparison.")
    def compare_op(context: dg.OpExecutionContext) -> None:
        _run_comparisons(context, resolved, assets, resources, with_gate=False)

    @dg.op(name="gate_candidates", description="Comparisons plus their blocking gate checks.")
    def gate_op(context: dg.OpExecutionContext) -> None:
        _run_comparisons(context, resolved, assets, resources, with_gate=True)

    def job(name: str, op: Any, description: str) -> dg.JobDefinition:
        @dg.job(name=name, executor_def=dg.in_process_executor, description=description,
                tags={"nel/ci": "true"})
        def _job() -> None:
            op()

        return _job

    return [
        job("evaluate", evaluate_op, "Evaluate every configured model on every benchmark (stale only)."),
        job("compare", compare_op, "Compare every candidate model with the baseline."),
        job("gate", gate_op, "Compare and gate; fails (non-zero exit) on NO-GO."),
    ]
