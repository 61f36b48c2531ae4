"""Cluster launchers: where the (model, shard) partitions of `nel eval run` execute."""
