"""Declarative automation and input observations.

Two things keep the Dagster view of the graph honest:

- Observations of `<bench>/shard_inputs`: per (model, shard) the product-owned fingerprint
  (`evaluate.plan`) as a data version. Recorded *before* shards run, they become the
  shards' provenance, so afterwards Dagster marks stale exactly the partitions nel would
  rerun (a changed row, a model's generation settings) while a prompt/scorer change also
  moves the benchmark's `code_version`.
- Automation conditions: bundles, reports and comparisons are `eager()` — they refresh once
  every upstream partition they read is present and one of them changed. Shard results are
  not automated: evaluating costs model calls, so only `nel eval run`, the checkpoint sensor
  and explicit materializations start them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import dagster as dg

from nel_resources.specs import ResolvedConfig
from nel_resources.storage.store import ResultStore, asset_name

DATA_VERSION_TAG = "dagster/data_version"
CODE_VERSION_TAG = "dagster/code_version"

#: How downstream assets follow their inputs. `eager()` waits while any upstream shard is
#: missing or in progress, so a bundle is built once, after the last shard of its model.
DOWNSTREAM_CONDITION = dg.AutomationCondition.eager()


def shard_inputs_key(bench_name: str) -> dg.AssetKey:
    """Asset key of a benchmark's observable `shard_inputs` source."""
    return dg.AssetKey([asset_name(bench_name), "shard_inputs"])


def shard_input_observations(resolved: ResolvedConfig, output_dir: str, *, models: Iterable[str] | None = None,
                             metadata: dict[str, dict[str, str]] | None = None) -> list[dg.AssetObservation]:
    """One observation per (benchmark, model, shard) carrying its fingerprint as data version.

    Args:
        resolved: the resolved config (with checkpoint services already added, if any).
        output_dir: the result store root.
        models: only these model partitions (default: all).
        metadata: extra observation metadata per model (e.g. a checkpoint's real path).
    """
    from nel_assets.engine.evaluation import evaluate as ev

    store = ResultStore(output_dir)
    only = None if models is None else set(models)
    out: list[dg.AssetObservation] = []
    for bench in resolved.benchmarks:
        for t in ev.plan(store, bench):
            if only is not None and t.model not in only:
                continue
            out.append(dg.AssetObservation(
                asset_key=shard_inputs_key(bench.name),
                partition=dg.MultiPartitionKey({"model": t.model, "shard": str(t.shard)}),
                tags={DATA_VERSION_TAG: t.fingerprint},
                metadata={"fingerprint": t.fingerprint, "n_problems": len(t.indices),
                          **((metadata or {}).get(t.model, {}))},
            ))
    return out


def record_shard_inputs(instance: dg.DagsterInstance, resolved: ResolvedConfig,
                        output_dir: str | None = None) -> int:
    """Report the current shard-input fingerprints to `instance` where they changed.

    Call it before materializing shards (`nel eval run` does) so each shard's provenance
    names the inputs it was computed from. Returns how many partitions changed.
    """
    n = 0
    for obs in shard_input_observations(resolved, output_dir or resolved.output_dir):
        rec = instance.get_latest_data_version_record(obs.asset_key, True, partition_key=obs.partition)
        prior = None
        if rec is not None:
            ev = rec.asset_observation or rec.asset_materialization
            prior = None if ev is None else ev.tags.get(DATA_VERSION_TAG)
        if prior != obs.tags[DATA_VERSION_TAG]:
            instance.report_runless_asset_event(obs)
            n += 1
    return n


def record_planned_shards(instance: dg.DagsterInstance, bench_name: str, tasks: Iterable[Any]) -> int:
    """Like `record_shard_inputs`, for ShardTasks a caller already planned (the runner).

    Only stale tasks are reported: a fresh task's fingerprint was reported when it ran.
    """
    n = 0
    for t in tasks:
        if t.stale:
            instance.report_runless_asset_event(dg.AssetObservation(
                asset_key=shard_inputs_key(bench_name),
                partition=dg.MultiPartitionKey({"model": t.model, "shard": str(t.shard)}),
                tags={DATA_VERSION_TAG: t.fingerprint}, metadata={"fingerprint": t.fingerprint}))
            n += 1
    return n


def dataset_key(bench_name: str) -> dg.AssetKey:
    """Asset key of a benchmark's dataset (partitioned by shard)."""
    return dg.AssetKey([asset_name(bench_name), "dataset"])


def record_dataset_shards(instance: dg.DagsterInstance, bench: Any, tasks: Iterable[Any],
                          store: ResultStore) -> int:
    """Write and record the dataset partitions the stale `tasks` read, where they changed.

    A dataset partition cannot run in its shard's Dagster run (a run targets assets of one
    partitions definition: shard vs model x shard), and a run of its own costs a run per
    shard. So the runner seeds the shard's problems with the asset's own engine function
    (`write_dataset_shard`), before the shard runs, and reports the materialization with
    that data version (the shard's seed digest) and the asset's code version: the shard's
    provenance then names the dataset partition it was computed from. Returns how many
    partitions were recorded.
    """
    from nel_assets.engine.evaluation.dataset_shards import write_dataset_shard
    from nel_assets.factory import bench_code_version, dataset_metadata

    key = dataset_key(bench.name)
    tasks = list(tasks)
    stale = {t.shard for t in tasks if t.stale}
    # The dataset holds the first run's selection (`write_dataset_shard`): compare with its
    # digests where that model was planned.
    first = bench.runs[0].model
    digests = {t.shard: t.seeds_digest for t in sorted(tasks, key=lambda t: t.model == first)
               if t.shard in stale}
    code_version: str | None = None
    n = 0
    for shard, digest in sorted(digests.items()):
        rec = instance.get_latest_data_version_record(key, False, partition_key=str(shard))
        ev = None if rec is None else rec.asset_materialization
        if ev is not None and ev.tags.get(DATA_VERSION_TAG) == digest \
                and store.dataset_shard_path(bench.name, shard).exists():
            continue
        try:
            part = write_dataset_shard(store, bench, shard)
        except OSError:
            # A full or read-only disk: the shard's own run reports it with its own error
            # (the journal's), and the next run records this partition.
            continue
        code_version = code_version or bench_code_version(bench)
        instance.report_runless_asset_event(dg.AssetMaterialization(
            asset_key=key, partition=str(shard), metadata=dataset_metadata(part),
            tags={DATA_VERSION_TAG: part.version, CODE_VERSION_TAG: code_version}))
        n += 1
    return n


def _is_downstream(key: dg.AssetKey) -> bool:
    return key.path[-1] in ("bundle", "report", "comparison") or key.path[0] == "comparison"


def with_automation(assets: Sequence[Any]) -> list[Any]:
    """`assets` with `eager()` on every bundle, report and comparison asset."""

    def cond(spec: dg.AssetSpec) -> dg.AssetSpec:
        if not _is_downstream(spec.key):
            return spec
        return spec.replace_attributes(automation_condition=DOWNSTREAM_CONDITION)

    out: list[Any] = []
    for a in assets:
        if isinstance(a, dg.AssetsDefinition) and not isinstance(a, dg.AssetChecksDefinition) \
                and a.is_materializable and any(_is_downstream(k) for k in a.keys):
            out.append(next(iter(dg.map_asset_specs(cond, [a]))))
        else:
            out.append(a)
    return out


def automation_sensor(interval_seconds: int = 30) -> dg.AutomationConditionSensorDefinition:
    """The sensor that evaluates the automation conditions (running by default)."""
    return dg.AutomationConditionSensorDefinition(
        "nel_automation", target=dg.AssetSelection.all(),
        default_status=dg.DefaultSensorStatus.RUNNING, minimum_interval_seconds=interval_seconds,
        # Plain runs, one per partition: nothing here needs the backfill daemon.
        emit_backfills=False,
        description="Keeps bundles, reports and comparisons fresh when their inputs change.",
    )
