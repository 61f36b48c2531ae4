"""Cluster launchers: where the (model, shard) partitions of a run execute.

`slurm` (SlurmLauncher, and SlurmLauncherResource for Dagster in `.resource`) submits them as
a SLURM array job; `k8s` renders the Indexed Jobs and the merge Job for the stale partitions.
Neither imports Dagster.
"""
