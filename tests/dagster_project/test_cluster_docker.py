"""`cluster.type: docker` and dagster-docker's run launcher on the real Docker engine, with
nel's image built here (deploy/docker/Dockerfile, offline from the local base image; built
once and reused while the source is unchanged: the `nel_image` fixture of tests/conftest.py).

- `nel eval run` with 2 shards as containers equals the local run item by item, and each
  partition's Dagster record says which container computed it;
- a run launched through the webserver's GraphQL API on an instance whose run launcher is
  DockerRunLauncher executes in a container, and its results land in the shared store.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from benchmarks.datasets import load_file
from tests.support.cli import run_nel, summary_json
from tests.support.cluster_runs import MODEL, items, local_run, shard_materializations, write_config
from tests.support.dagster_ui import (
    RUN_STATUS,
    finished_run,
    graphql,
    launch_shard_run,
    running_webserver,
)
from tests.support.docker_engine import NEL_IMAGE_GROUP
from tests.support.gsm8k import answers_for
from tests.support.waiting import RUN_FINISH_S, wait_for

# nel:local (the `nel_image` fixture) is shared with tests/deploy/test_docker_compose_up.py.
pytestmark = [pytest.mark.docker, pytest.mark.xdist_group(NEL_IMAGE_GROUP)]
N, SHARDS = 12, 2


def test_docker_shards_equal_local_run(tmp_path: Path, reference_server, server_stats, data_dir: Path,
                                       nel_image: str) -> None:
    rows = load_file(data_dir / "gsm8k" / "test.jsonl")[:N]
    url = reference_server(answers=answers_for(rows, set(range(0, N, 2))))
    env = {"NEL_DATA_DIR": str(data_dir)}
    local = local_run(tmp_path, url, env, n=N, shards=SHARDS)

    out = tmp_path / "docker"
    cfg = write_config(tmp_path / "docker.yaml", url, out, n=N, shards=SHARDS,
                       cluster={"type": "docker", "image": nel_image, "mount_home": False,
                                "shm_size": "64m", "container_env": {"NEL_TEST_MARK": "x"}})
    s = summary_json(run_nel("eval", "run", str(cfg), "--json", "--no-progress", env=env, timeout=600))
    assert s["shards_run"] == SHARDS, s
    assert items(out) == items(local) and len(items(out)) == N
    (res,) = s["results"]
    assert res["score"] == pytest.approx(0.5) and res["n_items"] == N
    done = shard_materializations(out)
    assert set(done) == {f"{MODEL}|0", f"{MODEL}|1"}
    assert all(md["launched_by"].startswith("docker container nel-") for md in done.values()), done
    assert sum(md["requests_sent"] for md in done.values()) == N
    from nel_resources.launchers.registry import get_launcher

    states = [(st.shard, st.state, st.cluster) for st in get_launcher("docker").states(out)]
    assert states == [(0, "COMPLETED", "docker"), (1, "COMPLETED", "docker")], states
    # no container is left behind
    left = subprocess.run(["docker", "ps", "-aq", "--filter", "label=nel.run"], capture_output=True, text=True)
    assert left.stdout.strip() == ""

    # an unchanged rerun starts no container and sends nothing
    s2 = summary_json(run_nel("eval", "run", str(cfg), "--json", "--no-progress", env=env, timeout=600))
    assert s2["shards_run"] == 0 and s2["requests_sent"] == 0




def test_run_launched_from_the_webserver_executes_in_a_container(
        tmp_path: Path, reference_server, data_dir: Path, nel_image: str) -> None:
    import dagster as dg

    n = 6
    rows = load_file(data_dir / "gsm8k" / "test.jsonl")[:n]
    url = reference_server(answers=answers_for(rows, {0, 1, 2}))
    out, home = tmp_path / "out", tmp_path / "home"
    home.mkdir()
    cfg = write_config(tmp_path / "nel.yaml", url, out, n=n, shards=1)
    (home / "dagster.yaml").write_text(yaml.safe_dump({
        "telemetry": {"enabled": False},
        "run_coordinator": {"module": "dagster._core.run_coordinator", "class": "DefaultRunCoordinator"},
        "run_launcher": {"module": "dagster_docker", "class": "DockerRunLauncher", "config": {
            "image": nel_image,
            "env_vars": [f"NEL_CONFIG={cfg}", f"NEL_DATA_DIR={data_dir}", "NEL_SHUFFLE_SEED=null"],
            # The instance (SQLite under `home`), the config and the store at the same paths.
            "container_kwargs": {"network_mode": "host",
                                 "volumes": [f"{tmp_path}:{tmp_path}", f"{data_dir}:{data_dir}:ro"]}}},
    }))
    inst = dg.DagsterInstance.from_config(str(home))
    inst.add_dynamic_partitions("model", [MODEL])
    inst.dispose()
    container = ""
    with running_webserver(home, cfg, data_dir, tmp_path / "webserver.log",
                           ready_asset=["gsm8k", "shard_results"]) as (_, base):
        run_id = launch_shard_run(base, MODEL)
        try:
            run = wait_for(lambda: finished_run(base, run_id), timeout=RUN_FINISH_S, what=f"run {run_id} to finish", interval=1.0)
        finally:
            tags = {t["key"]: t["value"] for t in graphql(base, RUN_STATUS, {"id": run_id})["runOrError"]["tags"]}
            container = tags.get("docker/container_id", "")
    try:
        assert container, tags  # DockerRunLauncher started the run's container
        logs = subprocess.run(["docker", "logs", container], capture_output=True, text=True)
        assert run["status"] == "SUCCESS", logs.stdout[-3000:] + logs.stderr[-3000:]
        image = subprocess.run(["docker", "inspect", "--format", "{{.Config.Image}} {{.State.ExitCode}}",
                                container], capture_output=True, text=True).stdout.split()
        assert image == [nel_image, "0"]
        # the results are in the shared store, written by the container
        t = pq.read_table(out / "gsm8k" / "shard_results" / f"model={MODEL}" / "shard=0" / "part-0.parquet")
        assert t.num_rows == n and sum(t.column("reward").to_pylist()) == 3
    finally:
        if container:
            subprocess.run(["docker", "rm", "-f", container], capture_output=True)


def test_docker_keys_refused_or_in_the_command(tmp_path: Path) -> None:
    bad = write_config(tmp_path / "bad.yaml", "http://127.0.0.1:9/v1", tmp_path / "out", n=2, shards=1,
                       cluster={"type": "docker", "docker": {"privileged": True}})
    proc = run_nel("eval", "run", str(bad), "--no-progress")
    assert proc.returncode == 2 and "cluster.docker.privileged" in proc.stderr, proc.stderr
    assert len([ln for ln in proc.stderr.splitlines() if ln.strip()]) == 1

    from nel_resources.config import load_config
    from nel_resources.launchers.docker import DockerLauncher, forwarded_env
    from nel_resources.launchers.partitions import PartitionJob

    os.environ.setdefault("DOCKER_HOST", "unix:///nonexistent")  # the command is only built
    good = write_config(tmp_path / "good.yaml", "http://127.0.0.1:9/v1", tmp_path / "out", n=2, shards=2,
                        cluster={"type": "docker", "image": "nel:x", "shm_size": "1g", "mount_home": False,
                                 "container_mounts": ["/srv/a:/a:ro"], "container_env": {"SECRET_X": "s3cr3t"},
                                 "docker": {"gpus": "all", "network": "host"}})
    cluster = load_config(good).cluster
    job = PartitionJob("gsm8k", MODEL, 1, 2, str(good))
    env = forwarded_env(good, cluster)
    cmd = DockerLauncher(cluster, "nel:x", tmp_path / "out").command(job, "c1", env)
    joined = " ".join(cmd)
    assert env["SECRET_X"] == "s3cr3t" and "s3cr3t" not in joined and "-e SECRET_X" in joined
    for part in ("--shm-size 1g", "--gpus all", "--network host", "-v /srv/a:/a:ro",
                 "-e NEL_SHARD_IDX=1", "-e NEL_TOTAL_SHARDS=2", f"-v {tmp_path / 'out'}:{tmp_path / 'out'}"):
        assert part in joined, (part, joined)
