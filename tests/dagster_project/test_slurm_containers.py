"""Containers on SLURM through Pyxis: a launched server in its `image`, the eval client in
`cluster.eval_image`, `container_mounts`, `mount_home`, `container_env`, and `nel cache-sqsh`.

Pyxis and enroot cannot run here. What runs for real: the SLURM cluster (fake GRES), the
jobs, the `srun` steps and the stand-in servers. What stands in: tests/support/pyxis's `srun`
wrapper (first on PATH inside the job) takes Pyxis's options as Pyxis does, records them and
runs the step with the real `srun` on the host; its `enroot` writes a squashfs-magic file.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from nel_resources.runtime.processes import pid_alive
from tests.dagster_project.test_slurm_gpu_servers import (
    N_PROBLEMS,
    example_config,
    our_jobs,
    records,
    rows,
)
from tests.support.cli import nel_env, run_nel
from tests.support.gpu_servers import stand_in_env
from tests.support.pyxis import SQUASHFS_MAGIC, pyxis_env
from tests.support.slurm_cluster import GPU_CLUSTER, sh, start_slurm_cluster

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def gpu_slurm() -> dict[str, str]:
    return {"SLURM_CONF": start_slurm_cluster(separate=GPU_CLUSTER)}


def _env(tmp_path: Path, gpu_slurm: dict[str, str], data_dir: Path) -> tuple[dict[str, str], Path, Path]:
    record, steps = tmp_path / "servers.jsonl", tmp_path / "pyxis.jsonl"
    base = stand_in_env(record, delay="0.5", base=nel_env({**gpu_slurm, "NEL_DATA_DIR": str(data_dir)}))
    return pyxis_env(steps, base), record, steps


def _edit(path: Path, **cluster: Any) -> dict[str, Any]:
    cfg = yaml.safe_load(path.read_text())
    cfg["cluster"].update(cluster)
    path.write_text(yaml.safe_dump(cfg))
    return cfg


def _cancel(env: dict[str, str], out: Path) -> None:
    if ids := our_jobs(env, out):
        sh(env, "scancel", *ids)


def test_cache_sqsh_imports_the_image_once_and_the_server_runs_in_it_on_slurm(
        tmp_path: Path, gpu_slurm: dict[str, str], data_dir: Path) -> None:
    env, record, steps = _env(tmp_path, gpu_slurm, data_dir)
    cache = tmp_path / "cache"
    # `nel cache-sqsh` as NeMo Evaluator documents it: an image reference, the host, a directory
    r = run_nel("cache-sqsh", "vllm/vllm-openai:v0.8.5", "localhost", str(cache), env=env)
    assert r.returncode == 0, r.stderr
    sqsh = cache / "vllm-vllm-openai-v0.8.5.sqsh"
    assert f"enroot import -o {sqsh} -- docker://vllm/vllm-openai:v0.8.5" in r.stdout
    assert sqsh.read_bytes().startswith(SQUASHFS_MAGIC) and f"image: {sqsh}" in r.stdout
    again = run_nel("cache-sqsh", "vllm/vllm-openai:v0.8.5", "localhost", str(cache), env=env)
    assert again.returncode == 0 and "already there" in again.stdout, again.stdout + again.stderr

    out, models = tmp_path / "slurm", tmp_path / "models"
    models.mkdir()
    cfg_path = example_config(tmp_path / "c.yaml", out, image=str(sqsh),
                              container_mounts=[f"{models}:/models:ro"], env={"SVC_FLAG": "on"})
    _edit(cfg_path, container_mounts=[f"{tmp_path}:/data"], container_env={"FROM_CLUSTER": "1"})
    try:
        r = run_nel("eval", "run", str(cfg_path), "--no-progress", env=env, cwd=tmp_path, timeout=900)
        assert r.returncode == 0, r.stderr + r.stdout
    finally:
        _cancel(gpu_slurm, out)
    # Each task started its server as a Pyxis step of the job, in the cached image
    taken = [json.loads(line) for line in steps.read_text().splitlines()]
    assert len(taken) == 2 and len({t["slurm_job_id"] for t in taken}) == 2, taken
    home = os.environ.get("HOME") or str(Path.home())
    for t in taken:
        o = t["options"]
        assert o["--container-image"] == str(sqsh)
        assert o["--container-mounts"].split(",") == [f"{tmp_path}:/data", f"{models}:/models:ro",
                                                      f"{home}:{home}"]
        assert o["--container-env"] == "FROM_CLUSTER,SVC_FLAG" and o["--container-workdir"] == str(tmp_path)
        # a step of its own beside the batch step, then the server's real command line
        assert t["command"][:5] == ["--overlap", "--nodes=1", "--ntasks=1", "vllm", "serve"], t
    # ... the server inside saw the job's GPUs, and the results are all there
    started = records(record)
    assert len(started) == 2 and all(s["cuda_visible_devices"] == "0,1,2,3" for s in started), started
    assert len(rows(out)) == N_PROBLEMS
    # stopping the step stopped the server in it; no job is left
    assert not any(pid_alive(s["pid"]) for s in started) and our_jobs(gpu_slurm, out) == []


def test_the_eval_client_runs_in_eval_image_and_equals_a_local_run(
        tmp_path: Path, gpu_slurm: dict[str, str], data_dir: Path) -> None:
    env, record, steps = _env(tmp_path, gpu_slurm, data_dir)
    # the image's `nel`: this checkout (the wrapper runs the step on the host)
    image_bin = tmp_path / "image-bin"
    image_bin.mkdir()
    (image_bin / "nel").write_text(f"#!/bin/sh\nexec {sys.executable} -m dagster_project.cli.main \"$@\"\n")
    (image_bin / "nel").chmod(0o755)
    env["PATH"] = f"{env['PATH']}{os.pathsep}{image_bin}"
    # one shard (one task and the merge job) keeps it short; the array case is the test above
    local = example_config(tmp_path / "local.yaml", tmp_path / "local", local=True, shards=1)
    r = run_nel("eval", "run", str(local), "--no-progress", env={**env, "CUDA_VISIBLE_DEVICES": "0,1,2,3"},
                timeout=600)
    assert r.returncode == 0, r.stderr

    out = tmp_path / "slurm"
    cfg_path = example_config(tmp_path / "c.yaml", out, shards=1)
    _edit(cfg_path, eval_image="nel:local", mount_home=False, container_env={"NEL_DATA_DIR": str(data_dir)})
    try:
        r = run_nel("eval", "run", str(cfg_path), "--no-progress", env=env, cwd=tmp_path, timeout=900)
        assert r.returncode == 0, r.stderr + r.stdout
    finally:
        _cancel(gpu_slurm, out)
    taken = [json.loads(line) for line in steps.read_text().splitlines()]
    tasks = [t for t in taken if "--slurm-task" in t["command"]]
    merges = [t for t in taken if "--slurm-merge" in t["command"]]
    assert len(tasks) == 1 and len(merges) == 1, taken
    for t in tasks + merges:
        o = t["options"]
        assert o["--container-image"] == "nel:local" and o["--no-container-mount-home"] is True
        assert o["--container-mounts"] == f"{tmp_path}:{tmp_path}" and o["--container-env"] == "NEL_DATA_DIR"
        assert t["command"][:6] == ["--overlap", "--nodes=1", "--ntasks=1", "nel", "eval", "run"], t
    # the server (no image of its own) ran inside the eval client's container, as its child
    assert len(records(record)) == 1 + 1  # the local run's server, then the task's
    assert rows(out) == rows(tmp_path / "local") and len(rows(out)) == N_PROBLEMS


def _refusal(tmp_path: Path, cluster: dict[str, Any], service: dict[str, Any]) -> str:
    cfg = example_config(tmp_path / "r.yaml", tmp_path / "o", **service)
    _edit(cfg, **cluster)
    r = run_nel("eval", "run", str(cfg), "--dry-run", env={"NEL_DATA_DIR": "/nonexistent"})
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    return r.stderr


def test_what_pyxis_cannot_do_is_refused_in_one_line(tmp_path: Path) -> None:
    err = _refusal(tmp_path, {"shm_size": "16g"}, {})
    assert "key cluster.shm_size: Pyxis and enroot take no shared-memory size" in err
    err = _refusal(tmp_path, {"eval_image": "nel:local"}, {"image": "vllm/vllm-openai:v0.8.5"})
    assert "key services.model.image: services.model would start from inside the eval_image container" in err
    # a service image runs through Pyxis on SLURM, as a container on Docker: a local run refuses it
    cfg = example_config(tmp_path / "l.yaml", tmp_path / "o", local=True, image="vllm/vllm-openai:v0.8.5")
    r = run_nel("eval", "run", str(cfg), "--dry-run")
    assert r.returncode == 2 and "key services.model.image: running a service in a container image " \
        "on a local cluster is not supported yet in nel" in r.stderr, r.stderr


def test_dry_run_and_submit_false_show_the_pyxis_lines(tmp_path: Path, data_dir: Path) -> None:
    out = tmp_path / "o"
    cfg = example_config(tmp_path / "c.yaml", out, image="/cache/vllm.sqsh")
    _edit(cfg, container_mounts=["/lustre:/lustre"])
    env = {"NEL_DATA_DIR": str(data_dir)}
    r = run_nel("eval", "run", str(cfg), "--dry-run", env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert ("command: srun --overlap --nodes=1 --ntasks=1 --container-image=/cache/vllm.sqsh "
            "--container-mounts=/lustre:/lustre,") in r.stdout and " vllm serve " in r.stdout
    _edit(cfg, eval_image="nel:local", mount_home=False)
    data = yaml.safe_load(cfg.read_text())
    data["services"]["model"].pop("image")
    cfg.write_text(yaml.safe_dump(data))
    r = run_nel("eval", "run", str(cfg), "-O", "cluster.submit=false", env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    script = next(out.glob("slurm/*/eval.sbatch")).read_text()
    assert (f"srun --overlap --nodes=1 --ntasks=1 --container-image=nel:local "
            f"--container-mounts=/lustre:/lustre,{tmp_path}:{tmp_path} --no-container-mount-home "
            f"--container-workdir={tmp_path} nel eval run ") in script, script
