"""Multi-node vLLM and SGLang servers (`services.<n>.num_nodes: 2`) launched in SLURM jobs on
the real test cluster with fake GPUs: partition `multi` holds both of its nodes (`vm`,
`vm-het`), so a 2-node job is scheduled for real.

The job asks for 2 nodes; the server's head runs on the eval client's node, the other node
joins it (vLLM: a Ray cluster, the `ray` stand-in; SGLang: `--nnodes 2 --node-rank R
--dist-init-addr`), the head serves once the worker reached it; the shards run against it,
the results equal a local run item by item, each node keeps its log next to the results,
and no job or server process is left. A worker that never joins fails its partition with
the last lines of every node's log.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dagster_project import exit_codes
from nel_resources.runtime.processes import pid_alive
from tests.dagster_project.test_slurm_gpu_servers import (
    cleanup,  # noqa: F401 (a fixture)
    data_env,  # noqa: F401 (a fixture)
    example_config,
    gpu_slurm,  # noqa: F401 (a fixture)
    our_jobs,
    records,
    rows,
)
from tests.support.cli import nel_env, run_nel
from tests.support.gpu_servers import stand_in_env
from tests.support.waiting import wait_for

N_PROBLEMS = 4
# TP within a node, PP across the two: 4 x 2 = the 8 GPUs of both nodes.
SIZES = {"vllm": {"tensor_parallel_size": 4, "pipeline_parallel_size": 2},
         "sglang": {"tensor_parallel_size": 8}}


def multinode_config(path: Path, out: Path, typ: str, *, local: bool = False, **svc: Any) -> Path:
    """The peer's example, its server over 2 nodes of partition `multi` (`local`: the same
    run on one machine, which has all 8 GPUs)."""
    example_config(path, out, typ=typ, local=local, shards=2, **SIZES[typ], **svc)
    cfg = yaml.safe_load(path.read_text())
    cfg["benchmarks"][0]["max_problems"] = N_PROBLEMS
    if not local:
        cfg["services"]["model"]["num_nodes"] = 2
        cfg["cluster"]["node_pools"]["compute"]["partition"] = "multi"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.parametrize("typ", ["vllm", "sglang"])
def test_a_two_node_server_serves_the_shards_and_equals_a_local_run(
        typ: str, tmp_path: Path, gpu_slurm: dict[str, str], data_env: dict[str, str],  # noqa: F811
        cleanup: list[Path]) -> None:  # noqa: F811
    record = tmp_path / "record.jsonl"
    env = stand_in_env(record, delay="0.5", base=nel_env({**gpu_slurm, **data_env}))
    local_out, out = tmp_path / "local", tmp_path / "slurm"
    cleanup.append(out)
    local = multinode_config(tmp_path / "local.yaml", local_out, typ, local=True)
    r = run_nel("eval", "run", str(local), "--no-progress",
                env={**env, "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}, timeout=600)
    assert r.returncode == 0, r.stderr
    n_local = len(records(record))
    cfg = multinode_config(tmp_path / "slurm.yaml", out, typ)
    r = run_nel("eval", "run", str(cfg), "--no-progress", env=env, cwd=tmp_path, timeout=900)
    assert r.returncode == 0, r.stderr + r.stdout
    (script,) = out.glob("slurm/*/eval.sbatch")
    assert "#SBATCH --nodes=2" in script.read_text() and "#SBATCH --partition=multi" in script.read_text()

    started = records(record)[n_local:]
    tasks = sorted({s["slurm_task"] for s in started})
    assert len(tasks) == 2, started
    tool = {"vllm": "ray", "sglang": "sglang"}[typ]
    for task in tasks:
        mine = [s for s in started if s["slurm_task"] == task]
        # Each task's server ran on both nodes of its job, each node with the job's 4 GPUs.
        ranks = {s["slurm_nodeid"]: s for s in mine if s["tool"] == tool}
        assert sorted(ranks) == ["0", "1"], mine
        assert {ranks["0"]["slurm_node"], ranks["1"]["slurm_node"]} == {"vm", "vm-het"}, mine
        assert all(s["cuda_visible_devices"] == "0,1,2,3" for s in ranks.values()), mine
        if typ == "vllm":
            head, worker = ranks["0"]["argv"], ranks["1"]["argv"]
            assert "--head" in head and any(a.startswith("--address=") for a in worker), mine
            (serve,) = [s for s in mine if s["tool"] == "vllm"]
            argv = serve["argv"]
            assert serve["slurm_nodeid"] == "0" and serve["ray_address"] == worker[1].split("=", 1)[1]
            assert argv[argv.index("--tensor-parallel-size") + 1] == "4"
            assert argv[argv.index("--pipeline-parallel-size") + 1] == "2"
            assert argv[argv.index("--distributed-executor-backend") + 1] == "ray"
        else:
            for rank, s in ranks.items():
                argv = s["argv"]
                assert argv[argv.index("--nnodes") + 1] == "2" and argv[argv.index("--node-rank") + 1] == rank
                assert argv[argv.index("--tp-size") + 1] == "8"
            assert ranks["0"]["argv"][ranks["0"]["argv"].index("--dist-init-addr") + 1] == \
                ranks["1"]["argv"][ranks["1"]["argv"].index("--dist-init-addr") + 1]
        # One log per node next to the results: the head served, the worker joined it.
        head_log, worker_log = (out / "logs" / f"model.slurm-{task}.node{i}.log" for i in (0, 1))
        assert "Uvicorn running" in head_log.read_text(), head_log.read_text()
        assert "joined" in worker_log.read_text(), worker_log.read_text()
    assert our_jobs(gpu_slurm, out) == []
    for s in started:
        wait_for(lambda s=s: not pid_alive(s["pid"]), timeout=60,
                 what=f"{s['tool']} rank {s['slurm_nodeid']} of task {s['slurm_task']} to be gone")
    slurm_rows = rows(out)
    assert slurm_rows == rows(local_out) and len(slurm_rows) == N_PROBLEMS


def test_a_worker_that_never_joins_fails_its_partitions_with_the_nodes_log_lines(
        tmp_path: Path, gpu_slurm: dict[str, str], data_env: dict[str, str],  # noqa: F811
        cleanup: list[Path]) -> None:  # noqa: F811
    record = tmp_path / "record.jsonl"
    env = {**stand_in_env(record, base=nel_env({**gpu_slurm, **data_env})), "NEL_STANDIN_NEVER_JOIN": "1"}
    out = tmp_path / "out"
    cleanup.append(out)
    cfg = multinode_config(tmp_path / "slurm.yaml", out, "sglang", startup_timeout=10)
    r = run_nel("eval", "run", str(cfg), "--no-progress", "-O", "cluster.shards=1", env=env,
                cwd=tmp_path, timeout=600)
    assert r.returncode == exit_codes.EVAL_FAILED, r.stderr
    assert "did not become healthy" in r.stderr, r.stderr
    # The head says whom it waits for; the worker's own last lines say why.
    assert "0 of 1 worker node(s) joined" in r.stderr and "(stuck)" in r.stderr, r.stderr
    assert not list(out.glob("gsm8k/shard_results/model=model/shard=*/*.parquet"))
    assert our_jobs(gpu_slurm, out) == []
    for s in records(record):
        wait_for(lambda s=s: not pid_alive(s["pid"]), timeout=60, what="the server ranks to be gone")


def test_dry_run_and_submit_false_write_the_two_node_job_without_submitting(
        tmp_path: Path, data_env: dict[str, str]) -> None:  # noqa: F811
    import json

    cfg = multinode_config(tmp_path / "c.yaml", tmp_path / "out", "sglang")
    r = run_nel("eval", "run", str(cfg), "--dry-run", "--json", env=data_env)
    assert r.returncode == 0, r.stderr
    command = json.loads(r.stdout)["services"]["model"]["command"]
    assert "--tp-size 8" in command and "(2 nodes, one srun step" in command, command
    assert "partition multi, nodes 2, gres gpu:4" in command, command
    r = run_nel("eval", "run", str(cfg), "-O", "cluster.submit=false", env=data_env)
    assert r.returncode == 0 and "to submit: sbatch --array=0-1" in r.stdout, r.stderr + r.stdout
    for script in (tmp_path / "out" / "slurm").glob("*/eval.sbatch"):  # the dry run's and this one's
        text = script.read_text()
        assert "#SBATCH --nodes=2" in text and "#SBATCH --partition=multi" in text
        assert "srun --overlap --nodes=2 --ntasks=2 --ntasks-per-node=1 --kill-on-bad-exit=1" in text
        assert '--nnodes 2 --node-rank "$rank" --dist-init-addr' in text, text
