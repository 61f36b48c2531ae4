"""`cluster.type: slurm` past one array and through auto_resume, on a real SLURM cluster.

These tests run on a second cluster (tests/support/slurm_cluster.ARRAYS_CLUSTER:
its own slurmctld/slurmd, state directory and ports) whose MaxArraySize is 3, so that a
7-shard run needs three arrays. The shared cluster keeps SLURM's default: lowering its limit
would refuse the arrays of the other SLURM tests running at the same time, and a knob that
only pretends the limit is lower would never show that the real slurmctld accepts what nel
submits. Its node declares 8 CPUs (on 2 cores) so a stalled task does not hold up the others.
"""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from dagster_project import exit_codes
from tests.support.cli import run_nel, start_nel
from tests.support.cluster_runs import items, local_run, shard_materializations, write_config
from tests.support.slurm_cluster import (
    ARRAYS_CLUSTER,
    ctrl_c_submitted_run,
    gsm8k_byob_dir,
    sh,
    start_slurm_cluster,
)
from tests.support.waiting import wait_for

MAX_ARRAY_SIZE = 3


@pytest.fixture(scope="module")
def slurm_env() -> dict[str, str]:
    conf = start_slurm_cluster(separate=ARRAYS_CLUSTER, max_array_size=MAX_ARRAY_SIZE, cpus=8)
    return {"SLURM_CONF": conf}


@pytest.fixture(scope="module")
def model_url() -> Any:
    from nel_resources.reference_server import start_reference_server

    proc, url = start_reference_server()
    try:
        yield url
    finally:
        proc.stop()


def slurm(**extra: Any) -> dict[str, Any]:
    return {"type": "slurm", "walltime": "00:10:00",
            "node_pools": {"cpu": {"partition": "debug", "nodes": 1, "ntasks_per_node": 1}}, **extra}


def only_run_dir(out: Path) -> Path:
    (run_dir,) = sorted((out / "slurm").iterdir())
    return run_dir


def arrays_of(run_dir: Path) -> list[tuple[str, list[dict[str, Any]]]]:
    """(array job id, partition list) of every array in jobs.json, in submission order."""
    doc = json.loads((run_dir / "jobs.json").read_text())
    return [(a["job_id"], json.loads((run_dir / a["partitions"]).read_text())) for a in doc["arrays"]]


# -- MaxArraySize -----------------------------------------------------------------------------

def test_more_partitions_than_max_array_size_run_as_several_arrays_equal_to_the_local_run(
        tmp_path: Path, slurm_env: dict[str, str], model_url: str) -> None:
    # The cluster really refuses one array of 4 tasks: without the split nothing could run.
    refused = sh(slurm_env, "sbatch", "--parsable", "--array=0-3", "--wrap", "true")
    assert refused.returncode != 0 and "Invalid job array specification" in refused.stderr

    n, shards = 14, 7
    local_out = local_run(tmp_path, model_url, slurm_env, n=n, shards=shards)
    out = tmp_path / "slurm"
    cfg = write_config(tmp_path / "slurm.yaml", model_url, out, n=n, shards=shards, cluster=slurm(shards=shards))
    r = run_nel("eval", "run", str(cfg), "--no-progress", env=slurm_env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr

    run_dir = only_run_dir(out)
    arrays = arrays_of(run_dir)
    assert [len(parts) for _, parts in arrays] == [3, 3, 1]
    assert [p["shard"] for _, parts in arrays for p in parts] == list(range(shards))
    doc = json.loads((run_dir / "jobs.json").read_text())
    assert [a["partitions"] for a in doc["arrays"]] == [f"partitions-0-{j}.json" for j in range(3)]
    ids = [a for a, _ in arrays]
    assert (f"submitted 3 array jobs {', '.join(ids)} (7 tasks in arrays of at most 3, the cluster's "
            f"MaxArraySize; 0 shards up to date) and merge job {doc['merge']} (afterok:{':'.join(ids)})"
            ) in r.stderr
    # Every task reported by its own id, for its own shard.
    for job, parts in arrays:
        for i, p in enumerate(parts):
            assert re.search(rf"gsm8k/ref shard {p['shard']} \(task {job}_{i}\): COMPLETED", r.stderr), r.stderr
    # What SLURM ran: each array's indices stayed below MaxArraySize, the merge waited on all.
    merge = sh(slurm_env, "scontrol", "show", "job", "-o", doc["merge"]).stdout
    assert "JobState=COMPLETED" in merge, merge

    assert items(out) == items(local_out) and len(items(out)) == n
    bundle = json.loads((out / "gsm8k" / "bundle" / "model=ref" / "bundle.json").read_text())
    local_bundle = json.loads((local_out / "gsm8k" / "bundle" / "model=ref" / "bundle.json").read_text())
    assert bundle["score"] == local_bundle["score"]
    assert sorted(shard_materializations(out)) == sorted(f"ref|{s}" for s in range(shards))
    # The merge job observed each task's end on its partition, with the task's real id.
    import dagster as dg

    inst = dg.DagsterInstance.from_config(str(out / ".dagster"))
    try:
        obs = inst.fetch_observations(dg.AssetKey(["gsm8k", "shard_results"]), limit=100).records
        seen = sorted((str(o.partition_key), o.asset_observation.metadata["slurm_job_id"].value,
                       o.asset_observation.metadata["slurm_state"].value) for o in obs)
    finally:
        inst.dispose()
    assert seen == sorted((f"ref|{p['shard']}", f"{job}_{i}", "COMPLETED")
                          for job, parts in arrays for i, p in enumerate(parts))


def test_ctrl_c_cancels_every_array_and_the_merge_job(tmp_path: Path, slurm_env: dict[str, str],
                                                      model_url: str) -> None:
    out = tmp_path / "out"
    # `begin` keeps the jobs pending for an hour: they are surely queued when Ctrl-C comes.
    cfg = write_config(tmp_path / "slurm.yaml", model_url, out, n=7, shards=7,
                       cluster=slurm(shards=7, sbatch_extra_flags={"begin": "now+1hour"}))
    log = tmp_path / "nel.log"
    proc = start_nel("eval", "run", str(cfg), "--no-progress", env=slurm_env, log=log)

    def job_ids() -> list[str]:
        doc = json.loads((only_run_dir(out) / "jobs.json").read_text())
        return [a["job_id"] for a in doc["arrays"]] + [doc["merge"]]

    def queued(ids: list[str]) -> None:
        assert len(ids) == 4
        listed = sh(slurm_env, "squeue", "-h", "-j", ",".join(ids), "-o", "%F").stdout.split()
        assert set(listed) == set(ids), listed

    ids = ctrl_c_submitted_run(proc, log, slurm_env, job_ids, queued)
    assert f"interrupted: cancelled jobs {', '.join(ids)}" in log.read_text()
    assert sh(slurm_env, "squeue", "-h", "-j", ",".join(ids), "-o", "%i %T").stdout.strip() == ""


# -- auto_resume --------------------------------------------------------------------------------

N_ROWS, N_SHARDS = 8, 4  # contiguous shards of 2 rows: row 4 is shard 2's, row 2 shard 1's
MODULE = '''
import os
import time
from pathlib import Path

from benchmarks._dataset_env import DatasetEnvironment
from benchmarks._registry import register
from benchmarks._types import SeedResult
from benchmarks.datasets import load_file


@register("resume_demo")
class ResumeDemo(DatasetEnvironment):
    name = "resume_demo"
    version = "1"

    def __init__(self, *, path: str, protocol: str = "chat", num_fewshot: int | None = None) -> None:
        super().__init__(protocol=protocol, num_fewshot=num_fewshot)
        self.rows = load_file(Path(path))
        self._finish_init()

    def build_seed(self, row, idx):
        return SeedResult("Solve: " + row["question"] + "\\nEnd with #### <number>.", row["answer"],
                          {"row": idx})

    async def verify(self, response, expected, row=None, **metadata):
        from benchmarks.scoring import numeric_match

        stall = os.environ.get("RESUME_DEMO_STALL")  # a file: row 4 stalls once while it exists
        if stall and row == 4 and Path(stall).exists():
            task = os.environ["SLURM_ARRAY_JOB_ID"] + "_" + os.environ["SLURM_ARRAY_TASK_ID"]
            # Whole or not at all: the test reads it as soon as it exists.
            Path(stall + ".task.tmp").write_text(task)
            os.replace(stall + ".task.tmp", stall + ".task")
            Path(stall).unlink()
            time.sleep(3600)  # until SLURM ends the task (the test lowers its time limit)
        if os.environ.get("RESUME_DEMO_CRASH") and row == 2:
            os._exit(1)  # the task's own fault: exit 1
        return numeric_match(response, expected)
'''


@pytest.fixture(scope="module")
def bench_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return gsm8k_byob_dir(tmp_path_factory.mktemp("resumebench"), N_ROWS, "resume_demo.py", MODULE)


def resume_config(path: Path, url: str, bench_dir: Path, out: Path, **cluster: Any) -> Path:
    cfg = {
        "services": {"ref": {"type": "api", "url": url, "model": "ref-model"}},
        "benchmarks": [{"name": "resume_demo", "module": str(bench_dir / "resume_demo.py"),
                        "params": {"path": str(bench_dir / "rows.jsonl")}}],
        "cluster": slurm(shards=N_SHARDS, **cluster),
        "output": {"dir": str(out)},
    }
    path.write_text(yaml.safe_dump(cfg))
    return path


def rows_of(out: Path) -> list[tuple[Any, ...]]:
    got = [(r["problem_idx"], r["response"], r["reward"])
           for p in sorted(out.glob("resume_demo/shard_results/model=ref/shard=*/*.parquet"))
           for r in pq.read_table(p).to_pylist()]
    return sorted(got, key=repr)


def test_auto_resume_resubmits_a_timed_out_task_alone_and_not_a_failed_one(
        tmp_path: Path, slurm_env: dict[str, str], model_url: str, bench_dir: Path) -> None:
    """Four runs at once, 4 shards each (arrays [0,1,2] and [3]):
    - auto_resume on: shard 2's task stalls and SLURM ends it TIMEOUT (the test lowers that one
      task's time limit to a minute); it is resubmitted alone and the run completes, its results
      equal to the local run's item by item;
    - auto_resume off: the same TIMEOUT leaves shard 2 missing, exit 4;
    - auto_resume on with max_walltime 1 minute: the TIMEOUT task alone ran longer, so it is
      not resubmitted either;
    - auto_resume on: shard 1's task exits 1 (its own fault): not resubmitted, exit 4.
    """
    local_out = tmp_path / "local"
    local = resume_config(tmp_path / "local.yaml", model_url, bench_dir, local_out)
    local_cfg = yaml.safe_load(local.read_text())
    local_cfg["cluster"] = {"type": "local", "shards": N_SHARDS}
    local.write_text(yaml.safe_dump(local_cfg))
    r = run_nel("eval", "run", str(local), "--no-progress", env=slurm_env)
    assert r.returncode == 0, r.stderr

    runs: dict[str, tuple[Path, Any, Path]] = {}
    for name, cluster, extra_env in [
        ("resume", {"max_retries": 2}, {"RESUME_DEMO_STALL": str(tmp_path / "stall-resume")}),
        ("noresume", {"auto_resume": False}, {"RESUME_DEMO_STALL": str(tmp_path / "stall-noresume")}),
        ("spent", {"max_walltime": "00:01:00"}, {"RESUME_DEMO_STALL": str(tmp_path / "stall-spent")}),
        ("crash", {}, {"RESUME_DEMO_CRASH": "1"}),
    ]:
        if "RESUME_DEMO_STALL" in extra_env:
            Path(extra_env["RESUME_DEMO_STALL"]).write_text("")
        out = tmp_path / name
        cfg = resume_config(tmp_path / f"{name}.yaml", model_url, bench_dir, out, **cluster)
        log = tmp_path / f"{name}.log"
        runs[name] = (out, start_nel("eval", "run", str(cfg), "--no-progress",
                                     env={**slurm_env, **extra_env}, log=log), log)
    try:
        for name in ("resume", "noresume", "spent"):
            task_file = tmp_path / f"stall-{name}.task"
            proc = runs[name][1]
            wait_for(lambda f=task_file, p=proc: f.exists() and p.poll() is None, timeout=300,
                     what=f"shard 2's task of the {name!r} run to stall")
            task = task_file.read_text()
            # An empty id (the file read between its creation and its write) once made
            # `scontrol update JobId=` a silent no-op: the task ran on until the test gave up.
            assert re.fullmatch(r"\d+_\d+", task), repr(task)
            # The cluster ends it: past its time limit SLURM kills it (state TIMEOUT).
            upd = sh(slurm_env, "scontrol", "update", f"JobId={task}", "TimeLimit=1")
            assert upd.returncode == 0, upd.stderr
        codes = {name: proc.wait(timeout=600) for name, (_, proc, _) in runs.items()}
    finally:
        for _, proc, _ in runs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    logs = {name: log.read_text() for name, (_, _, log) in runs.items()}

    # auto_resume on: the TIMEOUT task alone is resubmitted; the run completes.
    out, _, _ = runs["resume"]
    assert codes["resume"] == 0, logs["resume"]
    stalled = (tmp_path / "stall-resume.task").read_text()
    assert re.search(rf"resume_demo/ref shard 2 \(task {stalled}\): TIMEOUT", logs["resume"]), logs["resume"]
    arrays = arrays_of(only_run_dir(out))
    assert [[p["shard"] for p in parts] for _, parts in arrays] == [[0, 1, 2], [3], [2]]
    assert stalled == f"{arrays[0][0]}_2"
    assert (f"auto_resume 1/2: resubmitted 1 task(s) (resume_demo/ref shard 2) as array job {arrays[2][0]} "
            "(1 task)") in logs["resume"]
    assert rows_of(out) == rows_of(local_out) and len(rows_of(out)) == N_ROWS
    bundle = json.loads((out / "resume_demo" / "bundle" / "model=ref" / "bundle.json").read_text())
    local_bundle = json.loads((local_out / "resume_demo" / "bundle" / "model=ref" / "bundle.json").read_text())
    assert bundle["score"] == local_bundle["score"]
    # Each task's end observed once on its partition: shard 2 TIMEOUT then COMPLETED.
    import dagster as dg

    inst = dg.DagsterInstance.from_config(str(out / ".dagster"))
    try:
        obs = inst.fetch_observations(dg.AssetKey(["resume_demo", "shard_results"]), limit=100).records
        seen = sorted((str(o.partition_key).split("|")[1], o.asset_observation.metadata["slurm_job_id"].value,
                       o.asset_observation.metadata["slurm_state"].value) for o in obs)
    finally:
        inst.dispose()
    a0, a1, a2 = (a for a, _ in arrays)
    assert seen == sorted([("0", f"{a0}_0", "COMPLETED"), ("1", f"{a0}_1", "COMPLETED"),
                           ("2", f"{a0}_2", "TIMEOUT"), ("3", f"{a1}_0", "COMPLETED"),
                           ("2", f"{a2}_0", "COMPLETED")])

    # auto_resume off: the TIMEOUT shard is missing, nothing resubmitted.
    out, _, _ = runs["noresume"]
    assert codes["noresume"] == exit_codes.EVAL_FAILED, logs["noresume"]
    assert [len(parts) for _, parts in arrays_of(only_run_dir(out))] == [3, 1]
    assert re.search(r"resume_demo/ref shard 2 is missing: task \d+_2 ended TIMEOUT", logs["noresume"])
    assert "resubmitted 1" not in logs["noresume"]
    assert "not resubmitted (resume_demo/ref shard 2): auto_resume is off" in logs["noresume"]
    assert sorted(p.parent.name for p in out.glob("resume_demo/shard_results/model=ref/*/*.parquet")) == [
        "shard=0", "shard=1", "shard=3"]
    assert "shards run 3, up to date 0" in logs["noresume"]  # the missing shard is not fresh

    # auto_resume on, but the tasks' summed run time (the stalled one alone > 60 s) is spent.
    out, _, _ = runs["spent"]
    assert codes["spent"] == exit_codes.EVAL_FAILED, logs["spent"]
    assert [len(parts) for _, parts in arrays_of(only_run_dir(out))] == [3, 1]
    assert re.search(r"not resubmitted \(resume_demo/ref shard 2\): the tasks' summed run time \(\d+ s\) "
                     r"reached max_walltime 00:01:00", logs["spent"]), logs["spent"]
    assert "shards run 3, up to date 0" in logs["spent"]

    # The task's own failure (exit 1) is not resubmitted, auto_resume or not.
    out, _, _ = runs["crash"]
    assert codes["crash"] == exit_codes.EVAL_FAILED, logs["crash"]
    assert [len(parts) for _, parts in arrays_of(only_run_dir(out))] == [3, 1]
    # The shard's process dies (exit 1); the task's nel reports it and ends EVAL_FAILED (4).
    assert re.search(r"resume_demo/ref shard 1 is missing: task \d+_1 ended FAILED \(exit 4:0", logs["crash"])
    assert "ended without its results (exit status 1)" in logs["crash"], logs["crash"]
    assert "resubmitted" not in logs["crash"]  # neither resubmitted nor named as not resubmitted


def test_submit_false_prints_one_sbatch_line_per_array(tmp_path: Path, slurm_env: dict[str, str],
                                                        model_url: str) -> None:
    out = tmp_path / "out"
    cfg = write_config(tmp_path / "slurm.yaml", model_url, out, n=7, shards=7,
                       cluster=slurm(shards=7, submit=False))
    r = run_nel("eval", "run", str(cfg), "--no-progress", env=slurm_env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    run_dir = only_run_dir(out)
    assert not (run_dir / "jobs.json").exists()
    files = [run_dir / f"partitions-0-{j}.json" for j in range(3)]
    assert [[p["shard"] for p in json.loads(f.read_text())] for f in files] == [[0, 1, 2], [3, 4, 5], [6]]
    script = run_dir / "eval.sbatch"
    assert [line for line in r.stdout.splitlines() if line.startswith("to submit:")] == [
        f"to submit: sbatch --array=0-2 {script} {files[0]}", f"to submit: sbatch --array=0-2 {script} {files[1]}",
        f"to submit: sbatch --array=0 {script} {files[2]}"]
    assert "--dependency=afterok:<array 0 id>:<array 1 id>:<array 2 id>" in r.stdout
