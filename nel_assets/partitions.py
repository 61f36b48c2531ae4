"""The partitions every nel asset shares: `model` (dynamic: a key per service or checkpoint)
and, per benchmark, `shard` (static) and model x shard. Its own module so the benchmark
assets (factory), the comparison assets and dagster_project import them without importing
each other."""

from __future__ import annotations

import dagster as dg

MODEL_PARTITIONS = dg.DynamicPartitionsDefinition(name="model")


def dataset_partitions(n: int) -> dg.StaticPartitionsDefinition:
    """The shards of a benchmark with `n` shards: the dataset's partitions, and the `shard`
    dimension of its shard results (the same keys, so a dataset partition maps to the
    shard results of every model on that shard)."""
    return dg.StaticPartitionsDefinition([str(i) for i in range(n)])


def shard_partitions(n: int) -> dg.MultiPartitionsDefinition:
    """model x shard partitions for a benchmark with `n` shards."""
    return dg.MultiPartitionsDefinition({"model": MODEL_PARTITIONS, "shard": dataset_partitions(n)})
