"""The partitions every nel asset shares: `model` (dynamic: a key per service or checkpoint)
and, per benchmark, model x shard. Its own module so the benchmark assets (factory), the
comparison assets and dagster_project import them without importing each other."""

from __future__ import annotations

import dagster as dg

MODEL_PARTITIONS = dg.DynamicPartitionsDefinition(name="model")


def shard_partitions(n: int) -> dg.MultiPartitionsDefinition:
    """model x shard partitions for a benchmark with `n` shards."""
    return dg.MultiPartitionsDefinition({
        "model": MODEL_PARTITIONS,
        "shard": dg.StaticPartitionsDefinition([str(i) for i in range(n)]),
    })
