"""Harbor tasks in `slurm` and `apptainer` sandboxes, end to end: `nel eval run` on a Harbor
task set (the real layout, each task naming its image) with `tool_calling` + `sandbox_tools:
true`, driven by the scripted reference server, gives the per-task rewards the same tasks get
in nel's `docker` sandbox.

- `slurm`, on the real test SLURM cluster: each task's steps run in its own image through
  Pyxis (the test-only stand-in, tests/support/pyxis, running each step in the image's
  exported root filesystem with the /tests and /logs mounts); every step ran in a sandbox
  allocation; nothing is left (no job, no process, no workdir).
- `apptainer` (the test-only stand-in, tests/support/apptainer: Debian has no Apptainer):
  each task's image became a SIF in `sif_cache_dir` once, and every command ran contained
  (`--containall --cleanenv --net --network none`) in it.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nel_resources.reference_server import start_reference_server
from tests.nel_assets.engine.solvers.scripts import call
from tests.support.apptainer import apptainer_env
from tests.support.cli import run_nel, summary_json
from tests.support.docker_engine import BASE_IMAGE, start_docker_engine
from tests.support.harbor_tasks import write_task_set
from tests.support.pyxis import pyxis_env
from tests.support.slurm_cluster import start_slurm_cluster

pytestmark = pytest.mark.slurm

TASKS: dict[str, dict[str, Any]] = {
    "a-greet": {"instruction": "Task greet: write the word hello into /app/greeting.txt.",
                "file": "greeting.txt", "expected": "hello\n"},
    "b-answer": {"instruction": "Task answer: write the number 42 into /app/answer.txt.",
                 "file": "answer.txt", "expected": "42\n"},
}
SCRIPT: list[dict[str, Any]] = [
    {"match": "Task greet", "turns": [  # does the task in the image's shell
        {"tool_calls": [call("bash", command="echo hello > greeting.txt && cat greeting.txt")]},
        {"content": "Wrote {last_tool}"}]},
    {"match": "Task answer", "turns": [  # does it wrong, through a file move
        {"tool_calls": [call("file_write", path="/app/answer.txt", content="41\n")]},
        {"content": "Done."}]},
]


@pytest.fixture(scope="module")
def env() -> Iterator[dict[str, str]]:
    conf = start_slurm_cluster()
    yield {"DOCKER_HOST": start_docker_engine(), "SLURM_CONF": conf}


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    proc, base = start_reference_server(tool_script=SCRIPT)
    try:
        yield base
    finally:
        proc.stop()


def _run(url: str, tmp: Path, tasks: Path, sandbox: dict[str, Any],
         env: dict[str, str]) -> dict[str, float]:
    cfg = {
        "services": {"ref": {"type": "api", "url": f"{url}/chat/completions",
                             "protocol": "chat_completions", "model": "ref", "max_concurrent": 2}},
        "sandboxes": {"box": sandbox},  # no image: each task brings its own
        "benchmarks": [{"name": "terminal-bench-v1", "sandbox": "box",
                        "params": {"tasks_dir": str(tasks)},
                        "solver": {"type": "tool_calling", "service": "ref", "sandbox_tools": True,
                                   "max_turns": 4, "tool_timeout": 120}}],
        "output": {"dir": str(tmp / "out")},
    }
    (tmp / "nel.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    s = summary_json(run_nel("eval", "run", str(tmp / "nel.yaml"), "--json", "--no-progress",
                             env=env))
    (res,) = s["results"]
    assert res["n_items"] == 2 and res["failed"] == 0, res
    from nel_resources.storage.store import ResultStore

    rows = ResultStore(tmp / "out").read_shards("terminal-bench-v1", "ref").to_pylist()
    for r in rows:
        d = json.loads(r["details"])
        assert d["method"] == "harbor" and d["reward_source"] == "reward_file", d
    return {json.loads(r["metadata"])["task_id"]: r["reward"] for r in rows}


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_task_set(tmp_path_factory.mktemp("harbor") / "tasks", TASKS, BASE_IMAGE,
                          agent_timeout=120.0)


@pytest.fixture(scope="module")
def in_docker(tmp_path_factory: pytest.TempPathFactory, url: str, tasks: Path,
              env: dict[str, str]) -> dict[str, float]:
    """The rewards of the tasks in nel's docker sandbox (what the others must give)."""
    rewards = _run(url, tmp_path_factory.mktemp("docker"), tasks,
                   {"type": "docker", "concurrency": 2}, env)
    assert rewards == {"a-greet": 1.0, "b-answer": 0.0}
    return rewards


def test_harbor_tasks_in_a_slurm_sandbox_score_as_in_docker(
        tmp_path: Path, url: str, tasks: Path, in_docker: dict[str, float],
        env: dict[str, str]) -> None:
    record = tmp_path / "pyxis.jsonl"
    (tmp_path / "slurm").mkdir()
    in_slurm = _run(url, tmp_path / "slurm", tasks,
                    {"type": "slurm", "concurrency": 2, "cpus": 1, "memory": "1g", "timeout": 600},
                    pyxis_env(record, {**os.environ, **env}, in_image=True))
    assert in_slurm == in_docker  # the same rewards, the task's own tests deciding

    steps = [json.loads(line) for line in record.read_text().splitlines()]
    # the agent's commands and the verifier's ran as steps of sandbox allocations, in the
    # task's image, with the workdir and the verifier's scratch directories mounted
    job_of = [next(a.split("=", 1)[1] for a in s["command"] if a.startswith("--jobid="))
              for s in steps]
    assert {s["options"]["--container-image"] for s in steps} == {BASE_IMAGE}
    mounts = [s["options"]["--container-mounts"].split(",") for s in steps]
    assert all({"/app", "/tests", "/logs"} <= {m.split(":")[1] for m in ms} for ms in mounts)
    assert any("test.sh" in " ".join(s["command"]) for s in steps)
    jobs = set(job_of)
    names = {s["options"]["--container-name"] for s in steps}
    assert len(jobs) >= 2 and len(names) == len(jobs)  # one allocation (and container) per sandbox

    # nothing is left: no allocation, no process, no workdir
    queued = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True,
                            check=True, env={**os.environ, **env}).stdout.split()
    assert not jobs & set(queued)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert not [n for n in names if n in ps]
    from tempfile import gettempdir

    assert not [n for n in names if list(Path(gettempdir()).glob(f"{n}-*"))]


def test_harbor_tasks_in_an_apptainer_sandbox_score_as_in_docker(
        tmp_path: Path, url: str, tasks: Path, in_docker: dict[str, float],
        env: dict[str, str]) -> None:
    record = tmp_path / "apptainer.jsonl"
    sifs = tmp_path / "sif"
    (tmp_path / "run").mkdir()
    rewards = _run(url, tmp_path / "run", tasks,
                   {"type": "apptainer", "concurrency": 2, "sif_cache_dir": str(sifs)},
                   apptainer_env(record, {**os.environ, **env}))
    assert rewards == in_docker
    # the task image became one SIF, named as NeMo Evaluator names it, built once
    assert [p.name for p in sifs.iterdir()] == ["localdebian__bookworm-py.sif"]
    execs = [json.loads(line) for line in record.read_text().splitlines()]
    assert execs and {e["image"] for e in execs} == {str(sifs / "localdebian__bookworm-py.sif")}
    for e in execs:
        assert {"--containall", "--cleanenv", "--net"} <= e["options"].keys()
        assert e["options"]["--network"] == ["none"]
        assert {"/app", "/tests", "/logs"} <= {b.split(":")[1] for b in e["options"]["--bind"]}
    assert any("/tests/test.sh" in " ".join(e["command"]) for e in execs)
