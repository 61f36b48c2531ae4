"""Services on two node pools: `nel eval run` submits heterogeneous SLURM jobs
(dagster_project.slurm_het) on the real test cluster (start_slurm.sh: partition `debug` on
node <host>, partition `het` on node <host>-het).

The config: `ref` (our reference server, `type: api`) on pool `cpu` (the first: the eval
client's), and `tiny`, a real llama.cpp server nel launches, on pool `gpu` (partition `het`).
A `tiny` partition's job has two components; its server runs on the second (srun
--het-group=1) and the eval client on the first talks to it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from tests.dagster_project.test_slurm_run import bench_dir, model_url, run_dirs, slurm_env
from tests.support.cli import run_nel
from tests.support.realcomponents import llama_model_path, require_real_component
from tests.support.slurm_cluster import ctrl_c_submitted_run, sh

__all__ = ["bench_dir", "model_url", "slurm_env"]  # module fixtures shared with test_slurm_run

N_SHARDS = 2


def tiny_service(**extra: Any) -> dict[str, Any]:
    model = llama_model_path()
    if importlib.util.find_spec("llama_cpp") is None or not model.is_file():
        require_real_component("llama_cpp or the tiny model is missing")
    return {"type": "llama_cpp", "model": "stories260K", "model_path": str(model),
            "extra_args": ["--n_ctx", "512"], "temperature": 0.0, "max_tokens": 24,
            "max_concurrent": 1, "startup_timeout": 120, "env": {"OMP_NUM_THREADS": "1"}, **extra}


def het_config(path: Path, url: str, bench_dir: Path, out: Path, *, cluster: dict[str, Any] | None,
               gpu_pool: dict[str, Any] | None = None, tiny: dict[str, Any] | None = None) -> Path:
    """`ref` on pool cpu, `tiny` on pool gpu; `cluster=None` is the same run done locally."""
    services: dict[str, Any] = {"ref": {"type": "api", "url": url, "model": "ref-model"},
                                "tiny": tiny_service(**(tiny or {}))}
    if cluster is not None:
        services["ref"]["node_pool"] = "cpu"
        services["tiny"]["node_pool"] = "gpu"
        cluster = {"type": "slurm", "shards": N_SHARDS, "walltime": "00:10:00",
                   "node_pools": {"cpu": {"partition": "debug", "nodes": 1, "ntasks_per_node": 1},
                                  "gpu": gpu_pool or {"partition": "het", "nodes": 1,
                                                      "ntasks_per_node": 1}},
                   **cluster}
    cfg = {
        "services": services,
        "benchmarks": [{"name": "slurm_demo", "module": str(bench_dir / "slurm_demo.py"),
                        "params": {"path": str(bench_dir / "rows.jsonl")}}],
        "cluster": cluster or {"type": "local", "shards": N_SHARDS},
        "output": {"dir": str(out)},
    }
    path.write_text(yaml.safe_dump(cfg))
    return path


def rows_by_item(out: Path) -> dict[tuple[str, Any], tuple[Any, ...]]:
    """(model, item) -> (response, reward) of every stored result row."""
    got: dict[tuple[str, Any], tuple[Any, ...]] = {}
    for p in sorted(out.glob("slurm_demo/shard_results/model=*/shard=*/*.parquet")):
        model = p.parent.parent.name.split("=", 1)[1]
        for r in pq.read_table(p).to_pylist():
            key = (model, r.get("problem_idx", r.get("idx")), r.get("repeat", 0))
            got[key] = (r.get("response"), r.get("reward", r.get("score")))
    return got


def test_two_pools_run_as_heterogeneous_jobs_and_equal_the_local_run(
        tmp_path: Path, slurm_env: dict[str, str], model_url: str, bench_dir: Path) -> None:
    local_out, out = tmp_path / "local", tmp_path / "slurm"
    local = het_config(tmp_path / "local.yaml", model_url, bench_dir, local_out, cluster=None)
    r = run_nel("eval", "run", str(local), "--no-progress", env=slurm_env, timeout=600)
    assert r.returncode == 0, r.stderr
    cfg = het_config(tmp_path / "slurm.yaml", model_url, bench_dir, out, cluster={})
    r = run_nel("eval", "run", str(cfg), "--no-progress", env=slurm_env, cwd=tmp_path, timeout=900)
    assert r.returncode == 0, r.stderr + r.stdout
    (run_dir,) = run_dirs(out)
    jobs = json.loads((run_dir / "jobs.json").read_text())
    assert jobs["arrays"] == [] and len(jobs["hetjobs"]) == 2 * N_SHARDS
    m = re.search(r"submitted 4 heterogeneous jobs \((\d+)-(\d+)\) \(4 tasks; 0 shards up to date; "
                  r"eval on pool cpu; services\.tiny on pool gpu\) and merge job \d+", r.stderr)
    assert m, r.stderr
    # One state line per partition, each naming its own job.
    done = re.findall(r"slurm_demo/(\w+) shard (\d) \(job (\d+)\): COMPLETED", r.stderr)
    assert sorted((mdl, int(s)) for mdl, s, _ in done) == sorted(
        (mdl, s) for mdl in ("ref", "tiny") for s in range(N_SHARDS)), r.stderr
    assert len({jid for _, _, jid in done}) == 2 * N_SHARDS

    # The tiny partitions' jobs: two components, the server on the `het` node, the eval
    # client on the first node talking to it; the ref partitions' jobs: one component.
    parts = json.loads((run_dir / "partitions-0.json").read_text())
    for h in jobs["hetjobs"]:
        p = parts[h["index"]]
        log = (run_dir / "logs" / f"eval-{h['job_id']}.log").read_text()
        if p["model"] == "tiny":
            served = re.search(r"nel: services\.tiny serves at (http://127\.0\.0\.1:\d+/v1)", log)
            assert served, log
            assert f"nel: services.tiny at {served.group(1)} (node pool gpu)" in log
            svc_log = run_dir / "services" / h["job_id"] / "tiny.log"
            assert svc_log.exists()
            # Stopped when the eval client ended: the component removed its URL and exited.
            assert "nel: services.tiny stopping (the eval client ended)" in log
            assert not (run_dir / "services" / h["job_id"] / "tiny.url").exists()
        else:
            assert "services.tiny" not in log and not (run_dir / "services" / h["job_id"]).exists()
    tiny_jobs = [h["job_id"] for h in jobs["hetjobs"] if parts[h["index"]]["model"] == "tiny"]
    sacct = _sacct(slurm_env, tiny_jobs)
    for jid in tiny_jobs:
        # Component 0 (eval client) on the first node, component 1 (the server) on the `het`
        # node; the server's step ended on its own (COMPLETED), not cancelled with the job.
        assert sacct[f"{jid}+1"][1].endswith("-het") and not sacct[f"{jid}+0"][1].endswith("-het"), sacct
        assert sacct[f"{jid}+1.0"][0] == "COMPLETED", sacct

    # Each job's end is observed on its own partition in the run's Dagster instance.
    import dagster as dg

    instance = dg.DagsterInstance.from_config(str(out / ".dagster"))
    obs = instance.fetch_observations(dg.AssetKey(["slurm_demo", "shard_results"]), limit=100).records
    seen = {str(o.partition_key): (o.asset_observation.metadata["slurm_state"].value,
                                   o.asset_observation.metadata["slurm_job_id"].value) for o in obs}
    expect = {f"{parts[h['index']]['model']}|{parts[h['index']]['shard']}": ("COMPLETED", h["job_id"])
              for h in jobs["hetjobs"]}
    assert {k: seen.get(k) for k in expect} == expect, seen

    local_rows, slurm_rows = rows_by_item(local_out), rows_by_item(out)
    assert slurm_rows == local_rows and len(slurm_rows) == 2 * 8
    assert any(resp for (mdl, *_), (resp, _) in slurm_rows.items() if mdl == "tiny")
    for model in ("ref", "tiny"):
        b = json.loads((out / "slurm_demo" / "bundle" / f"model={model}" / "bundle.json").read_text())
        lb = json.loads((local_out / "slurm_demo" / "bundle" / f"model={model}" / "bundle.json").read_text())
        assert b["score"] == lb["score"]

    # Unchanged rerun: nothing submitted.
    r = run_nel("eval", "run", str(cfg), "--no-progress", env=slurm_env, cwd=tmp_path)
    assert r.returncode == 0 and "every shard is up to date (4); nothing submitted" in r.stderr


def test_a_service_that_fails_to_start_fails_only_its_partitions_and_a_rerun_submits_only_them(
        tmp_path: Path, slurm_env: dict[str, str], model_url: str, bench_dir: Path) -> None:
    from dagster_project import exit_codes

    out = tmp_path / "out"
    # llama.cpp's server refuses an unknown flag and exits: tiny's component writes the error.
    broken = het_config(tmp_path / "broken.yaml", model_url, bench_dir, out, cluster={},
                        tiny={"extra_args": ["--n_ctx", "512", "--no_such_flag", "1"]})
    r = run_nel("eval", "run", str(broken), "--no-progress", env=slurm_env, cwd=tmp_path, timeout=600)
    assert r.returncode == exit_codes.EVAL_FAILED, r.stderr
    for shard in range(N_SHARDS):
        assert re.search(rf"slurm_demo/tiny shard {shard} is missing: job \d+ ended FAILED", r.stderr), r.stderr
    stored = sorted(f"{p.parent.parent.name}/{p.parent.name}"
                    for p in out.glob("slurm_demo/shard_results/model=*/shard=*/*.parquet"))
    assert stored == ["model=ref/shard=0", "model=ref/shard=1"]
    (first,) = run_dirs(out)
    jobs = json.loads((first / "jobs.json").read_text())
    parts = json.loads((first / "partitions-0.json").read_text())
    tiny_job = next(h["job_id"] for h in jobs["hetjobs"] if parts[h["index"]]["model"] == "tiny")
    log = (first / "logs" / f"eval-{tiny_job}.log").read_text()
    assert "services.tiny did not start on node pool gpu: service 'tiny' did not become healthy" in log, log
    assert "unrecognized arguments: --no_such_flag" in (first / "services" / tiny_job / "tiny.log").read_text()

    fixed = het_config(tmp_path / "fixed.yaml", model_url, bench_dir, out, cluster={})
    r = run_nel("eval", "run", str(fixed), "--no-progress", env=slurm_env, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr
    first, second = run_dirs(out)
    parts = json.loads((second / "partitions-0.json").read_text())
    assert [(p["model"], p["shard"]) for p in parts] == [("tiny", 0), ("tiny", 1)]
    assert "submitted 2 heterogeneous jobs" in r.stderr and "(2 tasks; 2 shards up to date;" in r.stderr
    assert len(list(out.glob("slurm_demo/shard_results/model=*/shard=*/*.parquet"))) == 2 * N_SHARDS


def _sacct(env: dict[str, str], ids: list[str]) -> dict[str, tuple[str, str]]:
    """`12+0`, `12+1`, `12+1.0` (the service's step) -> (state, node) for two-component jobs."""
    import subprocess

    from tests.support.waiting import wait_for

    def read() -> dict[str, tuple[str, str]]:
        text = subprocess.run(["sacct", "-n", "-P", "-j", ",".join(ids), "--format=JobID,State,NodeList"],
                              capture_output=True, text=True, env={**os.environ, **env}).stdout
        rows = [line.split("|") for line in text.splitlines() if line.count("|") == 2]
        return {r[0]: (r[1].split(" ")[0], r[2]) for r in rows}

    want = [f"{j}{c}" for j in ids for c in ("+0", "+1", "+1.0")]
    wait_for(lambda: all(k in read() for k in want), timeout=60, what="sacct to list every component")
    return read()


def test_submit_false_writes_a_hetjob_script_with_each_pools_flags(
        tmp_path: Path, model_url: str, bench_dir: Path) -> None:
    gpu = {"partition": "gpu-batch", "nodes": 2, "ntasks_per_node": 4, "gres": "gpu:8",
           "sbatch_extra_flags": {"constraint": "h100"}}
    cfg = het_config(tmp_path / "het.yaml", model_url, bench_dir, tmp_path / "out", gpu_pool=gpu,
                     cluster={"submit": False, "account": "proj-a", "sbatch_comment": "nightly",
                              "sbatch_extra_flags": {"qos": "normal"}})
    r = run_nel("eval", "run", str(cfg), "--no-progress", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    (run_dir,) = run_dirs(tmp_path / "out")
    assert not (run_dir / "jobs.json").exists()
    script = (run_dir / "eval-het-gpu.sbatch").read_text()
    sbatch = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    log = f"{run_dir}/logs/eval-%j.log"
    common = ["#SBATCH --job-name=nel-eval", f"#SBATCH --output={log}", f"#SBATCH --error={log}",
              "#SBATCH --time=00:10:00"]
    assert sbatch == [
        *common, "#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=1", "#SBATCH --partition=debug",
        "#SBATCH --account=proj-a", "#SBATCH --comment=nightly", "#SBATCH --qos=normal",
        "#SBATCH hetjob",
        *common, "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4", "#SBATCH --partition=gpu-batch",
        "#SBATCH --gres=gpu:8", "#SBATCH --account=proj-a", "#SBATCH --comment=nightly",
        "#SBATCH --qos=normal", "#SBATCH --constraint=h100"]
    assert re.search(r'^NEL_SLURM_HET_GROUP=1 srun --het-group=1 --nodes=1 --ntasks=1 --overlap \S+ -m dagster_project\.cli\.main '
                     r'eval run \S*het\.yaml --no-progress --slurm-service tiny --slurm-services "\$svc_dir" &$',
                     script, re.M), script
    assert re.search(r'--slurm-task "\$1" --slurm-index "\$2" --slurm-services "\$svc_dir"$', script, re.M)
    assert "# nel launches services.tiny (llama_cpp) on its own component (node pool gpu" in script
    # The ref partitions need no second component: a plain one-component script.
    plain = (run_dir / "eval.sbatch").read_text()
    assert "hetjob" not in plain and "--het-group" not in plain and "#SBATCH --partition=debug" in plain
    parts = json.loads((run_dir / "partitions-0.json").read_text())
    assert [(p["model"], p["shard"]) for p in parts] == [("ref", 0), ("ref", 1), ("tiny", 0), ("tiny", 1)]
    assert f"to submit: for i in $(seq 2 3); do sbatch {run_dir / 'eval-het-gpu.sbatch'} " in r.stdout
    assert f"to submit: for i in $(seq 0 1); do sbatch {run_dir / 'eval.sbatch'} " in r.stdout
    assert "#SBATCH --partition=debug" in (run_dir / "merge.sbatch").read_text()


@pytest.mark.parametrize(("gpu", "reason"), [
    ({"partition": "no-such-partition"}, "Invalid partition name specified"),
    ({"partition": "het", "nodes": 3}, "Requested node configuration is not available"),
])
def test_a_pool_the_cluster_cannot_satisfy_is_one_line(
        tmp_path: Path, slurm_env: dict[str, str], model_url: str, bench_dir: Path,
        gpu: dict[str, Any], reason: str) -> None:
    cfg = het_config(tmp_path / "het.yaml", model_url, bench_dir, tmp_path / "out", cluster={},
                     gpu_pool=gpu)
    r = run_nel("eval", "run", str(cfg), "--no-progress", env=slurm_env, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert f"cluster.node_pools.gpu (partition {gpu['partition']}" in line and reason in line, line
    assert "nothing was submitted" in line
    assert not any((tmp_path / "out" / "slurm").glob("*/jobs.json"))


def test_an_api_service_on_another_pool_is_refused(tmp_path: Path, model_url: str, bench_dir: Path) -> None:
    cfg = yaml.safe_load(het_config(tmp_path / "c.yaml", model_url, bench_dir, tmp_path / "out",
                                    cluster={"submit": False}).read_text())
    cfg["services"]["ref"]["node_pool"] = "gpu"
    cfg["services"]["tiny"]["node_pool"] = "cpu"
    path = tmp_path / "swapped.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = run_nel("eval", "run", str(path), cwd=tmp_path)
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert "swapped.yaml:" in line and "key services.ref.node_pool: nel starts no server for a `type: api` service" in line
    assert not (tmp_path / "out" / "slurm").exists()


def test_ctrl_c_cancels_every_heterogeneous_job_and_the_merge_job(
        tmp_path: Path, slurm_env: dict[str, str], model_url: str, bench_dir: Path) -> None:
    import subprocess
    import sys

    from tests.support.cli import nel_env
    from tests.support.signals import default_signals

    out = tmp_path / "out"
    # `begin` keeps the jobs pending for an hour: they are surely queued when Ctrl-C comes.
    cfg = het_config(tmp_path / "het.yaml", model_url, bench_dir, out,
                     cluster={"sbatch_extra_flags": {"begin": "now+1hour"}})
    log = tmp_path / "nel.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "dagster_project.cli.main", "eval", "run", str(cfg),
                                 "--no-progress"], stdout=fh, stderr=subprocess.STDOUT,
                                env=nel_env(slurm_env), cwd=tmp_path, start_new_session=True,
                                preexec_fn=default_signals)

    def job_ids() -> list[str]:
        jobs = json.loads((run_dirs(out)[0] / "jobs.json").read_text())
        return [h["job_id"] for h in jobs["hetjobs"]] + [jobs["merge"]]

    def queued(ids: list[str]) -> None:
        assert len(ids) == 2 * N_SHARDS + 1
        listed = sh(slurm_env, "squeue", "-h", "-j", ",".join(ids), "-o", "%i").stdout.split()
        # each two-component job is listed once per component (`12+0`, `12+1`)
        assert len(listed) == N_SHARDS * 2 + N_SHARDS + 1, listed

    ids = ctrl_c_submitted_run(proc, log, slurm_env, job_ids, queued, submit_timeout=120)
    assert "interrupted: cancelled jobs" in log.read_text()
    left = sh(slurm_env, "squeue", "-h", "-j", ",".join(ids), "-o", "%i %T").stdout
    assert left.strip() == ""
