"""A service `image` on a heterogeneous job's component: the server's Pyxis step runs on
that component (its node, its GPUs), not on component 0's, the eval client's.

The run: the eval client on pool `cpu` (partition `debug`, node `vm`), the vLLM server in
its image on pool `compute` (partition `het`, node `vm-het`, `gres: gpu:4`), on the real
test cluster with fake GRES; Pyxis is the srun wrapper of tests/support/pyxis (it records
the options and runs the step on the host).
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from nel_resources.runtime.processes import pid_alive
from tests.dagster_project.test_slurm_containers import _cancel, _env, gpu_slurm  # noqa: F401
from tests.dagster_project.test_slurm_gpu_servers import N_PROBLEMS, example_config, records, rows
from tests.support.cli import run_nel
from tests.support.pyxis import SQUASHFS_MAGIC


def test_a_service_image_on_a_hetjob_component_runs_on_that_components_node_and_gpus(
        tmp_path: Path, gpu_slurm: dict[str, str], data_dir: Path) -> None:  # noqa: F811
    env, record, steps = _env(tmp_path, gpu_slurm, data_dir)
    sqsh = tmp_path / "vllm.sqsh"
    sqsh.write_bytes(SQUASHFS_MAGIC + b" vllm/vllm-openai:v0.8.5")
    out = tmp_path / "out"
    path = example_config(tmp_path / "c.yaml", out, image=str(sqsh))
    cfg = yaml.safe_load(path.read_text())
    gpu = {**cfg["cluster"]["node_pools"]["compute"], "partition": "het"}
    cfg["cluster"]["node_pools"] = {"cpu": {"partition": "debug", "nodes": 1}, "compute": gpu}
    # a second pool named by a service makes the jobs heterogeneous (launchers.slurm_het)
    cfg["services"]["other"] = {"type": "api", "url": "http://127.0.0.1:9/v1", "model": "x",
                                "node_pool": "cpu"}
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    try:
        r = run_nel("eval", "run", str(path), "--no-progress", env=env, cwd=tmp_path, timeout=900)
        assert r.returncode == 0, r.stderr + r.stdout
    finally:
        _cancel(gpu_slurm, out)
    assert "submitted 2 heterogeneous jobs" in r.stderr, r.stderr
    taken = [json.loads(line) for line in steps.read_text().splitlines()]
    assert len(taken) == 2, taken
    for t in taken:
        assert t["options"]["--container-image"] == str(sqsh)
        assert t["command"][:6] == ["--het-group=1", "--overlap", "--nodes=1", "--ntasks=1", "vllm", "serve"], t
    started = records(record)
    assert len(started) == 2, started
    for s in started:  # on the `het` node, with its component's GPUs
        assert s["slurm_node"] == "vm-het" and s["cuda_visible_devices"] == "0,1,2,3", s
        assert not pid_alive(s["pid"])
    assert len(rows(out)) == N_PROBLEMS
