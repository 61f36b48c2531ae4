"""The asset graph holds every dependency the code has: dataset -> shard results -> bundle ->
report, the shard inputs (seeds, prompt, scorer, a model's generation settings) -> shard
results, bundles -> comparison, and the gate check on the comparison."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from dagster_project.definitions import build_definitions
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
