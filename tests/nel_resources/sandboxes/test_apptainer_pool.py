"""An `apptainer` sandbox on a SLURM node pool, on the real test SLURM cluster: a config as
NeMo Evaluator 0.3.0's example 16a writes it (a Harbor benchmark whose agent works in the
sandbox, its sandbox `type: apptainer` on node pool `sandbox_cpu` with a `sif_cache_dir`) is accepted; each task's image
becomes a SIF in that cache (`apptainer build ... docker-daemon://IMAGE`, once), every
`apptainer exec` runs as an srun step of an allocation on the pool's partition, the task's own
tests/test.sh decides the reward, and nothing is left (no job, no workdir).

Apptainer is not packaged for Debian bookworm: the test-only stand-in (tests/support/apptainer)
takes the real command lines and runs the program in the image's exported root filesystem
under bubblewrap, recording each exec's flags and the SLURM job and step it ran in."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nel_resources.checks import check_supported
from nel_resources.config import load_config
from nel_resources.sandboxes.apptainer_pool import PooledApptainerFactory
from tests.support.apptainer import SIF_MAGIC, apptainer_env
from tests.support.docker_engine import BASE_IMAGE, start_docker_engine
from tests.support.harbor_tasks import write_task_set
from tests.support.slurm_cluster import start_slurm_cluster

pytestmark = pytest.mark.slurm

TASKS = {
    "a-greet": {"instruction": "write hello into /app/greeting.txt", "file": "greeting.txt",
                "expected": "hello\n"},
    "b-answer": {"instruction": "write 42 into /app/answer.txt", "file": "answer.txt",
                 "expected": "42\n"},
}
#: What the agent does in each task's sandbox (the second one wrongly).
AGENT = {"a-greet": "echo hello > greeting.txt", "b-answer": "echo 41 > answer.txt"}


@pytest.fixture(scope="module")
def record(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("apptainer") / "exec.jsonl"
    mp = pytest.MonkeyPatch()
    mp.setenv("SLURM_CONF", start_slurm_cluster())
    mp.setenv("DOCKER_HOST", start_docker_engine())
    for k, v in apptainer_env(path).items():
        mp.setenv(k, v)
    yield path
    mp.undo()


def _config(tmp: Path, tasks: Path) -> Path:
    path = tmp / "c.yaml"
    path.write_text(f"""\
services:
  model: {{type: api, url: 'http://127.0.0.1:9/v1/chat/completions', model: m}}
sandboxes:
  swebench:
    type: apptainer
    node_pool: sandbox_cpu
    sif_cache_dir: {tmp / 'sif'}
    concurrency: 8
    slots_per_node: 2
    cpus: 1
    memory: 512m
    timeout: 600.0
benchmarks:
- name: terminal-bench-v1
  params: {{tasks_dir: {tasks}}}
  solver: {{type: tool_calling, service: model, sandbox_tools: true}}
  sandbox: swebench
cluster:
  type: slurm
  node_pools:
    sandbox_cpu: {{partition: het, nodes: 1}}
""")
    return path


def _squeue(job: str) -> str:
    return subprocess.run(["squeue", "-h", "-j", job, "-o", "%P %N %T"], capture_output=True,
                          text=True).stdout.strip()


def test_harbor_tasks_run_in_apptainer_steps_of_allocations_on_the_pool(
        tmp_path: Path, record: Path) -> None:
    from benchmarks import get_benchmark
    from nel_assets.engine.evaluation.sandboxing import SandboxPool
    from nel_resources.resources import SandboxResource
    from nel_resources.specs import resolve

    tasks = write_task_set(tmp_path / "tasks", TASKS, BASE_IMAGE, agent_timeout=60.0)
    cfg = load_config(_config(tmp_path, tasks))
    check_supported(cfg)  # accepted: the apptainer sandbox is placed on pool sandbox_cpu
    bench = resolve(cfg).benchmarks[0]
    assert bench.sandbox is not None and bench.sandbox_pool is not None
    env = get_benchmark("terminal-bench-v1", tasks_dir=str(tasks))
    resource = SandboxResource.from_config(bench.name, bench.sandbox, bench.sandbox_pool)
    placed: dict[str, str] = {}

    async def one(pool: SandboxPool, idx: int) -> tuple[str, float]:
        seed = await env.seed(idx)
        task = seed.metadata["task_id"]
        async with pool.sample(seed) as s:
            sb = await s.solve_sandbox()
            done = await sb.exec(AGENT[task], timeout_sec=60)
            assert done.ok, done
            job = str(sb.job_id)  # type: ignore[attr-defined]
            placed[job] = _squeue(job)
            # verified in the sandbox the agent worked in, as the eval loop does
            res = await env.verify("", "", sandbox=sb, **seed.metadata)
        return task, res.reward

    async def go() -> dict[str, float]:
        async with resource.open() as factory:
            assert isinstance(factory, PooledApptainerFactory)
            assert factory.concurrency == 2  # 1 node x 2 slots, below concurrency 8
            pool = SandboxPool(factory, stateful=bench.sandbox.stateful)
            return dict(await asyncio.gather(*(one(pool, i) for i in range(len(env)))))

    rewards = asyncio.run(go())
    assert rewards == {"a-greet": 1.0, "b-answer": 0.0}  # the task's own tests decided
    # each sandbox was an allocation on the pool's partition (and its node), running
    assert {p.rsplit(" ", 1)[0] for p in placed.values()} == {"het vm-het"}
    assert all(p.endswith("RUNNING") for p in placed.values())

    # the image became one SIF in sif_cache_dir, named as NeMo Evaluator names it
    sif = tmp_path / "sif" / "localdebian__bookworm-py.sif"
    assert sif.read_bytes().startswith(SIF_MAGIC)
    assert json.loads(sif.read_bytes()[len(SIF_MAGIC):])["image"] == BASE_IMAGE
    execs = [json.loads(line) for line in record.read_text().splitlines()]
    # every exec was an srun step of an allocation (the job's own steps, not the batch)
    assert execs and all(e["slurm_job_id"] and e["slurm_step_id"] not in (None, "batch")
                         for e in execs)
    assert {e["image"] for e in execs} == {str(sif)}
    for e in execs:
        o = e["options"]
        assert {"--containall", "--cleanenv", "--net", "--writable-tmpfs"} <= o.keys()
        assert o["--network"] == ["none"] and "--memory" in o and o["--cpus"] == ["1"]
        assert {b.split(":")[1] for b in o["--bind"]} >= {"/app", "/tests", "/logs"}
        # the workdir and the verifier's scratch directories are on the filesystem the nodes
        # share with nel (sif_cache_dir), not in this machine's /tmp
        assert all(b.startswith(f"{tmp_path / 'sif'}/") for b in o["--bind"]), o["--bind"]
    assert any("/tests/test.sh" in " ".join(e["command"]) for e in execs)
    jobs = {e["slurm_job_id"] for e in execs}
    assert jobs == placed.keys() and len(jobs) == 2  # one allocation per task's sandbox

    # nothing is left: the allocations are gone, the workdirs (in sif_cache_dir) too
    assert not [j for j in jobs if _squeue(j)]
    assert [p.name for p in (tmp_path / "sif").iterdir()] == [sif.name]
