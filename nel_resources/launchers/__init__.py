"""Cluster launchers: where the (model, shard) partitions of a run execute.

`slurm` (SlurmLauncher, and SlurmLauncherResource for Dagster in `.resource`) submits them as
a SLURM array job; nel_resources.launchers.slurm imports no Dagster.
"""
