"""Cluster launchers: the manifests and jobs that run a config's stale partitions elsewhere."""
