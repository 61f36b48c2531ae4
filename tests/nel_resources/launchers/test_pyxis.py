"""The Pyxis step of a launched server (nel_resources.launchers.pyxis.service_prefix)."""

from __future__ import annotations

from nel_resources.config import ClusterConfig, ServiceConfig
from nel_resources.launchers.pyxis import service_prefix

CLUSTER = ClusterConfig.model_validate({"type": "slurm", "node_pools": {"a": {"partition": "a"}}})


def test_a_step_from_a_heterogeneous_component_names_its_component() -> None:
    """An `srun` inside component 1 of a het job runs on component 0 unless it says
    `--het-group=1` (seen on the test cluster: tests/dagster_project/test_slurm_dynamo.py)."""
    svc = ServiceConfig(type="vllm", model="m", image="/c/v.sqsh")
    env = {"SLURM_JOB_ID": "7", "HOME": "/h"}
    assert service_prefix(CLUSTER, svc, env)[:4] == ["srun", "--overlap", "--nodes=1", "--ntasks=1"]
    assert service_prefix(CLUSTER, svc, {**env, "NEL_SLURM_HET_GROUP": "1"})[:5] == [
        "srun", "--het-group=1", "--overlap", "--nodes=1", "--ntasks=1"]


def test_a_dynamo_deployment_passes_its_infrastructure_variables_into_the_container() -> None:
    svc = ServiceConfig.model_validate({"type": "dynamo", "model": "m", "image": "/c/d.sqsh",
                                        "prefill": {"extra_env": {"UCX_TLS": "rc"}}, "decode": {}})
    (keys,) = [a for a in service_prefix(CLUSTER, svc, {"SLURM_JOB_ID": "7", "HOME": "/h"})
               if a.startswith("--container-env=")]
    assert set(keys.split("=", 1)[1].split(",")) >= {"DYN_REQUEST_PLANE", "NATS_SERVER", "ETCD_ENDPOINTS",
                                                     "CUDA_VISIBLE_DEVICES", "UCX_TLS"}
