"""`nel eval run` with `cluster.type: slurm` on the real single-node SLURM cluster.

One module-scoped reference server (the model) and a small BYOB benchmark over real GSM8K
rows (8 problems, 4 shards). The BYOB `verify` crashes the task process (os._exit) when the
test drops a marker file and the process is array task 2, so "one task fails" is
deterministic instead of a race with scancel.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from dagster_project import exit_codes
from tests.support.cli import nel_env, run_nel
from tests.support.signals import default_signals
from tests.support.slurm_cluster import (
    ctrl_c_submitted_run,
    gsm8k_byob_dir,
    sh,
    start_slurm_cluster,
)

N_ROWS, N_SHARDS = 8, 4
MODULE = '''
import os
from pathlib import Path

from benchmarks._dataset_env import DatasetEnvironment
from benchmarks._registry import register
from benchmarks._types import SeedResult
from benchmarks.datasets import load_file

MARKER = Path(__file__).with_name("crash-task-2")


@register("slurm_demo")
class SlurmDemo(DatasetEnvironment):
    name = "slurm_demo"
    version = "1"

    def __init__(self, *, path: str, protocol: str = "chat", num_fewshot: int | None = None) -> None:
        super().__init__(protocol=protocol, num_fewshot=num_fewshot)
        self.rows = load_file(Path(path))
        self._finish_init()

    def build_seed(self, row, idx):
        return SeedResult("Solve: " + row["question"] + "\\nEnd with #### <number>.", row["answer"], {})

    async def verify(self, response, expected, **metadata):
        from benchmarks.scoring import numeric_match

        if MARKER.exists() and os.environ.get("SLURM_ARRAY_TASK_ID") == "2":
            os._exit(3)  # this task dies: SLURM reports it FAILED with exit 3
        return numeric_match(response, expected)
'''


@pytest.fixture(scope="module")
def slurm_env() -> dict[str, str]:
    conf = start_slurm_cluster(accounting=True)  # sacct figures reach the asset metadata
    return {"SLURM_CONF": conf}


@pytest.fixture(scope="module")
def model_url() -> Iterator[str]:
    from nel_resources.reference_server import start_reference_server

    proc, url = start_reference_server()
    try:
        yield url
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def bench_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return gsm8k_byob_dir(tmp_path_factory.mktemp("slurmbench"), N_ROWS, "slurm_demo.py", MODULE)


def write_config(path: Path, url: str, bench_dir: Path, out: Path, *, cluster: dict[str, Any]) -> Path:
    cfg = {
        "services": {"ref": {"type": "api", "url": url, "model": "ref-model"}},
        "benchmarks": [{"name": "slurm_demo", "module": str(bench_dir / "slurm_demo.py"),
                        "params": {"path": str(bench_dir / "rows.jsonl")}}],
        "cluster": cluster,
        "output": {"dir": str(out)},
    }
    path.write_text(yaml.safe_dump(cfg))
    return path


def slurm_cluster(**extra: Any) -> dict[str, Any]:
    return {"type": "slurm", "shards": N_SHARDS, "walltime": "00:10:00",
            "node_pools": {"cpu": {"partition": "debug", "nodes": 1, "ntasks_per_node": 1}}, **extra}


def results(out: Path) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    for p in sorted(out.glob("slurm_demo/shard_results/model=*/shard=*/*.parquet")):
        for r in pq.read_table(p).to_pylist():
            rows.append((r.get("problem_idx", r.get("idx")), r.get("response"), r.get("reward", r.get("score"))))
    return sorted(rows, key=repr)


def shard_of(partition_key: Any) -> str:
    """The shard of a (model, shard) partition key (a MultiPartitionKey reads `model|shard`)."""
    return str(partition_key).split("|")[1]


def run_dirs(out: Path) -> list[Path]:
    return sorted((out / "slurm").iterdir()) if (out / "slurm").exists() else []


def test_array_with_a_failed_task_then_a_rerun_of_it_equals_the_local_run(
        tmp_path: Path, slurm_env: dict[str, str], model_url: str, bench_dir: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """4-shard array; task 2 dies, is reported missing, the others' results stay; the rerun
    submits an array of that one task plus the afterok merge; the results equal a local
    run's item by item and the instance shows every partition materialized by its task."""
    local_out, out = tmp_path / "local", tmp_path / "slurm"
    local = write_config(tmp_path / "local.yaml", model_url, bench_dir, local_out,
                         cluster={"type": "local", "shards": N_SHARDS})
    r = run_nel("eval", "run", str(local), "--no-progress", env=slurm_env)
    assert r.returncode == 0, r.stderr
    cfg = write_config(tmp_path / "slurm.yaml", model_url, bench_dir, out, cluster=slurm_cluster())
    marker = bench_dir / "crash-task-2"
    marker.write_text("")
    try:
        r = run_nel("eval", "run", str(cfg), "--no-progress", env=slurm_env, cwd=tmp_path)
    finally:
        marker.unlink()
    assert r.returncode == exit_codes.EVAL_FAILED, r.stderr
    (first,) = run_dirs(out)
    jobs = json.loads((first / "jobs.json").read_text())
    assert len(jobs["arrays"]) == 1  # FAILED is the task's own fault: auto_resume leaves it
    parts = json.loads((first / jobs["arrays"][0]["partitions"]).read_text())
    assert [(p["model"], p["shard"]) for p in parts] == [("ref", s) for s in range(N_SHARDS)]
    assert f"submitted array job {jobs['arrays'][0]['job_id']} (4 tasks; 0 shards up to date)" in r.stderr
    # The shard's process dies (exit 3); the task's nel reports it and ends EVAL_FAILED (4),
    # with the shard process's own status in its error line.
    assert re.search(r"slurm_demo/ref shard 2 is missing: task \d+_2 ended FAILED \(exit 4:0", r.stderr), r.stderr
    assert re.search(r"evaluating slurm_demo/ref shard 2: ended without its results \(exit status 3\)",
                     r.stderr), r.stderr
    assert "error: slurm_demo/ref: shard 2 is missing" in r.stderr
    stored = sorted(p.parent.name for p in out.glob("slurm_demo/shard_results/model=ref/shard=*/*.parquet"))
    assert stored == ["shard=0", "shard=1", "shard=3"]
    assert not (out / "slurm_demo" / "bundle" / "model=ref" / "bundle.json").exists()
    # The launcher reports the partitions' states as SLURM has them.
    from nel_resources.launchers.registry import get_launcher

    monkeypatch.setenv("SLURM_CONF", slurm_env["SLURM_CONF"])
    states = {st.shard: st.state for st in get_launcher("slurm").states(out)}
    assert states == {0: "COMPLETED", 1: "COMPLETED", 2: "FAILED", 3: "COMPLETED"}, states

    r = run_nel("eval", "run", str(cfg), "--no-progress", env=slurm_env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    first, second = run_dirs(out)
    jobs = json.loads((second / "jobs.json").read_text())
    assert len(jobs["arrays"]) == 1
    parts = json.loads((second / jobs["arrays"][0]["partitions"]).read_text())
    assert [(p["shard"], p["reason"]) for p in parts] == [(2, "no results yet")]
    assert "(1 task; 3 shards up to date)" in r.stderr
    assert [(st.shard, st.state) for st in get_launcher("slurm").states(out)] == [(2, "COMPLETED")]
    assert results(out) == results(local_out) and len(results(out)) == N_ROWS
    bundle = json.loads((out / "slurm_demo" / "bundle" / "model=ref" / "bundle.json").read_text())
    local_bundle = json.loads((local_out / "slurm_demo" / "bundle" / "model=ref" / "bundle.json").read_text())
    assert bundle["score"] == local_bundle["score"]

    # The instance the tasks wrote to: every shard partition materialized by a task, and
    # each task's SLURM outcome observed on its partition (shard 2: FAILED, then COMPLETED).
    import dagster as dg

    instance = dg.DagsterInstance.from_config(str(out / ".dagster"))
    key = dg.AssetKey(["slurm_demo", "shard_results"])
    mats = instance.fetch_materializations(key, limit=100).records
    assert sorted(shard_of(m.partition_key) for m in mats) == ["0", "1", "2", "3"]
    obs = instance.fetch_observations(key, limit=100).records
    seen = sorted((shard_of(o.partition_key),
                   o.asset_observation.metadata["slurm_state"].value) for o in obs
                  if "slurm_state" in o.asset_observation.metadata)
    assert seen == [("0", "COMPLETED"), ("1", "COMPLETED"), ("2", "COMPLETED"), ("2", "FAILED"),
                    ("3", "COMPLETED")]
    for o in obs:
        md = o.asset_observation.metadata
        assert md["slurm_job_id"].value and md["slurm_elapsed_s"].value >= 0
        assert md["sacct_nodelist"].value and md["sacct_totalcpu"].value  # from sacct

    # Unchanged rerun: nothing is submitted.
    r = run_nel("eval", "run", str(cfg), "--no-progress", env=slurm_env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "every shard is up to date (4); nothing submitted" in r.stderr
    assert len(run_dirs(out)) == 2


def test_ctrl_c_cancels_the_jobs(tmp_path: Path, slurm_env: dict[str, str], model_url: str,
                                 bench_dir: Path) -> None:
    out = tmp_path / "out"
    # `begin` keeps the jobs pending for an hour: they are surely queued when Ctrl-C comes.
    cfg = write_config(tmp_path / "slurm.yaml", model_url, bench_dir, out,
                       cluster=slurm_cluster(sbatch_extra_flags={"begin": "now+1hour"}))
    log = tmp_path / "nel.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "dagster_project.cli.main", "eval", "run", str(cfg),
                                 "--no-progress"], stdout=fh, stderr=subprocess.STDOUT,
                                env=nel_env(slurm_env), cwd=tmp_path, start_new_session=True,
                                preexec_fn=default_signals)

    def job_ids() -> list[str]:
        jobs = json.loads((run_dirs(out)[0] / "jobs.json").read_text())
        return [jobs["arrays"][0]["job_id"], jobs["merge"]]

    def queued(ids: list[str]) -> None:
        listed = sh(slurm_env, "squeue", "-h", "-j", ",".join(ids), "-o", "%i").stdout
        assert listed.strip(), "the jobs should be queued before Ctrl-C"

    ids = ctrl_c_submitted_run(proc, log, slurm_env, job_ids, queued, submit_timeout=120)
    assert "interrupted: cancelled jobs" in log.read_text()
    left = sh(slurm_env, "squeue", "-h", "-j", ",".join(ids), "-o", "%i %T").stdout
    assert left.strip() == ""


def gpu_config(tmp_path: Path, url: str, bench_dir: Path, *, tp: int, submit: bool) -> Path:
    cfg = yaml.safe_load(write_config(tmp_path / "c.yaml", url, bench_dir, tmp_path / "out",
                                      cluster={}).read_text())
    cfg["services"]["big"] = {"type": "vllm", "model": "org/big-model", "tensor_parallel_size": tp,
                              "node_pool": "gpu", "port": 8001}
    cfg["cluster"] = slurm_cluster(account="proj-a", sbatch_comment="nightly eval", submit=submit,
                                   sbatch_extra_flags={"exclusive": True, "qos": "normal"},
                                   container_env={"HF_HOME": "/shared/hf"},
                                   node_pools={"gpu": {"partition": "gpu-batch", "nodes": 1,
                                                       "ntasks_per_node": 1, "gres": "gpu:4",
                                                       "sbatch_extra_flags": {"segment": 1}}})
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_submit_false_writes_the_scripts_and_submits_nothing(tmp_path: Path, model_url: str,
                                                              bench_dir: Path) -> None:
    cfg = gpu_config(tmp_path, model_url, bench_dir, tp=4, submit=False)
    r = run_nel("eval", "run", str(cfg), "--no-progress", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    (run_dir,) = run_dirs(tmp_path / "out")
    assert not (run_dir / "jobs.json").exists()
    script = (run_dir / "eval.sbatch").read_text()
    sbatch = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    assert sbatch == [
        "#SBATCH --job-name=nel-eval", f"#SBATCH --output={run_dir}/logs/eval-%A_%a.log",
        f"#SBATCH --error={run_dir}/logs/eval-%A_%a.log", "#SBATCH --time=00:10:00",
        "#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=1", "#SBATCH --partition=gpu-batch",
        "#SBATCH --gres=gpu:4", "#SBATCH --account=proj-a", "#SBATCH --comment='nightly eval'",
        "#SBATCH --exclusive", "#SBATCH --qos=normal", "#SBATCH --segment=1"]
    assert "export HF_HOME=/shared/hf" in script
    assert "# nel launches services.big (vllm) in the job: vllm serve org/big-model" in script
    assert "--tensor-parallel-size 4" in script
    assert re.search(r"dagster_project\.cli\.main eval run \S*gpu\.yaml --no-progress --slurm-task \"\$1\"$",
                     script, re.M), script
    merge = (run_dir / "merge.sbatch").read_text()
    assert "#SBATCH --job-name=nel-merge" in merge and f"--slurm-merge {run_dir}" in merge
    parts = json.loads((run_dir / "partitions-0.json").read_text())
    assert sorted((p["model"], p["shard"]) for p in parts) == sorted(
        (m, s) for m in ("big", "ref") for s in range(N_SHARDS))
    assert f"to submit: sbatch --array=0-7 {run_dir / 'eval.sbatch'}" in r.stdout


@pytest.mark.parametrize(("tp", "submit", "message"), [
    (8, False, "tensor_parallel_size: 8 GPUs asked but node pool 'gpu' has 4 per node"),
    # (a vllm server that fits the pool is submitted: tests/dagster_project/test_slurm_gpu_servers.py)
])
def test_services_the_cluster_cannot_run_are_refused_in_one_line(
        tmp_path: Path, model_url: str, bench_dir: Path, tp: int, submit: bool, message: str) -> None:
    r = run_nel("eval", "run", str(gpu_config(tmp_path, model_url, bench_dir, tp=tp, submit=submit)),
                cwd=tmp_path)
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert message in line and "gpu.yaml:" in line
    assert not (tmp_path / "out" / "slurm").exists()
