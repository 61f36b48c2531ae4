"""Launched model servers as containers (`cluster.type: docker`) on the real Docker engine.

The engine accepts GPU device requests through a stand-in of NVIDIA's container hook
(tests/support/gpu_servers/hook, installed by deploy/docker/start_engine.sh for tests): a
container started with `--gpus "device=0,1"` sees NVIDIA_VISIBLE_DEVICES=0,1 and no device.
The server image is nel's plus the vLLM stand-in (real flags, refuses to start without the
GPUs its parallel sizes need, then serves as the reference server).

- a sharded GSM8K run with `type: vllm`, tensor parallel 2: one server container with the
  two GPUs and `vllm serve ... --tensor-parallel-size 2`, the shards run as containers
  against it, results equal the same run with the server as a local process, the server's
  log is kept, no container is left;
- a server that never becomes healthy, and one given too few GPUs, fail the run with the
  last lines of the server's log, and leave no container.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from nel_resources.runtime.processes import free_port
from tests.support.cli import nel_env, run_nel
from tests.support.docker_engine import NEL_IMAGE_GROUP
from tests.support.gpu_servers import build_standin_image, stand_in_env

pytestmark = [pytest.mark.docker, pytest.mark.xdist_group(NEL_IMAGE_GROUP)]
N, SHARDS = 6, 2


@pytest.fixture(scope="module")
def standin_image(nel_image: str) -> str:
    return build_standin_image(nel_image)


def write_config(path: Path, out: Path, *, cluster: dict[str, Any] | None, **svc: Any) -> Path:
    cfg: dict[str, Any] = {
        "services": {"model": {"type": "vllm", "model": "org/tiny-model", "tensor_parallel_size": 2,
                               "port": free_port(), "startup_timeout": 120, **svc}},
        "benchmarks": [{"name": "gsm8k", "max_problems": N, "shards": SHARDS}],
        "output": {"dir": str(out)},
    }
    if cluster:
        cfg["cluster"] = cluster
    path.write_text(yaml.safe_dump(cfg))
    return path


def rows(out: Path) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    got: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for p in sorted(out.glob("gsm8k/shard_results/model=*/shard=*/*.parquet")):
        for r in pq.read_table(p).to_pylist():
            got[(r["problem_idx"], r["repeat"])] = (r["prompt"], r["response"], r["reward"])
    return got


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def server_containers() -> list[str]:
    out = subprocess.run(["docker", "ps", "-aq", "--filter", "label=nel.role=model-server"],
                         capture_output=True, text=True)
    return out.stdout.split()


def docker_cluster(nel_image: str) -> dict[str, Any]:
    return {"type": "docker", "image": nel_image, "mount_home": False, "shm_size": "64m"}


def test_a_vllm_server_runs_as_a_container_with_its_gpus_and_equals_a_local_run(
        tmp_path: Path, data_dir: Path, nel_image: str, standin_image: str) -> None:
    record = tmp_path / "record.jsonl"
    env = stand_in_env(record, delay="0.5", base=nel_env({"NEL_DATA_DIR": str(data_dir)}))
    local = write_config(tmp_path / "local.yaml", tmp_path / "local", cluster=None)
    r = run_nel("eval", "run", str(local), "--no-progress", env={**env, "CUDA_VISIBLE_DEVICES": "0,1"},
                timeout=600)
    assert r.returncode == 0, r.stderr
    n_local = len(records(record))

    out = tmp_path / "docker"
    cfg = write_config(tmp_path / "docker.yaml", out, cluster=docker_cluster(nel_image),
                       image=standin_image, container_mounts=[f"{tmp_path}:{tmp_path}"],
                       env={"NEL_STANDIN_RECORD": str(record), "NEL_STANDIN_HEALTH_DELAY": "0.5"})
    r = run_nel("eval", "run", str(cfg), "--no-progress", env=nel_env({"NEL_DATA_DIR": str(data_dir)}),
                timeout=900)
    assert r.returncode == 0, r.stderr + r.stdout
    (start,) = records(record)[n_local:]  # one server for the run, in its container
    assert start["nvidia_visible_devices"] == "0,1", start  # the device request reached it
    argv = start["argv"]
    assert argv[:2] == ["serve", "org/tiny-model"]
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    port = yaml.safe_load(cfg.read_text())["services"]["model"]["port"]
    assert argv[argv.index("--port") + 1] == str(port)
    assert "Loading model weights" in (out / "logs" / "model.docker.log").read_text()
    assert server_containers() == []
    got = rows(out)
    assert got == rows(tmp_path / "local") and len(got) == N


@pytest.mark.parametrize(("svc", "why"), [
    ({"env": {"NEL_STANDIN_HEALTH_DELAY": "never"}, "startup_timeout": 4}, "Loading model weights ... (stuck)"),
    ({"gpus": 1}, "2 GPUs are needed"),
], ids=["never-healthy", "too-few-gpus"])
def test_a_server_container_that_does_not_come_up_fails_with_its_log_and_is_removed(
        svc: dict[str, Any], why: str, tmp_path: Path, data_dir: Path, nel_image: str,
        standin_image: str) -> None:
    out = tmp_path / "docker"
    cfg = write_config(tmp_path / "docker.yaml", out, cluster=docker_cluster(nel_image),
                       image=standin_image, **svc)
    r = run_nel("eval", "run", str(cfg), "--no-progress", env=nel_env({"NEL_DATA_DIR": str(data_dir)}),
                timeout=600)
    assert r.returncode != 0
    assert "did not become healthy" in r.stderr and why in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert why in (out / "logs" / "model.docker.log").read_text()
    assert server_containers() == []
