"""deploy/docker-compose.yaml brought up for real, as its header says, on the project's Docker
engine with Debian's docker-compose v1: the images built here (nel:local, nel-postgres:local),
$NEL_WORK prepared (nel.yaml, dagster_home/dagster.yaml), then `up -d postgres webserver
daemon serve` on free ports of 127.0.0.1 and a reference server as the model.

- a run launched through the webserver's GraphQL API is queued, started by the daemon in its
  own container of nel:local (dagster-docker's DockerRunLauncher), and its results land in
  the shared store ($NEL_WORK/out, read with DuckDB);
- `nel serve` answers /health;
- the `eval` service runs the config to the end;
- the `sharded` profile's eval-shard, once per shard, writes each shard under
  /work/out/shard_<i>, and `nel eval merge` (in the eval service) merges them complete.

Everything the test creates is removed at the end and checked gone: `docker-compose down` of
its own project, its containers by name, and the Dagster runs' containers (the UI-launched one
and those the daemon launched) by their dagster/run_id label and the test's mount.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.datasets import load_file
from nel_resources.runtime.processes import free_port
from nel_resources.storage.views import connect
from tests.support.cluster_runs import MODEL
from tests.support.dagster_ui import (
    REPO_SELECTOR,
    finished_run,
    graphql,
    launch_shard_run,
)
from tests.support.docker_engine import (
    NEL_IMAGE_GROUP,
    POSTGRES_TAG,
    build_postgres_image,
    docker_client,
)
from tests.support.gsm8k import answers_for
from tests.support.realcomponents import REPO_ROOT, require_real_component
from tests.support.reference import http_json
from tests.support.waiting import PROCESS_START_S, RUN_FINISH_S, wait_for

pytestmark = [pytest.mark.docker, pytest.mark.xdist_group(NEL_IMAGE_GROUP)]
COMPOSE = REPO_ROOT / "deploy" / "docker-compose.yaml"
N, SHARDS = 6, 2
RIGHT = {0, 1, 2, 4}  # the items the reference server answers right (shard 0: 0-2, shard 1: 3-5)
COMPOSE_S = 600  # a ceiling for one docker-compose command (up waits for Postgres' healthcheck)


@dataclass
class Stack:
    """The running compose project: how to call docker-compose on it, and where it lives."""

    project: str
    env: dict[str, str]
    work: Path
    base_url: str  # the webserver
    serve_port: int

    def compose(self, *args: str, env: dict[str, str] | None = None,
                timeout: float = COMPOSE_S) -> subprocess.CompletedProcess[str]:
        """`docker-compose -p <project> -f deploy/docker-compose.yaml ARGS` (output captured),
        in the stack's environment or `env`."""
        exe = shutil.which("docker-compose")
        assert exe is not None
        return subprocess.run([exe, "-p", self.project, "-f", str(COMPOSE), *args], capture_output=True,
                              text=True, env=env or self.env, cwd=REPO_ROOT, timeout=timeout)


def docker(*args: str) -> subprocess.CompletedProcess[str]:
    """The docker CLI on the test's engine (DOCKER_HOST from the `docker_host` fixture)."""
    return subprocess.run([docker_client(), *args], capture_output=True, text=True, timeout=300)


def project_containers(project: str) -> list[str]:
    """Names of every container (running or not) of compose project `project`."""
    proc = docker("ps", "-a", "--filter", f"label=com.docker.compose.project={project}",
                  "--format", "{{.Names}}")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def stack_run_containers(work: Path) -> list[str]:
    """Ids of the run containers DockerRunLauncher started for the stack on `work`: labelled
    with a Dagster run and mounting `work` (a path of this test's only)."""
    proc = docker("ps", "-aq", "--no-trunc", "--filter", "label=dagster/run_id")
    assert proc.returncode == 0, proc.stderr
    ids = proc.stdout.split()
    if not ids:
        return []
    # A container removed meanwhile (another test's) is an error on stderr; the others are
    # still listed on stdout.
    found = json.loads(docker("inspect", *ids).stdout or "[]")
    return [c["Id"] for c in found if f"{work}:/work" in (c["HostConfig"].get("Binds") or [])]


def prepare_work(work: Path, url: str, data_dir: Path) -> None:
    """$NEL_WORK as the compose file's header says: nel.yaml with the shared output and
    instance, and dagster_home/dagster.yaml = deploy/docker/dagster.yaml with its volume paths
    written for this host."""
    (work / "dagster_home").mkdir(parents=True)
    (work / "nel.yaml").write_text(yaml.safe_dump({
        "services": {"ref": {"type": "api", "url": url, "model": MODEL}},
        # shuffle_seed null: the first N items, as the answers are written for them (the
        # containers do not get the suite's NEL_SHUFFLE_SEED)
        "benchmarks": [{"name": "gsm8k", "max_problems": N, "shards": SHARDS, "shuffle_seed": None}],
        "output": {"dir": "/work/out", "dagster_home": "/work/dagster_home"},
    }))
    instance = yaml.safe_load((REPO_ROOT / "deploy" / "docker" / "dagster.yaml").read_text())
    kwargs = instance["run_launcher"]["config"]["container_kwargs"]
    assert len(kwargs["volumes"]) == 2, kwargs  # the two paths the header says to write
    kwargs["volumes"] = [f"{work}:/work", f"{data_dir}:{data_dir}:ro"]
    (work / "dagster_home" / "dagster.yaml").write_text(yaml.safe_dump(instance))


_READY = """
query Ready($keys: [AssetKeyInput!]) { assetNodes(assetKeys: $keys) { assetKey { path } } }
"""


def _webserver_ready(base: str) -> bool:
    """True once the webserver answers GraphQL with the code location loaded."""
    try:
        return bool(graphql(base, _READY, {"keys": [{"path": ["gsm8k", "shard_results"]}]})["assetNodes"])
    except (OSError, AssertionError):
        return False


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, docker_host: str, nel_image: str,
          data_dir: Path) -> Iterator[Stack]:
    """`docker-compose up -d postgres webserver daemon serve` of a project of its own, with a
    reference server as the model; down, and checked gone, at the end."""
    from nel_resources.reference_server import start_reference_server

    if shutil.which("docker-compose") is None:
        require_real_component("docker-compose is not installed (deploy/install_system_deps.sh)")
    build_postgres_image(POSTGRES_TAG)
    rows = load_file(data_dir / "gsm8k" / "test.jsonl")[:N]
    work = tmp_path_factory.mktemp("nel-work")
    assert docker_host.startswith("unix://"), docker_host
    model, url = start_reference_server(answers=answers_for(rows, RIGHT))
    try:
        prepare_work(work, url, data_dir)
        ui_port, pg_port, serve_port = free_port(), free_port(), free_port()
        env = {**os.environ, "DOCKER_HOST": docker_host, "NEL_WORK": str(work), "NEL_DATA_DIR": str(data_dir),
               "NEL_DOCKER_SOCK": docker_host.removeprefix("unix://"), "NEL_IMAGE": nel_image,
               "NEL_POSTGRES_IMAGE": POSTGRES_TAG, "NEL_UI_PORT": str(ui_port), "NEL_PG_PORT": str(pg_port),
               "NEL_SERVE_PORT": str(serve_port), "NEL_SERVE_BENCH": "gsm8k"}
        s = Stack(f"nelup{uuid.uuid4().hex[:10]}", env, work, f"http://127.0.0.1:{ui_port}", serve_port)
        try:
            up = s.compose("up", "-d", "postgres", "webserver", "daemon", "serve")
            assert up.returncode == 0, up.stderr[-4000:]
            try:
                wait_for(lambda: _webserver_ready(s.base_url), timeout=PROCESS_START_S, interval=1.0,
                         what="the compose webserver's GraphQL with the code location loaded")
            except AssertionError as exc:
                logs = s.compose("logs", "--no-color", "--tail", "40", "postgres", "webserver", timeout=120)
                raise AssertionError(f"{exc}\n{logs.stdout[-6000:]}") from None
            yield s
        finally:
            _down(s)
    finally:
        model.stop()


def _down(s: Stack) -> None:
    """`docker-compose down` of the stack, then every container it made removed by name (the
    project's, and the run containers on its work directory), and checked gone."""
    logs = s.compose("logs", "--no-color", "--tail", "60", timeout=120).stdout
    down = s.compose("down", "--volumes", "--remove-orphans")
    left = project_containers(s.project)
    for name in left:  # only this project's containers, by name
        docker("rm", "-f", "-v", name)
    # The runs' containers: DockerRunLauncher does not remove them, and the daemon also
    # launches runs of its own (automation materializes the report after new results).
    for cid in stack_run_containers(s.work):
        docker("rm", "-f", "-v", cid)
    assert down.returncode == 0, down.stderr[-2000:]
    assert left == [], f"docker-compose down left {left}; logs:\n{logs[-4000:]}"
    assert stack_run_containers(s.work) == []


_ADD_PARTITION = """
mutation Add($repo: RepositorySelector!, $name: String!, $key: String!) {
  addDynamicPartition(repositorySelector: $repo, partitionsDefName: $name, partitionKey: $key) {
    __typename
    ... on AddDynamicPartitionSuccess { partitionKey }
    ... on PythonError { message }
    ... on UnauthorizedError { message }
    ... on DuplicateDynamicPartitionError { partitionsDefName }
  }
}
"""


def _results(out: Path) -> list[tuple[int, float]]:
    """(problem_idx, reward) of the stored gsm8k results under `out`, read with DuckDB."""
    con = connect(out)
    try:
        return con.execute("SELECT problem_idx, reward FROM results WHERE model = ? ORDER BY problem_idx",
                           [MODEL]).fetchall()
    finally:
        con.close()


def _expected(indices: range) -> list[tuple[int, float]]:
    return [(i, 1.0 if i in RIGHT else 0.0) for i in indices]


def test_run_launched_through_the_webserver_executes_in_its_own_container(stack: Stack, nel_image: str) -> None:
    added = graphql(stack.base_url, _ADD_PARTITION, {"repo": REPO_SELECTOR, "name": "model", "key": MODEL})
    # the instance (its own Postgres) is new: the model partition is not there yet
    assert added["addDynamicPartition"]["__typename"] == "AddDynamicPartitionSuccess", added
    run_id = launch_shard_run(stack.base_url, MODEL)
    try:
        # QueuedRunCoordinator: the daemon (its own container) dequeues and launches the run
        run = wait_for(lambda: finished_run(stack.base_url, run_id), timeout=RUN_FINISH_S, what=f"run {run_id} to finish", interval=1.0)
        tags = {t["key"]: t["value"] for t in run["tags"]}
        container = tags.get("docker/container_id", "")
        assert container, tags  # DockerRunLauncher started the run's container
        logs = docker("logs", container)
        assert run["status"] == "SUCCESS", logs.stdout[-3000:] + logs.stderr[-3000:]
        (info,) = json.loads(docker("inspect", container).stdout)
        # the one container labelled with the run, of nel's image, exited 0, and not one of
        # the compose project's containers
        assert [info["Id"]] == _run_containers(run_id), info["Id"]
        assert info["Config"]["Image"] == nel_image and info["State"]["ExitCode"] == 0, info["State"]
        assert "com.docker.compose.project" not in (info["Config"]["Labels"] or {}), info["Config"]["Labels"]
        assert info["Name"].lstrip("/") not in project_containers(stack.project)
        # the results are in the shared store, written by that container
        assert _results(stack.work / "out") == _expected(range(0, 3))
    finally:
        for cid in _run_containers(run_id):  # also when the run never finished
            docker("rm", "-f", cid)


def _run_containers(run_id: str) -> list[str]:
    """Full ids of the containers DockerRunLauncher started for `run_id` (its label)."""
    proc = docker("ps", "-aq", "--no-trunc", "--filter", f"label=dagster/run_id={run_id}")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_nel_serve_answers_health(stack: Stack) -> None:
    def healthy() -> Any:
        try:
            status, _, body = http_json("GET", f"http://127.0.0.1:{stack.serve_port}/health", timeout=10)
        except OSError:
            return None
        return body if status == 200 else None

    body = wait_for(healthy, timeout=PROCESS_START_S, interval=1.0, what="nel serve's /health")
    assert body, body


def test_eval_service(stack: Stack) -> None:
    run = stack.compose("run", "--rm", "-T", "eval")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert _results(stack.work / "out") == _expected(range(N))


def test_sharded_profile_then_merge(stack: Stack) -> None:
    """The header's loop (`NEL_SHARD_IDX=$i ... --profile sharded run -d eval-shard`, both
    shards at once), then its `run --rm eval nel eval merge` of the shard directories."""
    names = []
    for i in range(SHARDS):
        env = {**stack.env, "NEL_SHARD_IDX": str(i), "NEL_TOTAL_SHARDS": str(SHARDS)}
        started = stack.compose("--profile", "sharded", "run", "-d", "eval-shard", env=env)
        assert started.returncode == 0, started.stderr[-3000:]
        (name,) = started.stdout.split()  # `run -d` prints the one-off container's name
        names.append(name)
    assert set(names) <= set(project_containers(stack.project))
    for i, name in enumerate(names):
        code = docker("wait", name)
        logs = docker("logs", name)
        assert code.stdout.strip() == "0", logs.stdout[-3000:] + logs.stderr[-3000:]
        # shard i of 2 only, in its own output directory
        assert _results(stack.work / "out" / f"shard_{i}") == _expected(range(3 * i, 3 * i + 3))
        docker("rm", "-f", name)

    merge = stack.compose("run", "--rm", "-T", "eval", "nel", "eval", "merge", "/work/out/shard_0",
                          "/work/out/shard_1", "-o", "/work/merged", "--json")
    assert merge.returncode == 0, merge.stdout[-3000:] + merge.stderr[-3000:]
    rep = json.loads(merge.stdout[merge.stdout.index("{"):])
    assert rep["complete"] and rep["merged"] and rep["shards"] == {f"gsm8k/{MODEL}": [0, 1]}, rep
    (bundle,) = rep["bundles"]
    assert bundle["n_items"] == N and bundle["score"] == pytest.approx(len(RIGHT) / N), bundle
    assert _results(stack.work / "merged") == _expected(range(N))
