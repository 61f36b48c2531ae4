"""Cluster launchers: where the (model, shard) partitions of `nel eval run` execute.

`slurm` (SlurmLauncher, and SlurmLauncherResource for Dagster in `.resource`) submits them as
a SLURM array job; `k8s` renders the Indexed Jobs and the merge Job for the stale partitions;
`docker` and `ray_tasks` run each stale partition as a container or a Ray task. None imports
Dagster.
"""
