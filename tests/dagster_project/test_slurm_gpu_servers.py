"""vLLM / SGLang / TRT-LLM servers launched inside SLURM jobs, on the real test cluster with
fake GPUs (tests/support/slurm_cluster.GPU_CLUSTER: `Gres=gpu:4` per node) and the stand-in
servers of tests/support/gpu_servers (real flags, `/health` after a delay, too few GPUs
refused).

NeMo Evaluator's own example (15_slurm_gsm8k_vllm.yaml: `type: vllm`, tensor_parallel_size 4,
node pool `gres: gpu:4`) runs as written except for what this cluster names differently (the
partition `debug`, a free port, 2 shards of 6 problems): each array task gets the 4 GPUs, its
server starts with `vllm serve ... --tensor-parallel-size 4`, becomes healthy, the shard runs
against it, the server stops; the results equal a local run item by item and no job or
server process is left.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from dagster_project import exit_codes
from nel_resources.runtime.processes import free_port, pid_alive
from tests.support.cli import nel_env, run_nel
from tests.support.gpu_servers import stand_in_env
from tests.support.slurm_cluster import GPU_CLUSTER, sh, start_slurm_cluster

COPIES = Path(__file__).resolve().parents[1] / "fixtures" / "nemo_configs"
EXAMPLE = COPIES / "examples" / "15_slurm_gsm8k_vllm.yaml"
# NeMo Evaluator's configs nel refused before for "no GPU node here" that have nothing else
# nel cannot run (the others place a sandbox on a node pool): each runs with its own shards.
GPU_COPIES = [COPIES / "examples" / "15_slurm_gsm8k_vllm.yaml",
              COPIES / "examples" / "15a_slurm_gsm8k_vllm_sharded.yaml",
              COPIES / "walkthrough" / "wt13_slurm_vllm.yaml", COPIES / "walkthrough" / "wt15_slurm_shards.yaml"]
# NeMo Evaluator's deployment pattern §7 (slurm_eval.yaml): gsm8k repeats 8 in 16 shards.
PATTERN_7 = COPIES / "deployment" / "dp07_slurm_eval.yaml"
N_SHARDS, N_PROBLEMS = 2, 6


@pytest.fixture(scope="module")
def gpu_slurm() -> dict[str, str]:
    return {"SLURM_CONF": start_slurm_cluster(separate=GPU_CLUSTER)}


@pytest.fixture
def data_env(data_dir: Path) -> dict[str, str]:
    return {"NEL_DATA_DIR": str(data_dir)}


def example_config(path: Path, out: Path, *, typ: str = "vllm", local: bool = False,
                   copy: Path = EXAMPLE, shards: int | None = N_SHARDS, problems: int = N_PROBLEMS,
                   **svc: Any) -> Path:
    """The peer's config `copy` with this cluster's names (`local`: the same run on this
    machine) and `problems` problems; `shards=None` keeps the copy's own shard count."""
    cfg = yaml.safe_load(copy.read_text())
    cfg["services"]["model"].update({"type": typ, "port": free_port(), "startup_timeout": 120, **svc})
    cfg["benchmarks"][0]["max_problems"] = problems
    cfg["cluster"]["node_pools"]["compute"]["partition"] = "debug"
    cfg["cluster"]["shards"] = shards or cfg["cluster"].get("shards", 1)
    if local:
        cfg["cluster"] = {"type": "local", "shards": cfg["cluster"]["shards"]}
        cfg["services"]["model"].pop("node_pool")
    cfg["output"] = {"dir": str(out)}
    path.write_text(yaml.safe_dump(cfg))
    return path


def rows(out: Path) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    got: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for p in sorted(out.glob("gsm8k/shard_results/model=*/shard=*/*.parquet")):
        for r in pq.read_table(p).to_pylist():
            got[(r.get("problem_idx", r.get("idx")), r.get("repeat", 0))] = (r.get("response"), r.get("reward"))
    return got


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def our_jobs(env: dict[str, str], out: Path) -> list[str]:
    """Jobs of this test's run still known to squeue (its scripts live under `out`)."""
    q = sh(env, "squeue", "-h", "-o", "%i %o")
    return [line.split()[0] for line in q.stdout.splitlines() if str(out) in line]


@pytest.fixture
def cleanup(gpu_slurm: dict[str, str]) -> Iterator[list[Path]]:
    outs: list[Path] = []
    yield outs
    for out in outs:
        if ids := our_jobs(gpu_slurm, out):
            sh(gpu_slurm, "scancel", *ids)


@pytest.mark.parametrize(("copy", "typ"), [*((c, "vllm") for c in GPU_COPIES),
                                           (EXAMPLE, "sglang"), (EXAMPLE, "trt_llm")],
                         ids=lambda v: v.stem if isinstance(v, Path) else v)
def test_the_example_runs_its_server_in_the_jobs_and_equals_a_local_run(
        copy: Path, typ: str, tmp_path: Path, gpu_slurm: dict[str, str], data_env: dict[str, str],
        cleanup: list[Path]) -> None:
    record = tmp_path / "record.jsonl"
    env = stand_in_env(record, delay="1.0", base=nel_env({**gpu_slurm, **data_env}))
    local_out, out = tmp_path / "local", tmp_path / "slurm"
    cleanup.append(out)
    # The same config on a machine with GPUs of its own: the local reference.
    local = example_config(tmp_path / "local.yaml", local_out, typ=typ, local=True, copy=copy, shards=None)
    n_shards = yaml.safe_load(local.read_text())["cluster"]["shards"]
    r = run_nel("eval", "run", str(local), "--no-progress", env={**env, "CUDA_VISIBLE_DEVICES": "0,1,2,3"},
                timeout=600)
    assert r.returncode == 0, r.stderr
    n_local = len(records(record))
    cfg = example_config(tmp_path / "slurm.yaml", out, typ=typ, copy=copy, shards=None)
    r = run_nel("eval", "run", str(cfg), "--no-progress", env=env, cwd=tmp_path, timeout=900)
    assert r.returncode == 0, r.stderr + r.stdout
    assert re.search(rf"submitted .*\({n_shards} tasks?; 0 shards up to date", r.stderr), r.stderr

    # One server per task, started in the job with its real command line and the job's GPUs.
    started = records(record)[n_local:]
    assert len(started) == n_shards and len({s["slurm_task"] for s in started}) == n_shards, started
    port = str(yaml.safe_load(cfg.read_text())["services"]["model"]["port"])
    for s in started:
        assert s["cuda_visible_devices"] == "0,1,2,3", s  # SLURM's GRES, not this machine's
        argv = s["argv"]
        assert argv[argv.index("--port") + 1] == port
        tp = {"vllm": "--tensor-parallel-size", "sglang": "--tp-size", "trt_llm": "--tp_size"}[typ]
        assert argv[argv.index(tp) + 1] == "4", argv
        # The server's log is kept next to the results, one per job.
        log = out / "logs" / f"model.slurm-{s['slurm_task']}.log"
        assert "Loading model weights" in log.read_text(), log
        assert not pid_alive(s["pid"]), f"the {typ} server of task {s['slurm_task']} is still running"
    assert our_jobs(gpu_slurm, out) == []
    slurm_rows = rows(out)
    assert slurm_rows == rows(local_out) and len(slurm_rows) == N_PROBLEMS


def test_deployment_pattern_7_runs_its_16_shards_with_a_server_in_each_task_and_equals_a_local_run(
        tmp_path: Path, gpu_slurm: dict[str, str], data_env: dict[str, str], cleanup: list[Path]) -> None:
    """slurm_eval.yaml as written (16 shards, repeats 8) but for the partition, the port and
    16 problems: 16 array tasks, each with its own vLLM server on the task's 4 GPUs, then
    the merge job; the results equal the same config run on this machine, item by item."""
    n_shards, problems, repeats = 16, 16, 8
    record = tmp_path / "record.jsonl"
    # No load delay: the 16 tasks take turns on the node's 4 GPUs, and the test stays lean.
    env = stand_in_env(record, base=nel_env({**gpu_slurm, **data_env}))
    local_out, out = tmp_path / "local", tmp_path / "slurm"
    cleanup.append(out)
    # The local reference in one shard (16 would cost 16 shard runs more): how the 16 tasks
    # split the problems and repeats must change no item.
    local = example_config(tmp_path / "local.yaml", local_out, local=True, copy=PATTERN_7, shards=1,
                           problems=problems)
    r = run_nel("eval", "run", str(local), "--no-progress", env={**env, "CUDA_VISIBLE_DEVICES": "0,1,2,3"},
                timeout=600)
    assert r.returncode == 0, r.stderr
    n_local = len(records(record))
    cfg = example_config(tmp_path / "slurm.yaml", out, copy=PATTERN_7, shards=None, problems=problems)
    assert yaml.safe_load(cfg.read_text())["cluster"]["shards"] == n_shards
    r = run_nel("eval", "run", str(cfg), "--no-progress", env=env, cwd=tmp_path, timeout=900)
    assert r.returncode == 0, r.stderr + r.stdout
    assert re.search(rf"submitted .*\({n_shards} tasks; 0 shards up to date", r.stderr), r.stderr

    started = records(record)[n_local:]
    assert sorted(int(s["slurm_task"].rsplit("_", 1)[-1]) for s in started) == list(range(n_shards)), started
    for s in started:
        assert s["cuda_visible_devices"] == "0,1,2,3", s
        log = out / "logs" / f"model.slurm-{s['slurm_task']}.log"
        assert "Uvicorn running" in log.read_text(), log  # it served: past its weights
        assert not pid_alive(s["pid"]), f"the server of task {s['slurm_task']} is still running"
    assert our_jobs(gpu_slurm, out) == []
    shards = {p.parent.name for p in out.glob("gsm8k/shard_results/model=model/shard=*/*.parquet")}
    assert shards == {f"shard={i}" for i in range(n_shards)}
    # One array of 16 tasks and the merge job after it, which completed and merged them all.
    (jobs,) = out.glob("slurm/*/jobs.json")
    doc = json.loads(jobs.read_text())
    assert len(doc["arrays"]) == 1, doc
    assert "JobState=COMPLETED" in sh(gpu_slurm, "scontrol", "show", "job", "-o", doc["merge"]).stdout
    (merged,), (alone,) = out.glob("gsm8k/eval-*.json"), local_out.glob("gsm8k/eval-*.json")
    metrics = json.loads(merged.read_text())["metrics"]
    assert metrics["n_samples"] == problems * repeats and metrics == json.loads(alone.read_text())["metrics"]
    slurm_rows = rows(out)
    assert slurm_rows == rows(local_out) and len(slurm_rows) == problems * repeats


def test_a_server_that_never_becomes_healthy_fails_its_partition_with_its_log_and_a_rerun_resubmits_it(
        tmp_path: Path, gpu_slurm: dict[str, str], data_env: dict[str, str], cleanup: list[Path]) -> None:
    record, once = tmp_path / "record.jsonl", tmp_path / "stuck-once"
    # The first server to start (the tasks take turns: each wants all 4 GPUs) never serves.
    env = stand_in_env(record, delay=f"never-once:{once}", base=nel_env({**gpu_slurm, **data_env}))
    out = tmp_path / "out"
    cleanup.append(out)
    cfg = example_config(tmp_path / "slurm.yaml", out, startup_timeout=8)
    r = run_nel("eval", "run", str(cfg), "--no-progress", env=env, cwd=tmp_path, timeout=900)
    assert r.returncode == exit_codes.EVAL_FAILED, r.stderr
    (stuck,) = [s for s in records(record) if s["pid"] == int(once.read_text())]
    missing = re.findall(r"gsm8k/model shard (\d) is missing: (?:job|task) (\S+) ended FAILED", r.stderr)
    assert len(missing) == 1, r.stderr
    shard, task = missing[0]
    assert task == stuck["slurm_task"], (task, stuck)
    # Its partition's failure carries the server's last log lines.
    assert "did not become healthy" in r.stderr and "Loading model weights ... (stuck)" in r.stderr, r.stderr
    assert not pid_alive(stuck["pid"]) and our_jobs(gpu_slurm, out) == []
    stored = [p.parent.name for p in out.glob("gsm8k/shard_results/model=model/shard=*/*.parquet")]
    assert stored == [f"shard={1 - int(shard)}"]

    r = run_nel("eval", "run", str(cfg), "--no-progress", env=env, cwd=tmp_path, timeout=900)
    assert r.returncode == 0, r.stderr
    assert re.search(r"submitted .*\(1 tasks?; 1 shards? up to date", r.stderr), r.stderr
    assert len(list(out.glob("gsm8k/shard_results/model=model/shard=*/*.parquet"))) == N_SHARDS


def test_the_job_script_says_what_it_launches_and_asks_for_the_pools_gpus(
        tmp_path: Path, data_env: dict[str, str]) -> None:
    """`submit: false` writes the scripts: the pool's `#SBATCH` lines and the server's command."""
    cfg = example_config(tmp_path / "c.yaml", tmp_path / "out")
    r = run_nel("eval", "run", str(cfg), "--no-progress", "-O", "cluster.submit=false",
                "-O", "cluster.node_pools.compute.gpus_per_node=4",
                "-O", "cluster.node_pools.compute.sbatch_extra_flags.exclusive=true", env=data_env)
    assert r.returncode == 0, r.stderr
    (script,) = (tmp_path / "out" / "slurm").glob("*/eval.sbatch")
    text = script.read_text()
    for line in ("#SBATCH --partition=debug", "#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=1",
                 "#SBATCH --gres=gpu:4", "#SBATCH --gpus-per-node=4", "#SBATCH --time=02:00:00"):
        assert line in text, text
    assert re.search(r"# nel launches services\.model \(vllm\) in the job: vllm serve "
                     r"nvidia/Llama-3\.1-70B-Instruct .*--tensor-parallel-size 4", text), text


def test_ctrl_c_while_the_server_loads_cancels_the_jobs_and_the_server(
        tmp_path: Path, gpu_slurm: dict[str, str], data_env: dict[str, str], cleanup: list[Path]) -> None:
    import signal
    import subprocess
    import sys

    from tests.support.signals import default_signals
    from tests.support.waiting import wait_for

    record = tmp_path / "record.jsonl"
    env = stand_in_env(record, delay="never", base=nel_env({**gpu_slurm, **data_env}))
    out = tmp_path / "out"
    cleanup.append(out)
    cfg = example_config(tmp_path / "slurm.yaml", out, startup_timeout=600)
    log = tmp_path / "nel.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "dagster_project.cli.main", "eval", "run", str(cfg),
                                 "--no-progress"], stdout=fh, stderr=subprocess.STDOUT, env=env,
                                cwd=tmp_path, start_new_session=True, preexec_fn=default_signals)
    try:
        # A server is up in a job (loading, never healthy) when Ctrl-C comes.
        (server,) = wait_for(lambda: records(record), timeout=300, what="a server to start in a job")
        assert our_jobs(gpu_slurm, out), "no job of the run is queued"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130, log.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert "interrupted: cancelled" in log.read_text(), log.read_text()
    assert our_jobs(gpu_slurm, out) == []
    wait_for(lambda: not pid_alive(server["pid"]), timeout=60, what="the server to be gone with its job")


@pytest.mark.parametrize("copy", [*GPU_COPIES, PATTERN_7], ids=lambda p: p.stem)
def test_the_dry_run_of_each_copy_shows_the_server_command_and_the_pool(
        copy: Path, tmp_path: Path, data_env: dict[str, str]) -> None:
    r = run_nel("eval", "run", str(copy), "--dry-run", "--json", "-o", str(tmp_path / "out"), env=data_env)
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["would_run"] == yaml.safe_load(copy.read_text())["cluster"].get("shards", 1)
    assert plan["services"]["model"]["command"] == (
        "vllm serve nvidia/Llama-3.1-70B-Instruct --host 127.0.0.1 --port 8000 --tensor-parallel-size 4 "
        "--served-model-name nvidia/Llama-3.1-70B-Instruct  (in each SLURM task on node pool compute: "
        "partition batch, nodes 1, gres gpu:4)")
    # Only the sbatch scripts are written (as NeMo Evaluator's dry run writes them): no store.
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["slurm"]
    assert plan["written"][0].startswith(f"wrote {tmp_path / 'out' / 'slurm'}")
