"""The asset graph holds every dependency the code has: dataset -> shard results -> bundle ->
report, the shard inputs (seeds, prompt, scorer, a model's generation settings) -> shard
results, bundles -> comparison, and the gate check on the comparison; and an edited row makes
only its shard's results stale in Dagster's view, as nel reruns only that shard."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest
import yaml

from dagster_project.definitions import build_definitions
from dagster_project.run_output import dagster_home_for
from nel_resources.config import load_config

CONFIG = """\
services:
  base: {url: "http://127.0.0.1:9/v1", model: base}
  cand: {url: "http://127.0.0.1:9/v1", model: cand}
benchmarks:
  - name: gsm8k
    shards: 3
  - name: mmlu
comparison:
  baseline: base
  max_drop: 0.02
"""


@pytest.fixture
def graph(tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> dg.Definitions:
    monkeypatch.setenv("NEL_DATA_DIR", str(data_dir))
    p = tmp_path / "c.yaml"
    p.write_text(CONFIG)
    cfg = load_config(p)
    # The Definitions `dagster dev` and `dagster job execute` load (automation and jobs included).
    return build_definitions(cfg, str(tmp_path / "out"))


def _parents(defs: dg.Definitions) -> dict[str, set[str]]:
    g = defs.resolve_asset_graph()
    return {k.to_user_string(): {p.to_user_string() for p in g.get(k).parent_keys}
            for k in g.get_all_asset_keys()}


def test_every_dependency_is_an_edge(graph: dg.Definitions) -> None:
    parents = _parents(graph)
    for b in ("gsm8k", "mmlu"):
        assert parents[f"{b}/dataset"] == set()
        assert parents[f"{b}/shard_inputs"] == set()
        assert parents[f"{b}/shard_results"] == {f"{b}/dataset", f"{b}/shard_inputs"}
        assert parents[f"{b}/bundle"] == {f"{b}/shard_results"}
        assert parents[f"{b}/report"] == {f"{b}/bundle"}
    # The comparison reads every benchmark's bundles (not the markdown reports).
    assert parents["comparison"] == {"gsm8k/bundle", "mmlu/bundle"}
    g = graph.resolve_asset_graph()
    assert {(c.asset_key.to_user_string(), c.name) for c in g.asset_check_keys} == {("comparison", "gate")}


def test_dataset_partition_feeds_its_shard_on_every_model(graph: dg.Definitions) -> None:
    g = graph.resolve_asset_graph()
    shards, dataset = dg.AssetKey(["gsm8k", "shard_results"]), dg.AssetKey(["gsm8k", "dataset"])
    ds_parts = g.get(dataset).partitions_def
    sr_parts = g.get(shards).partitions_def
    assert isinstance(ds_parts, dg.StaticPartitionsDefinition)
    assert isinstance(sr_parts, dg.MultiPartitionsDefinition)
    shard_dim = next(d for d in sr_parts.partitions_defs if d.name == "shard").partitions_def
    assert ds_parts.get_partition_keys() == shard_dim.get_partition_keys() == ["0", "1", "2"]
    mapping = g.get_partition_mapping(shards, dataset)
    assert isinstance(mapping, dg.MultiToSingleDimensionPartitionMapping)
    assert mapping.partition_dimension_name == "shard"


# --- staleness through the dataset edge -------------------------------------------------

MODULE = '''
from pathlib import Path

from benchmarks._dataset_env import DatasetEnvironment
from benchmarks._registry import register
from benchmarks._types import SeedResult
from benchmarks.datasets import load_file


@register("lineage_demo")
class LineageDemo(DatasetEnvironment):
    name = "lineage_demo"
    version = "1"

    def __init__(self, *, path: str, protocol: str = "chat", num_fewshot: int | None = None) -> None:
        super().__init__(protocol=protocol, num_fewshot=num_fewshot)
        self.rows = load_file(Path(path))
        self._finish_init()

    def build_seed(self, row, idx):
        return SeedResult("Solve: " + row["question"], row["answer"])

    async def verify(self, response, expected, **metadata):
        from benchmarks.scoring import numeric_match

        return numeric_match(response, expected)
'''
N_ROWS, N_SHARDS = 12, 3
MODELS = ("model-a", "model-b")


def _write_rows(path: Path, rows: list[dict[str, str]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _stale(instance: dg.DagsterInstance, defs: dg.Definitions, bench: str) -> set[str]:
    # Dagster's own test helper builds the stale-status resolver (its constructor is private);
    # the status is asked per partition (DESIGN.md §10).
    from dagster._core.definitions.data_version import StaleStatus
    from dagster._utils.test.data_versions import get_stale_status_resolver

    resolver = get_stale_status_resolver(instance, list(defs.assets))  # type: ignore[arg-type]
    key = dg.AssetKey([bench, "shard_results"])
    return {f"{m}|{s}" for m in MODELS for s in range(N_SHARDS)
            if resolver.get_status(key, dg.MultiPartitionKey({"model": m, "shard": str(s)})) != StaleStatus.FRESH}


def _dataset_versions(instance: dg.DagsterInstance, bench: str) -> dict[str, str | None]:
    key = dg.AssetKey([bench, "dataset"])
    out: dict[str, str | None] = {}
    for s in range(N_SHARDS):
        rec = instance.get_latest_data_version_record(key, False, partition_key=str(s))
        out[str(s)] = None if rec is None else rec.asset_materialization.tags.get("dagster/data_version")  # type: ignore[union-attr]
    return out


def test_an_edited_row_makes_only_its_shard_stale(tmp_path: Path, reference_server, data_dir: Path) -> None:
    from nel_assets.engine.evaluation import evaluate as ev
    from nel_assets.factory import build_defs
    from nel_resources.specs import resolve
    from nel_resources.storage.store import ResultStore
    from tests.support.cli import run_nel, summary_json
    from tests.support.reference import reset_server_stats, server_stats

    src = [json.loads(ln) for ln in (data_dir / "gsm8k" / "test.jsonl").read_text().splitlines()[:N_ROWS]]
    rows = [{"question": r["question"], "answer": r["answer"].split("####")[-1].strip().replace(",", "")}
            for r in src]
    data = tmp_path / "demo.jsonl"
    _write_rows(data, rows)
    module = tmp_path / "lineage_demo.py"
    module.write_text(MODULE)
    url = reference_server()
    cfg_doc = {
        "services": {m: {"type": "api", "url": url, "model": m, "max_tokens": 16} for m in MODELS},
        "benchmarks": [{"name": "lineage_demo", "module": str(module), "params": {"path": str(data)},
                        "shards": N_SHARDS}],
        "output": {"dir": str(tmp_path / "out")},
    }
    cfg_path = tmp_path / "nel.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg_doc))
    env = {"NEL_DATA_DIR": str(data_dir)}

    # 1. `nel eval run` records every dataset partition its shards read, with the seed digest
    #    nel's own fingerprints use, and the shards' provenance names them: all fresh.
    summary = summary_json(run_nel("eval", "run", str(cfg_path), "--json", "--no-progress", env=env))
    assert summary["shards_run"] == len(MODELS) * N_SHARDS
    cfg = load_config(cfg_path)
    resolved = resolve(cfg)
    (bench,) = resolved.benchmarks
    store = ResultStore(cfg.output.dir)
    seeds = {str(t.shard): t.seeds_digest for t in ev.plan(store, bench) if t.model == MODELS[0]}
    instance = dg.DagsterInstance.from_config(str(dagster_home_for(cfg)))
    assert _dataset_versions(instance, "lineage_demo") == seeds
    defs = build_definitions(cfg, cfg.output.dir)
    assert _stale(instance, defs, "lineage_demo") == set()
    shard_mat = instance.get_latest_materialization_event(dg.AssetKey(["lineage_demo", "shard_results"]))
    assert shard_mat is not None and shard_mat.asset_materialization is not None
    assert "dagster/input_data_version/lineage_demo/dataset" in shard_mat.asset_materialization.tags

    # 2. One row of shard 1 edited, and the dataset materialized from Dagster (as from the UI,
    #    one run per partition; the shard inputs are not observed, so the only way to the
    #    shard results is the dataset edge): shard 1's results are stale on both models, no other.
    rows[N_ROWS // N_SHARDS + 1]["question"] += " (Answer in whole dollars.)"
    _write_rows(data, rows)
    ev._ENV_CACHE.clear()  # this process loaded the rows before the edit
    defs = build_definitions(cfg, cfg.output.dir)
    dataset_job = build_defs(resolve(cfg), cfg.output.dir).resolve_job_def("nel_lineage_demo_dataset")
    for s in range(N_SHARDS):
        r = dataset_job.execute_in_process(
            instance=instance, partition_key=str(s), raise_on_error=False)
        assert r.success
    versions = _dataset_versions(instance, "lineage_demo")
    assert [versions[k] == seeds[k] for k in ("0", "1", "2")] == [True, False, True]
    assert _stale(instance, defs, "lineage_demo") == {"model-a|1", "model-b|1"}

    # 3. nel reruns exactly those partitions, and Dagster agrees they are fresh again.
    reset_server_stats(url)
    summary = summary_json(run_nel("eval", "run", str(cfg_path), "--json", "--no-progress", env=env))
    assert summary["shards_run"] == len(MODELS)
    assert server_stats(url)["models"] == {m: N_ROWS // N_SHARDS for m in MODELS}
    assert _stale(instance, defs, "lineage_demo") == set()
