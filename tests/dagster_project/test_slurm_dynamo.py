"""NVIDIA Dynamo launched by nel in SLURM jobs: NeMo Evaluator 0.3.0's examples 15c
(aggregated, one worker with tensor parallel size 8 on one pool) and 15d (disaggregated:
prefill and decode workers on two pools, a heterogeneous job), on the real test cluster with
fake GPUs (`Gres=gpu:4` per node; partitions `debug` and `het` are two nodes on this host).

What stands in: tests/support/gpu_servers's `nats-server`, `etcd` and `dynamo` package (real
flags; workers register in etcd; the frontend counts them on `/health` and forwards to them),
and tests/support/pyxis's `srun` for the containers of the service's `image`. What runs for
real: the cluster, the jobs, their GPUs, the `srun` steps, nel in the jobs. Each example runs
as written except for what this cluster names differently (partitions, `gpu:4`, tensor
parallel size 4, a free port, 6 problems): the results equal a local run item by item and
nothing is left (no job, no process).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dagster_project import exit_codes
from nel_resources.runtime.processes import free_port, pid_alive
from tests.dagster_project.test_slurm_gpu_servers import N_PROBLEMS, our_jobs, records, rows
from tests.support.cli import nel_env, run_nel
from tests.support.gpu_servers import stand_in_env
from tests.support.pyxis import SQUASHFS_MAGIC, pyxis_env
from tests.support.slurm_cluster import GPU_CLUSTER, sh, start_slurm_cluster

pytestmark = pytest.mark.slurm

EXAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "nemo_configs" / "examples"
AGG, DISAGG = EXAMPLES / "15c_slurm_gsm8k_dynamo.yaml", EXAMPLES / "15d_slurm_gsm8k_dynamo_disagg.yaml"


@pytest.fixture(scope="module")
def gpu_slurm() -> dict[str, str]:
    return {"SLURM_CONF": start_slurm_cluster(separate=GPU_CLUSTER)}


@pytest.fixture
def cleanup(gpu_slurm: dict[str, str]) -> Iterator[list[Path]]:
    outs: list[Path] = []
    yield outs
    for out in outs:
        if ids := our_jobs(gpu_slurm, out):
            sh(gpu_slurm, "scancel", *ids)


def _env(tmp_path: Path, gpu_slurm: dict[str, str], data_dir: Path, **extra: str) -> dict[str, str]:
    """Stand-ins on PATH/PYTHONPATH; SHARED_ROOT (the examples' `${SHARED_ROOT}`) holds the
    `.sqsh` image the service names (squashfs magic: the Pyxis stand-in checks it)."""
    shared = tmp_path / "shared"
    shared.mkdir(exist_ok=True)
    (shared / "sglang-runtime-1.1.0-cuda13-amd64.sqsh").write_bytes(SQUASHFS_MAGIC + b"\0" * 60)
    base = nel_env({**gpu_slurm, "NEL_DATA_DIR": str(data_dir), "SHARED_ROOT": str(shared), **extra})
    return pyxis_env(tmp_path / "pyxis.jsonl", stand_in_env(tmp_path / "record.jsonl", delay="0.5", base=base))


def _config(copy: Path, path: Path, out: Path, *, local: bool = False, timeout: float = 120) -> dict[str, Any]:
    cfg = yaml.safe_load(copy.read_text())
    ((_, svc),) = cfg["services"].items()
    svc.update(port=free_port(), startup_timeout=timeout)
    for block in [svc] if "prefill" not in svc else [svc["prefill"], svc["decode"]]:
        block["tensor_parallel_size"] = 4  # this cluster's nodes have 4 GPUs
    cfg["benchmarks"][0]["max_problems"] = N_PROBLEMS
    pools = cfg["cluster"]["node_pools"]
    for pool, partition in zip(pools, ("debug", "het"), strict=False):
        pools[pool].update(partition=partition, gres="gpu:4")
    cfg["cluster"].pop("account")  # this cluster has no accounts
    if local:  # the same deployment on a machine with 8 GPUs of its own
        cfg["cluster"] = {"type": "local"}
        svc.pop("image")
        for role in ("prefill", "decode"):
            svc.get(role, {}).pop("node_pool", None)
    cfg["output"] = {"dir": str(out)}
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))  # the first node pool is the eval client's
    return cfg


def _pids(record: Path) -> list[int]:
    return [r["pid"] for r in records(record) if r["tool"] == "dynamo.sglang"]


@pytest.mark.parametrize("copy", [AGG, DISAGG], ids=lambda p: p.stem)
def test_the_example_runs_dynamo_in_the_job_and_equals_a_local_run(
        copy: Path, tmp_path: Path, gpu_slurm: dict[str, str], data_dir: Path, cleanup: list[Path]) -> None:
    env = _env(tmp_path, gpu_slurm, data_dir)
    record = tmp_path / "record.jsonl"
    local_out, out = tmp_path / "local", tmp_path / "slurm"
    cleanup.append(out)
    _config(copy, tmp_path / "local.yaml", local_out, local=True)
    r = run_nel("eval", "run", str(tmp_path / "local.yaml"), "--no-progress",
                env={**env, "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}, timeout=600)
    assert r.returncode == 0, r.stderr
    n_local = len(records(record))
    cfg = _config(copy, tmp_path / "slurm.yaml", out)
    r = run_nel("eval", "run", str(tmp_path / "slurm.yaml"), "--no-progress", env=env, cwd=tmp_path, timeout=900)
    assert r.returncode == 0, r.stderr + r.stdout

    ran = records(record)[n_local:]
    workers = [w for w in ran if w["tool"] == "dynamo.sglang"]
    ((name, svc),) = cfg["services"].items()
    want_roles = ["backend"] if "prefill" not in svc else ["decode", "prefill"]
    assert sorted(w["role"] for w in workers) == want_roles, workers
    for w in workers:
        assert w["slurm_job_id"] and w["cuda_visible_devices"] == "0,1,2,3", w  # the job's GRES
        assert w["argv"][w["argv"].index("--tp-size") + 1] == "4" and w["env"]["UCX_TLS"], w
    if "prefill" in svc:  # each role on its own pool's node, one heterogeneous job
        assert {w["role"]: w["hostname"] for w in workers}["decode"] != \
            {w["role"]: w["hostname"] for w in workers}["prefill"], workers
        assert len({w["slurm_job_id"] for w in workers}) == 1
        assert "eval-het-decode_pool.sbatch" in r.stderr + r.stdout or list(out.glob("slurm/*/eval-het-*.sbatch"))
    # Every request went through the frontend to the worker that answers.
    fwd = [x for x in ran if x["tool"] == "dynamo.frontend"]
    assert len(fwd) == N_PROBLEMS and {x["to"] for x in fwd} == {want_roles[0]}, fwd
    # Every Dynamo process ran in the service's image (the Pyxis step): NATS, etcd, frontend, workers.
    steps = [json.loads(line) for line in (tmp_path / "pyxis.jsonl").read_text().splitlines()]
    images = [s for s in steps if str(s.get("options", s)).find("sglang-runtime") >= 0]
    assert len(images) >= 3 + len(workers), steps
    logs = {p.name for p in out.rglob("*.log")}
    assert any(n.startswith(f"{name}.") and n.endswith(".nats.log") for n in logs), logs
    assert not any(pid_alive(p) for p in _pids(record)), "a Dynamo worker outlived its job"
    assert our_jobs(gpu_slurm, out) == []
    got = rows(out)
    assert got == rows(local_out) and len(got) == N_PROBLEMS


def test_a_decode_worker_that_never_registers_fails_the_partition_with_its_log(
        tmp_path: Path, gpu_slurm: dict[str, str], data_dir: Path, cleanup: list[Path]) -> None:
    env = _env(tmp_path, gpu_slurm, data_dir, NEL_STANDIN_DYNAMO_STUCK="decode")
    out = tmp_path / "out"
    cleanup.append(out)
    _config(DISAGG, tmp_path / "slurm.yaml", out, timeout=8)
    r = run_nel("eval", "run", str(tmp_path / "slurm.yaml"), "--no-progress", env=env, cwd=tmp_path, timeout=900)
    assert r.returncode == exit_codes.EVAL_FAILED, r.stderr
    assert re.search(r"gsm8k/glm5-dynamo-disagg shard 0 is missing: (?:job|task) \S+ ended FAILED", r.stderr), r.stderr
    assert "counts 0 of 1 decode worker(s) registered" in r.stderr, r.stderr
    assert "Loading model weights ... (stuck)" in r.stderr, r.stderr
    assert not any(pid_alive(p) for p in _pids(tmp_path / "record.jsonl"))
    assert our_jobs(gpu_slurm, out) == []
    assert not list(out.glob("gsm8k/shard_results/**/*.parquet"))


@pytest.mark.parametrize("copy", [AGG, DISAGG], ids=lambda p: p.stem)
def test_the_dry_run_plans_the_example_unchanged_and_writes_its_scripts(
        copy: Path, tmp_path: Path, data_dir: Path) -> None:
    r = run_nel("eval", "run", str(copy), "--dry-run", "--json", "-o", str(tmp_path / "out"),
                env={"NEL_DATA_DIR": str(data_dir)})
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    ((name, svc),) = yaml.safe_load(copy.read_text())["services"].items()
    cmd = plan["services"][name]["command"]
    for part in ("nats-server -js", "etcd --listen-client-urls", "-m dynamo.frontend --http-host 127.0.0.1 "
                 "--http-port 8000", "python3 -m dynamo.sglang --model-path placeholder/GLM-5.1-FP8 "
                 "--served-model-name glm5 --host 0.0.0.0 --port 8001 --tp-size 8", "--container-image="
                 "placeholder/sglang-runtime-1.1.0-cuda13-amd64.sqsh"):
        assert part in cmd, cmd
    (run_dir,) = (tmp_path / "out" / "slurm").iterdir()
    scripts = sorted(p.name for p in run_dir.glob("*.sbatch"))
    if "prefill" in svc:
        assert "--disaggregation-mode decode --trust-remote-code --mem-fraction-static=0.85  (on node pool "\
            "decode_pool)" in cmd, cmd
        assert scripts == ["eval-het-decode_pool.sbatch", "merge.sbatch"]
        text = (run_dir / scripts[0]).read_text()
        assert text.count("#SBATCH --gres=gpu:8") == 2 and "#SBATCH hetjob" in text
        assert f"--slurm-service {name}@decode" in text and "srun --het-group=1" in text
    else:
        assert scripts == ["eval.sbatch", "merge.sbatch"]
        assert f"# nel launches services.{name} (dynamo) in the job:" in (run_dir / "eval.sbatch").read_text()


@pytest.mark.parametrize("cluster", ["docker", "k8s"])
def test_dynamo_on_a_docker_or_kubernetes_cluster_is_refused_in_one_line(cluster: str, tmp_path: Path) -> None:
    cfg = {"services": {"d": {"type": "dynamo", "model": "m"}},
           "benchmarks": [{"name": "gsm8k", "solver": {"type": "simple", "service": "d"}}],
           "cluster": {"type": cluster}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    r = run_nel("eval", "run", str(tmp_path / "c.yaml"), "--dry-run")
    assert r.returncode != 0
    (line,) = r.stderr.strip().splitlines()
    assert f"a Dynamo deployment on a `cluster.type: {cluster}` cluster" in line and "services.d.type" in line, line
