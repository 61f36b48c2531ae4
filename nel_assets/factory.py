"""The asset factory: resolved run specs become Dagster assets, one group per benchmark.

Per benchmark `<b>`:
    <b>/shard_inputs   observable source, model × shard; data version = the shard's fingerprint
    <b>/dataset        partitioned by shard; data version = content hash of that shard's seeds
    <b>/shard_results  partitioned model × shard, reads dataset[shard]; data version = content
                       hash of the rows
    <b>/bundle         partitioned by model; reads all that model's shards from the store
    <b>/report         partitioned by model
Assets are thin: they call one engine function and report metadata. Results live in the
Parquet store (the system of record), so there is no IO manager on the data path.
"""

# No `from __future__ import annotations`: Dagster inspects the context annotation.

import hashlib
from typing import Any

import dagster as dg
import orjson

from nel_assets.engine.evaluation import evaluate as ev
from nel_assets.engine.evaluation.dataset_shards import DatasetShard, write_dataset_shard
from nel_assets.engine.evaluation.head_start import HeadStartOutcomes
from nel_assets.engine.evaluation.journal import JournalWriteError
from nel_assets.engine.evaluation.remote_shard import LAUNCHED_TAG, launched_outcome
from nel_assets.partitions import MODEL_PARTITIONS, dataset_partitions, shard_partitions
from nel_resources.resources import ModelService, ResultStoreResource, SandboxResource
from nel_resources.specs import BenchmarkSpec, ResolvedConfig, sandbox_resource_key
from nel_resources.storage.store import asset_name, write_text_atomic


def bench_code_version(bench: BenchmarkSpec) -> str:
    """Results-affecting benchmark settings, hashed (prompt/scorer version, shards, repeats)."""
    envs = []
    for run in bench.runs:
        try:
            envs.append(ev.make_env(run.env).fingerprint())
        except Exception:  # data missing at load time: still build the graph
            envs.append(f"{bench.name}:unloaded")
    payload = {"envs": sorted(set(envs)), **bench.code_version_inputs.payload()}
    return hashlib.sha256(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)).hexdigest()[:12]


def build_benchmark_assets(bench: BenchmarkSpec, config_json: str | None = None) -> list[dg.AssetsDefinition]:
    """The four assets of one benchmark (`config_json` goes into its exports)."""
    b = bench.asset_name
    group = b
    n = bench.shards
    code_version = bench_code_version(bench)
    svc_keys = set(bench.requires_services)
    if bench.sandbox is not None:
        svc_keys.add(sandbox_resource_key(bench.name))
    dataset_key = dg.AssetKey([b, "dataset"])
    shards_key = dg.AssetKey([b, "shard_results"])
    bundle_key = dg.AssetKey([b, "bundle"])
    inputs_key = dg.AssetKey([b, "shard_inputs"])

    # Observable source: per (model, shard), the product-owned fingerprint of everything that
    # changes that shard's results (seeds, prompt template, scorer version, generation
    # settings, system prompt, repeats). Observing it before shards run lets Dagster mark
    # exactly the partitions nel would rerun as stale, per partition, in the UI.
    @dg.multi_observable_source_asset(
        specs=[dg.AssetSpec(inputs_key, group_name=group, partitions_def=shard_partitions(n),
                            description=f"What {bench.name}'s shard results depend on, per (model, shard).")],
        name=f"{b}__observe_shard_inputs", partitions_def=shard_partitions(n),
        required_resource_keys={"nel_store"})
    def shard_inputs(context: dg.AssetExecutionContext) -> dg.ObserveResult:
        key = context.partition_key.keys_by_dimension  # type: ignore[attr-defined]
        for t in ev.plan(context.resources.nel_store.store(), bench):
            if t.model == key["model"] and t.shard == int(key["shard"]):
                return dg.ObserveResult(asset_key=inputs_key, data_version=dg.DataVersion(t.fingerprint),
                                        metadata={"stale_in_store": t.stale})
        raise dg.Failure(f"{bench.name}: no configured (model, shard) {context.partition_key}")

    @dg.asset(key=dataset_key, group_name=group, code_version=code_version,
              partitions_def=dataset_partitions(n),
              description=f"The {bench.name} problems as seeded (prompt, expected answer, metadata), "
                          "one partition per shard.",
              kinds={"parquet"})
    def dataset(context: dg.AssetExecutionContext, nel_store: ResultStoreResource) -> dg.MaterializeResult:
        part = write_dataset_shard(nel_store.store(), bench, int(context.partition_key))
        return dg.MaterializeResult(metadata=dataset_metadata(part), data_version=dg.DataVersion(part.version))

    @dg.asset(key=shards_key, group_name=group, code_version=code_version,
              # The dataset is partitioned by shard: an edited row changes its shard's
              # partition only, so Dagster marks that shard's results stale on every model
              # (as nel reruns them), not every shard's.
              partitions_def=shard_partitions(n),
              deps=[dg.AssetDep(dataset_key, partition_mapping=dg.MultiToSingleDimensionPartitionMapping("shard")),
                    inputs_key],
              required_resource_keys=svc_keys | {"nel_store", "nel_head_start"},
              description=f"Per-sample results of {bench.name}, one partition per (model, shard).",
              kinds={"parquet"})
    def shard_results(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        key = context.partition_key.keys_by_dimension  # type: ignore[attr-defined]
        model, shard = key["model"], int(key["shard"])
        store = context.resources.nel_store.store()
        run = bench.run_for(model)
        if run is None:
            raise dg.Failure(f"{bench.name} does not run on model partition {model!r} "
                             f"(it runs on: {', '.join(bench.models) or 'none'})")
        if context.run.tags.get(LAUNCHED_TAG):
            return _launched_shard(store, bench.name, model, shard)
        service: ModelService = getattr(context.resources, run.service.resource_key)
        try:
            sandboxes = (getattr(context.resources, sandbox_resource_key(bench.name))
                         if bench.sandbox is not None else None)
            # Evaluated already by the CLI's head start, before this run existed?
            kept = context.resources.nel_head_start.take(bench.name, model, shard,
                                                         context.run_id[:12])
            out = kept if kept is not None else ev.evaluate_shard(
                run, store, shard, run_id=context.run_id[:12], base_url=service.url,
                sandboxes=sandboxes)
        except JournalWriteError as exc:
            # A full disk is the user's to fix: one line saying so, not a stack trace.
            raise dg.Failure(description=str(exc), metadata={"error": type(exc).__name__}) from exc
        context.log.info(f"{bench.name} {model} shard {shard}: {out.n_rows} rows, "
                         f"{out.requests_sent} requests, {out.reused_from_journal} reused from journal")
        return dg.MaterializeResult(
            metadata={"n_rows": out.n_rows, "mean_reward": out.mean_reward, "n_errors": out.n_errors,
                      "requests_sent": out.requests_sent, "reused_from_journal": out.reused_from_journal,
                      "elapsed_s": round(out.elapsed_s, 3), "path": dg.MetadataValue.path(str(out.path))},
            data_version=dg.DataVersion(out.data_version),
        )

    @dg.asset(key=bundle_key, group_name=group, code_version=code_version,
              partitions_def=MODEL_PARTITIONS,
              deps=[dg.AssetDep(shards_key, partition_mapping=dg.MultiToSingleDimensionPartitionMapping("model"))],
              description=f"{bench.name} scores with SE/CI, pass@k, categories, runtime and failures.",
              kinds={"parquet"})
    def bundle(context: dg.AssetExecutionContext, nel_store: ResultStoreResource,
               nel_head_start: dg.ResourceParam[HeadStartOutcomes]) -> dg.MaterializeResult:
        store = nel_store.store()
        # Built by the CLI's head start before Dagster was imported (nel_assets.engine.evaluation.head_start)?
        kept = nel_head_start.take_bundle(bench.name, context.partition_key, context.run_id)
        b_, paths = kept if kept is not None else ev.build_model_bundle(
            bench.run_for(context.partition_key), store, bench.name, context.partition_key,
            config_json=config_json)
        s = b_["score"]
        return dg.MaterializeResult(metadata={
            # the bundle's one interval, in fractions 0–1 with its method (as every surface)
            "score": s.get("mean"), "se": s.get("se"), "ci_low": s.get("ci_low"),
            "ci_high": s.get("ci_high"), "ci_method": s.get("ci_method"),
            "n_items": s.get("n_items"), "n_samples": s.get("n_samples"),
            "n_failed_samples": s.get("n_failed_samples"), "complete": b_.get("complete"),
            "exports": dg.MetadataValue.path(str(paths["eval"].parent)),
        }, data_version=dg.DataVersion(hashlib.sha256(
            orjson.dumps(s, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]))

    @dg.asset(key=dg.AssetKey([b, "report"]), group_name=group, code_version=code_version,
              partitions_def=MODEL_PARTITIONS, deps=[bundle_key],
              description=f"Markdown report of {bench.name} per model.", kinds={"markdown"})
    def report(context: dg.AssetExecutionContext, nel_store: ResultStoreResource) -> dg.MaterializeResult:
        from nel_assets.engine.reports.report import render_markdown

        store = nel_store.store()
        b_ = store.read_bundle(bench.name, context.partition_key)
        if b_ is None:
            raise dg.Failure(f"no bundle for {bench.name}/{context.partition_key}")
        text = render_markdown([b_])
        d = store.report_dir(bench.name, context.partition_key)
        write_text_atomic(d / "report.md", text)
        return dg.MaterializeResult(metadata={"report": dg.MetadataValue.md(text[:20000]),
                                              "path": dg.MetadataValue.path(str(d / "report.md"))})

    return [shard_inputs, dataset, shard_results, bundle, report]


def _launched_shard(store: Any, bench: str, model: str, shard: int) -> dg.MaterializeResult:
    """The record of a partition a cluster worker (docker, ray) evaluated and committed."""
    from benchmarks.errors import NelError

    try:
        doc = launched_outcome(store, bench, model, shard)
    except NelError as exc:
        raise dg.Failure(description=str(exc)) from None
    return dg.MaterializeResult(
        metadata={"n_rows": doc["n_rows"], "mean_reward": doc["mean_reward"], "n_errors": doc["n_errors"],
                  "requests_sent": doc["requests_sent"], "reused_from_journal": doc["reused_from_journal"],
                  "elapsed_s": doc["elapsed_s"], "launched_by": doc["where"],
                  "path": dg.MetadataValue.path(str(store.shard_path(bench, model, shard)))},
        data_version=dg.DataVersion(doc["data_version"]),
    )


def dataset_metadata(part: DatasetShard) -> dict[str, Any]:
    """A dataset partition's materialization metadata (the asset's and the runner's record)."""
    return {"n_problems": part.n_problems, "path": dg.MetadataValue.path(str(part.path))}


def runner_job_names(bench_name: str) -> dict[str, str]:
    """Names of the per-benchmark jobs the CLI runner executes."""
    b = asset_name(bench_name)
    return {"dataset": f"nel_{b}_dataset", "shards": f"nel_{b}_shards", "bundle": f"nel_{b}_bundle"}


def build_runner_jobs(resolved: ResolvedConfig) -> list[Any]:
    """Per benchmark: materialize the dataset, one shard partition, or a model's bundle+report.

    The CLI resolves these once per process and executes them in-process, instead of
    building a fresh ephemeral job for every partition (~1 s each).
    """
    jobs = []
    for bench in resolved.benchmarks:
        b = bench.asset_name
        names = runner_job_names(bench.name)
        jobs += [
            dg.define_asset_job(names["dataset"], selection=[dg.AssetKey([b, "dataset"])],
                                partitions_def=dataset_partitions(bench.shards),
                                description=f"Seed one shard of the {bench.name} dataset."),
            dg.define_asset_job(names["shards"], selection=[dg.AssetKey([b, "shard_results"])],
                                partitions_def=shard_partitions(bench.shards),
                                description=f"Evaluate one (model, shard) partition of {bench.name}."),
            dg.define_asset_job(names["bundle"], selection=[dg.AssetKey([b, "bundle"]), dg.AssetKey([b, "report"])],
                                partitions_def=MODEL_PARTITIONS,
                                description=f"Bundle and report {bench.name} for one model."),
        ]
    return jobs


def build_resources(resolved: ResolvedConfig, output_dir: str | None = None,
                    head_start: HeadStartOutcomes | None = None) -> dict[str, Any]:
    """The resources the assets need: the store, one ModelService per service, one
    SandboxResource per benchmark with a sandbox, and the run's head-start outcomes
    (`nel eval run` passes its own; empty elsewhere)."""
    res: dict[str, Any] = {"nel_store": ResultStoreResource(root=output_dir or resolved.output_dir),
                           "nel_head_start": head_start if head_start is not None else HeadStartOutcomes()}
    for svc in resolved.services.values():
        res[svc.resource_key] = ModelService.from_config(svc.name, svc.config)
    for bench in resolved.benchmarks:
        if bench.sandbox is not None:
            res[sandbox_resource_key(bench.name)] = SandboxResource.from_config(
                bench.name, bench.sandbox, bench.sandbox_pool)
    return res


def build_assets(resolved: ResolvedConfig) -> list[dg.AssetsDefinition]:
    """Every benchmark's assets."""
    seen: set[str] = set()
    out: list[dg.AssetsDefinition] = []
    for bench in resolved.benchmarks:
        if bench.asset_name in seen:
            raise ev.NelError(f"benchmark {bench.name!r} appears twice in the config; "
                              "merge the entries (list several services under `service:`)")
        seen.add(bench.asset_name)
        out.extend(build_benchmark_assets(bench, resolved.config_json))
    return out


def build_defs(resolved: ResolvedConfig, output_dir: str | None = None) -> dg.Definitions:
    """The Definitions for a resolved config."""
    from nel_assets.comparison_assets import build_comparison_assets
    from nel_assets.trend_assets import build_trend_assets

    extra = [*build_comparison_assets(resolved), *build_trend_assets(resolved)]
    assets = [a for a in extra if isinstance(a, dg.AssetsDefinition)]
    checks = [c for c in extra if not isinstance(c, dg.AssetsDefinition)]
    return dg.Definitions(assets=[*build_assets(resolved), *assets], asset_checks=checks,
                          jobs=build_runner_jobs(resolved), resources=build_resources(resolved, output_dir))
