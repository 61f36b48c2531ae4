"""`cluster.type: ray` on a running Ray cluster: a real head (`ray start --head`, its own
process group on 127.0.0.1, stopped by killing that group, never `ray stop`), shared by the
module's tests.

1. `cluster.ray.address` from a plain `nel eval run`: every stale partition runs as a task of
   that cluster (the task ids nel records are the head's finished tasks, on its node), the
   results equal the local run item by item, and a rerun runs nothing.
   A `ray://` address (Ray Client, a driver off the cluster) runs them there too.
2. `ray job submit -- nel eval run cfg.yaml` with no address in the config (Ray gives the
   driver RAY_ADDRESS): the job succeeds, the results land in the output dir, and the job's
   logs hold nel's summary; an output dir inside the job's working dir copy is refused in
   one line.
3. A driver with the wrong token is one line saying what to fix.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from benchmarks.datasets import load_file
from tests.support.cli import nel_env, run_nel, summary_json
from tests.support.cluster_runs import MODEL, items, local_run, shard_materializations, write_config
from tests.support.gsm8k import answers_for
from tests.support.ray_head import RayHead, start_ray_head
from tests.support.realcomponents import require_real_component
from tests.support.reference import reset_server_stats

N, SHARDS = 12, 3
TASK_ID = re.compile(r"ray task ([0-9a-f]+) node ([0-9a-f]+) ")


@pytest.fixture(scope="module")
def ray_head() -> Iterator[RayHead]:
    """One head for the module (it costs ~1 GB and half a minute to start)."""
    try:
        import ray.dashboard  # noqa: F401  (ray[default]: the dashboard and job submission)
    except ImportError:
        require_real_component("ray[default] is not installed (pip install 'nel[ray]')")
    head = start_ray_head()
    try:
        yield head
    finally:
        head.stop()


def _ray_cli(head: RayHead, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`ray ARGS` against the head's dashboard, as its user runs it (the head's token)."""
    ray = str(Path(sys.executable).parent / "ray")
    return subprocess.run([ray, *args], capture_output=True, text=True, timeout=timeout,
                          env=nel_env(head.driver_env), start_new_session=True)


def test_address_in_config_runs_each_partition_on_the_cluster(
        tmp_path: Path, ray_head: RayHead, reference_server, server_stats, data_dir: Path) -> None:
    rows = load_file(data_dir / "gsm8k" / "test.jsonl")[:N]
    url = reference_server(answers=answers_for(rows, set(range(0, N, 3))))
    env = {"NEL_DATA_DIR": str(data_dir)}
    local = local_run(tmp_path, url, env, n=N, shards=SHARDS)

    out = tmp_path / "ray"
    cfg = write_config(tmp_path / "ray.yaml", url, out, n=N, shards=SHARDS,
                       cluster={"type": "ray", "ray": {"address": ray_head.gcs_address}})
    reset_server_stats(url)
    s = summary_json(run_nel("eval", "run", str(cfg), "--json", "--no-progress",
                             env={**env, **ray_head.driver_env}, timeout=600))
    assert s["shards_run"] == SHARDS and s["requests_sent"] == N, s
    assert server_stats(url)["by_endpoint"].get("/v1/chat/completions") == N

    # Each partition was a task of the head's cluster: the ids nel recorded are its tasks,
    # finished, on its (only) node; a private in-process cluster would have other ids.
    done = shard_materializations(out)
    assert set(done) == {f"{MODEL}|{i}" for i in range(SHARDS)}, done
    recorded = {}
    for key, md in done.items():
        m = TASK_ID.search(md["launched_by"])
        assert m, md["launched_by"]
        recorded[m.group(1)] = key
    head_node = ray_head.head_node_id()
    assert all(head_node.startswith(TASK_ID.search(md["launched_by"]).group(2)) for md in done.values()), done
    tasks = {t["task_id"]: t for t in ray_head.state("tasks")}
    for task_id in recorded:
        assert task_id in tasks, (task_id, sorted(tasks))
        assert tasks[task_id]["state"] == "FINISHED" and tasks[task_id]["node_id"] == head_node, tasks[task_id]
        assert tasks[task_id]["func_or_class_name"] == "run_in_env", tasks[task_id]
    assert items(out) == items(local) and len(items(out)) == N

    # A rerun finds every partition fresh: no task, no request.
    reset_server_stats(url)
    again = summary_json(run_nel("eval", "run", str(cfg), "--json", "--no-progress",
                                 env={**env, **ray_head.driver_env}, timeout=600))
    assert again["shards_run"] == 0 and again["requests_sent"] == 0, again
    assert server_stats(url)["by_endpoint"].get("/v1/chat/completions", 0) == 0
    assert {t["task_id"] for t in ray_head.state("tasks") if t["func_or_class_name"] == "run_in_env"} == set(recorded)


def test_ray_client_address_runs_each_partition_on_the_cluster(
        tmp_path: Path, ray_head: RayHead, reference_server, data_dir: Path) -> None:
    # ray://: a driver off the cluster goes through Ray Client (its server on the head).
    rows = load_file(data_dir / "gsm8k" / "test.jsonl")[:4]
    url = reference_server(answers=answers_for(rows, {0, 1}))
    out = tmp_path / "out"
    cfg = write_config(tmp_path / "ray.yaml", url, out, n=4, shards=2,
                       cluster={"type": "ray", "ray": {"address": ray_head.client_address}})
    proc = run_nel("eval", "run", str(cfg), "--json", "--no-progress",
                   env={"NEL_DATA_DIR": str(data_dir), **ray_head.driver_env}, timeout=600)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}\n{ray_head.client_server_logs()}"
    s = summary_json(proc)
    assert s["shards_run"] == 2 and s["requests_sent"] == 4, s
    (res,) = s["results"]
    assert res["score"] == pytest.approx(0.5) and res["n_items"] == 4
    tasks = {t["task_id"]: t for t in ray_head.state("tasks")}
    for md in shard_materializations(out).values():
        m = TASK_ID.search(md["launched_by"])
        assert m and tasks[m.group(1)]["state"] == "FINISHED", md["launched_by"]


def test_ray_job_submit_runs_nel_as_the_driver(
        tmp_path: Path, ray_head: RayHead, reference_server, data_dir: Path) -> None:
    rows = load_file(data_dir / "gsm8k" / "test.jsonl")[:N]
    url = reference_server(answers=answers_for(rows, set(range(0, N, 2))))
    # What the user uploads: the config (nel itself is installed on the cluster's nodes).
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    out = tmp_path / "out"  # absolute: the job's working dir is a copy Ray deletes later
    write_config(job_dir / "cfg.yaml", url, out, n=N, shards=SHARDS, cluster={"type": "ray"})
    assert "address" not in yaml.safe_load((job_dir / "cfg.yaml").read_text())["cluster"]

    job_id = f"nel-test-{uuid.uuid4().hex[:8]}"
    # The driver runs on the cluster, not here: the suite's nel settings (the data dir, the
    # isolated user config, first-N selection) reach it through the job's runtime_env.
    nel_vars = {k: v for k, v in os.environ.items() if k.startswith("NEL_")}
    runtime_env = {"env_vars": {**nel_vars, "NEL_DATA_DIR": str(data_dir)}}
    sub = _ray_cli(ray_head, "job", "submit", "--address", ray_head.dashboard_url,
                   "--submission-id", job_id, "--working-dir", str(job_dir),
                   "--runtime-env-json", json.dumps(runtime_env), "--",
                   "nel", "eval", "run", "cfg.yaml", "--no-progress", timeout=600)
    assert sub.returncode == 0, sub.stdout[-4000:] + sub.stderr[-4000:]

    status = _ray_cli(ray_head, "job", "status", "--address", ray_head.dashboard_url, job_id)
    assert status.returncode == 0 and f"Job '{job_id}' succeeded" in status.stdout, status.stdout + status.stderr
    logs = _ray_cli(ray_head, "job", "logs", "--address", ray_head.dashboard_url, job_id)
    assert logs.returncode == 0, logs.stderr
    print(logs.stdout)
    assert f"shards run {SHARDS}, up to date 0" in logs.stdout, logs.stdout
    assert "gsm8k" in logs.stdout and "Traceback" not in logs.stdout, logs.stdout

    # The results are in the output dir, each shard computed by a task of this job.
    assert len(items(out)) == N
    assert sum(r["reward"] for r in items(out)) == N // 2
    done = shard_materializations(out)
    assert set(done) == {f"{MODEL}|{i}" for i in range(SHARDS)}, done
    tasks = {t["task_id"]: t for t in ray_head.state("tasks")}
    for md in done.values():
        m = TASK_ID.search(md["launched_by"])
        assert m and m.group(1) in tasks, md["launched_by"]
        assert tasks[m.group(1)]["state"] == "FINISHED"


def test_ray_job_with_output_in_its_working_dir_is_refused_in_one_line(
        tmp_path: Path, ray_head: RayHead) -> None:
    # output.dir relative to the uploaded config: it would resolve inside the job's working
    # dir copy on the head, which Ray deletes and other nodes never see.
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    write_config(job_dir / "cfg.yaml", "http://127.0.0.1:9/v1", Path("results"), n=4, shards=2,
                 cluster={"type": "ray"})
    job_id = f"nel-test-{uuid.uuid4().hex[:8]}"
    nel_vars = {k: v for k, v in os.environ.items() if k.startswith("NEL_")}
    sub = _ray_cli(ray_head, "job", "submit", "--address", ray_head.dashboard_url,
                   "--submission-id", job_id, "--working-dir", str(job_dir),
                   "--runtime-env-json", json.dumps({"env_vars": nel_vars}), "--",
                   "nel", "eval", "run", "cfg.yaml", "--no-progress", timeout=600)
    assert sub.returncode != 0, sub.stdout[-4000:]
    status = _ray_cli(ray_head, "job", "status", "--address", ray_head.dashboard_url, job_id)
    assert f"Job '{job_id}' failed" in status.stdout, status.stdout + status.stderr
    logs = _ray_cli(ray_head, "job", "logs", "--address", ray_head.dashboard_url, job_id).stdout
    # What the driver printed: after Ray's own lines up to the entrypoint, one line of nel's.
    lines = [ln for ln in logs.splitlines() if ln.strip()]
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"Running entrypoint for job {job_id}"))
    (line,) = lines[start + 1:]
    assert line.startswith("error: output.dir ") and "inside this Ray job's working_dir copy" in line, logs
    assert "give output.dir (or -o) an absolute path" in line
    m = re.match(r"error: output\.dir (\S+) is inside", line)
    assert m and not Path(m.group(1)).exists(), line  # refused before anything was written


def test_driver_with_a_wrong_token_is_one_line(tmp_path: Path, ray_head: RayHead, data_dir: Path) -> None:
    out = tmp_path / "out"
    cfg = write_config(tmp_path / "ray.yaml", "http://127.0.0.1:9/v1", out, n=4, shards=2,
                       cluster={"type": "ray", "ray": {"address": ray_head.gcs_address}})
    env = {**ray_head.driver_env, "RAY_AUTH_TOKEN": "0" * 64, "NEL_DATA_DIR": str(data_dir),
           "HF_HUB_OFFLINE": "1"}
    proc = run_nel("eval", "run", str(cfg), "--no-progress", env=env, unset=("RAY_AUTH_TOKEN_PATH",),
                   timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    # Ray's own client logs its refused handshakes first (warnings it prints before giving
    # up); nel's one error line comes last.
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    assert errors == lines[-1:], proc.stderr
    assert f"cannot join the Ray cluster at {ray_head.gcs_address}" in errors[0], errors[0]
    assert "RAY_AUTH_TOKEN" in errors[0] and "Traceback" not in proc.stderr
    assert all("InvalidAuthToken" in ln for ln in lines[:-1]), proc.stderr
    assert not list(out.glob("gsm8k/shard_results/**/*.parquet"))  # no shard ran
