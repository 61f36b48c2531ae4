"""`nel serve --slurm` on the real single-node SLURM cluster: the job's server writes
endpoint.txt once it answers, the endpoint serves what the benchmark serves in-process, and
so does an eval through `gym://`; the printed `scancel` ends job and process.
Also: a job that fails before serving (reported with its log's tail), `submit: false`
(script only), Ctrl-C while waiting (cancels the job) and bad input (one line, exit 2).
Every server binds 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from dagster_project.cli.main import build_parser
from tests.support.cli import nel_env, run_nel, summary_json
from tests.support.realcomponents import REPO_ROOT
from tests.support.signals import default_signals
from tests.support.slurm_cluster import start_slurm_cluster
from tests.support.waiting import wait_for

N = 3  # problems served


@pytest.fixture(scope="module")
def slurm_env() -> dict[str, str]:
    data_dir = Path(os.environ.get("NEL_DATA_DIR", REPO_ROOT.parent / "shared" / "datasets"))
    if not (data_dir / "gsm8k" / "test.jsonl").exists():
        pytest.skip(f"GSM8K rows not found under {data_dir} (set NEL_DATA_DIR)")
    return {"SLURM_CONF": start_slurm_cluster(), "NEL_DATA_DIR": str(data_dir)}


@pytest.fixture(scope="module")
def model_url() -> Iterator[str]:
    from nel_resources.reference_server import start_reference_server

    proc, url = start_reference_server()
    try:
        yield url
    finally:
        proc.stop()


def write_cluster(path: Path, out: Path, **cluster: Any) -> Path:
    cfg = {"cluster": {"type": "slurm", "walltime": "00:10:00",
                       "node_pools": {"cpu": {"partition": "debug", "nodes": 1}}, **cluster},
           "output": {"dir": str(out)}}
    path.write_text(yaml.safe_dump(cfg))
    return path


def queued(env: dict[str, str], job_id: str) -> str:
    return subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%i %T"], capture_output=True,
                          text=True, env={**os.environ, **env}).stdout.strip()


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.loads(resp.read())


def post(url: str, body: dict[str, Any]) -> Any:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def test_serve_job_writes_its_endpoint_serves_gym_and_stops_by_scancel(
        tmp_path: Path, slurm_env: dict[str, str], model_url: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    # An earlier job's endpoint (that job is long gone): it must not be taken for the new one.
    (out / "endpoint.txt").write_text("127.0.0.1:9\n")
    (out / "endpoint.json").write_text(json.dumps({"job_id": "999999", "pid": 1}))
    cfg = write_cluster(tmp_path / "slurm.yaml", out)
    r = run_nel("serve", "-b", "gsm8k", "--gym-compat", "--max-problems", str(N), "--host", "127.0.0.1",
                "--port", "0", "--slurm", str(cfg), env=slurm_env, cwd=tmp_path)
    info = dict(line.split(": ", 1) for line in r.stdout.splitlines() if ": " in line)
    job_id = info.get("job_id")
    try:
        assert r.returncode == 0, r.stderr
        endpoint = (out / "endpoint.txt").read_text().strip()
        assert info["endpoint"] == endpoint != "127.0.0.1:9"
        assert endpoint.startswith("127.0.0.1:") and int(endpoint.rsplit(":", 1)[1]) > 0
        assert info["gym"] == f"gym://{endpoint}" and info["stop"] == f"scancel {job_id}"
        owner = json.loads((out / "endpoint.json").read_text())
        assert owner["job_id"] == job_id and owner["endpoint"] == endpoint
        (run_dir,) = (out / "slurm").iterdir()
        script = (run_dir / "serve.sbatch").read_text()
        assert "#SBATCH --partition=debug" in script and "#SBATCH --time=00:10:00" in script
        assert Path(info["log"]) == run_dir / f"serve-{job_id}.log"
        assert f"nel: serve job {job_id} on " in Path(info["log"]).read_text()

        base = f"http://{endpoint}"
        health = get(f"{base}/health")
        assert health["protocol"] == "gym" and health["dataset_size"] == N
        # seed/verify pairs equal the same benchmark served in-process, and so does
        # `nel eval run` against gym://$(cat endpoint.txt), item by item
        from fastapi.testclient import TestClient

        from benchmarks.serve import build_environment, generate_app

        with TestClient(generate_app(build_environment("gsm8k", max_problems=N), gym_compat=True)) as local:
            seeds = []
            for idx in range(N):
                seed = post(f"{base}/seed_session", {"idx": idx})
                assert seed == local.post("/seed_session", json={"idx": idx}).json()
                seeds.append(seed)
                for answer in (seed["expected_answer"], "-1"):
                    body = {"response": f"So the answer is #### {answer}", "expected": seed["expected_answer"]}
                    assert post(f"{base}/verify", body) == local.post("/verify", json=body).json()
            summary = summary_json(run_nel(
                "eval", "run", "-b", f"gym://{endpoint}", "-m", str(N), "--model-url", model_url,
                "--model-id", "m", "-o", str(tmp_path / "gym"), "--json", "--no-progress", env=slurm_env))
            assert summary["results"][0]["n_samples"] == N
            port = endpoint.rsplit(":", 1)[1]
            rows = pq.read_table(tmp_path / "gym" / f"gym_127_0_0_1_{port}" / "shard_results" / "model=m"
                                 / "shard=0" / "part-0.parquet").to_pylist()
            assert sorted(r["problem_idx"] for r in rows) == list(range(N))
            for row in rows:
                seed = seeds[row["problem_idx"]]
                assert row["error"] is None and row["expected"] == seed["expected_answer"]
                local_verify = local.post("/verify", json={"response": row["response"],
                                                           "expected": row["expected"]}).json()
                assert row["reward"] == local_verify["reward"]

        # a second server into the same output dir would take this one's endpoint: refused
        again = run_nel("serve", "-b", "gsm8k", "--port", "0", "--slurm", str(cfg), env=slurm_env, cwd=tmp_path)
        assert again.returncode == 2 and again.stderr.strip() == (
            f"error: {out / 'endpoint.txt'} belongs to SLURM job {job_id}, which is RUNNING: stop it "
            f"(scancel {job_id}) or serve into another --output-dir"), again.stderr
        assert (out / "endpoint.txt").read_text().strip() == endpoint

        # the printed stop command ends the job, its server process, and withdraws endpoint.txt
        subprocess.run(shlex.split(info["stop"]), env={**os.environ, **slurm_env}, check=True)
        wait_for(lambda: queued(slurm_env, job_id) == "", timeout=120, what=f"job {job_id} to leave the queue")
        job_id = None
        wait_for(lambda: not Path(f"/proc/{owner['pid']}").exists(), timeout=60, what="the server to exit")
        assert not (out / "endpoint.txt").exists() and not (out / "endpoint.json").exists()
    finally:
        if job_id:
            subprocess.run(["scancel", job_id], env={**os.environ, **slurm_env})


def test_a_job_that_fails_before_serving_is_reported_with_its_log_tail(
        tmp_path: Path, slurm_env: dict[str, str]) -> None:
    # gsm8k has no `bogus` parameter: only building the benchmark (inside the job) finds out
    r = run_nel("serve", "-b", "gsm8k", "--param", "bogus=1", "--port", "0", "--slurm",
                "--output-dir", str(tmp_path / "out"), env=slurm_env, cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    (line,) = [ln for ln in r.stderr.splitlines() if ln.startswith("error: serve job")]
    job_id = line.split()[3]
    # the job's nel serve stopped on a usage error (exit 2), and its one line is in the tail
    assert f"error: serve job {job_id} ended FAILED (exit 2:0" in line and "before it served" in line
    tail = r.stderr.split(line, 1)[1]
    assert f"  | nel: serve job {job_id} on " in r.stderr and "has no parameter 'bogus'" in tail
    assert not (tmp_path / "out" / "endpoint.txt").exists()
    assert queued(slurm_env, job_id) == ""


def test_submit_false_writes_the_script_with_every_serve_option_and_submits_nothing(
        tmp_path: Path, slurm_env: dict[str, str]) -> None:
    out = tmp_path / "out"
    cfg = write_cluster(tmp_path / "slurm.yaml", out, submit=False, account="proj-a",
                        sbatch_comment="gym env", sbatch_extra_flags={"exclusive": True},
                        container_env={"HF_HOME": "/shared/hf"})
    serve_args = ["-b", "gsm8k", "--gym-compat", "--host", "0.0.0.0", "-p", "0", "--workers", "2",
                  "--max-problems", "5", "--param", "split=test", "--param", "num_fewshot=0",
                  "--import", "json", "--read-timeout", "5", "--log-level", "info"]
    r = run_nel("serve", *serve_args, "--slurm", str(cfg), env=slurm_env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    (run_dir,) = (out / "slurm").iterdir()
    script_path = run_dir / "serve.sbatch"
    assert f"to submit: sbatch {script_path}" in r.stdout
    script = script_path.read_text()
    assert [ln for ln in script.splitlines() if ln.startswith("#SBATCH")] == [
        "#SBATCH --job-name=nel-serve-gsm8k", f"#SBATCH --output={run_dir}/serve-%j.log",
        f"#SBATCH --error={run_dir}/serve-%j.log", "#SBATCH --time=00:10:00", "#SBATCH --nodes=1",
        "#SBATCH --ntasks-per-node=1", "#SBATCH --partition=debug", "#SBATCH --account=proj-a",
        "#SBATCH --comment='gym env'", "#SBATCH --exclusive"]
    assert "export HF_HOME=/shared/hf" in script and f"cd {tmp_path}" in script
    # the job's command line parses to the same serve options, plus the endpoint file
    (cmd,) = [ln for ln in script.splitlines() if ln.startswith("exec ")]
    argv = shlex.split(cmd)[4:]  # exec python -m dagster_project.cli.main
    job = build_parser().parse_args(argv)
    mine = build_parser().parse_args(["serve", *serve_args])
    for key in ("benchmark", "gym_compat", "host", "port", "workers", "max_problems", "param",
                "imports", "read_timeout", "log_level", "verify_timeout", "max_body_bytes"):
        assert getattr(job, key) == getattr(mine, key), key
    assert job.endpoint_file == str(out / "endpoint.txt") and job.slurm is None
    assert not (out / "endpoint.txt").exists()
    ours = subprocess.run(["squeue", "-h", "-o", "%o"], capture_output=True, text=True,
                          env={**os.environ, **slurm_env}).stdout
    assert str(script_path) not in ours


def test_ctrl_c_while_waiting_cancels_the_job(tmp_path: Path, slurm_env: dict[str, str]) -> None:
    # `begin` keeps the job pending for an hour: it is surely queued when Ctrl-C comes
    cfg = write_cluster(tmp_path / "slurm.yaml", tmp_path / "out", sbatch_extra_flags={"begin": "now+1hour"})
    log = tmp_path / "nel.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "dagster_project.cli.main", "serve", "-b", "gsm8k",
                                 "--port", "0", "--slurm", str(cfg)], stdout=fh, stderr=subprocess.STDOUT,
                                env=nel_env(slurm_env), cwd=tmp_path, start_new_session=True,
                                preexec_fn=default_signals)
    job_id = ""
    try:
        wait_for(lambda: "submitted serve job" in log.read_text(), timeout=120, what="the job to be submitted")
        job_id = log.read_text().split("submitted serve job ", 1)[1].split(";", 1)[0]
        assert queued(slurm_env, job_id), "the job should be queued before Ctrl-C"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130, log.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            if job_id:  # a failed Ctrl-C leaves no job queued
                subprocess.run(["scancel", job_id], env={**os.environ, **slurm_env}, check=False)
    assert f"interrupted: cancelled job {job_id}" in log.read_text()
    assert queued(slurm_env, job_id) == ""


@pytest.mark.parametrize(("cluster", "env", "message"), [
    ({"node_pools": {"cpu": {"partition": "no-such-partition"}}}, {},
     "SLURM refused the serve job (partition 'no-such-partition'): sbatch"),
    ({"walltime": "ten minutes"}, {}, "cluster.walltime: write a SLURM time"),
    ({}, {"PATH": "/nonexistent"}, "the SLURM client commands are not installed here"),
])
def test_bad_input_is_one_line_exit_2(tmp_path: Path, slurm_env: dict[str, str], cluster: dict[str, Any],
                                      env: dict[str, str], message: str) -> None:
    cfg = write_cluster(tmp_path / "slurm.yaml", tmp_path / "out", **cluster)
    r = run_nel("serve", "-b", "gsm8k", "--port", "0", "--slurm", str(cfg), env={**slurm_env, **env},
                cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("error: ") and message in line, line
    assert not (tmp_path / "out" / "endpoint.txt").exists()
