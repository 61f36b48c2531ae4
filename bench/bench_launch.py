"""What launching the model server inside the SLURM job costs, on the real test cluster with
fake GPUs (deploy/slurm/start_slurm.sh with NEL_SLURM_GPUS=4) and the vLLM stand-in of
tests/support/gpu_servers (it parses `vllm serve`'s flags, then serves nel's reference
server; no weights to load, so these are the launch path's own costs, not vLLM's).

1. Submit to healthy: `sbatch` of a job (`--gres=gpu:4`) whose step runs `vllm serve ...`,
   until its `/health` answers; and until the first chat completion is answered. Medians
   over `--rounds`.
2. In-task launch cost: what each task adds to its shard with a launched server, nel's own
   start (the `vllm serve` command, the /health wait) and stop of the server
   (nel_resources.services.launch.LaunchedService), measured in this process.
3. Overhead per shard: the same NeMo Evaluator example (15_slurm_gsm8k_vllm.yaml, `shards`
   N, a few problems) run by `nel eval run` on the cluster (a) with `type: vllm` (each task
   starts its own server, waits for /health, runs its shard, stops it) and (b) with
   `type: api` against one server already running; (a - b) / N.

    NEL_SLURM_DIR=/var/lib/nel-slurm-gpu NEL_SLURM_PORT=6851 NEL_SLURM_GPUS=4 bash deploy/slurm/start_slurm.sh
    SLURM_CONF=/var/lib/nel-slurm-gpu/slurm.conf NEL_DATA_DIR=../shared/datasets \
        python bench/bench_launch.py --rounds 3 --shards 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nel_resources.launchers.slurm import SbatchHeader, SlurmLauncher, render_script  # noqa: E402
from nel_resources.reference_server import start_reference_server  # noqa: E402
from nel_resources.runtime.processes import free_port  # noqa: E402

# The stand-in servers the tests use (tests/support/gpu_servers), reached by path: bench
# imports nothing from tests.
STAND_INS = REPO / "tests" / "support" / "gpu_servers"


def stand_in_env(record: Path) -> dict[str, str]:
    """This process's environment with the stand-in `vllm` first on PATH, recording into `record`."""
    env = dict(os.environ)
    env["PATH"] = f"{STAND_INS / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{STAND_INS / 'py'}"
    env.update(NEL_STANDIN_PYTHON=sys.executable, NEL_STANDIN_RECORD=str(record),
               NEL_STANDIN_HEALTH_DELAY="0")
    return env


def http_json(method: str, url: str, body: object = None, timeout: float = 30) -> tuple[int, object, object]:
    """(status, parsed JSON body, None) of one request."""
    r = httpx.request(method, url, json=body, timeout=timeout)
    return r.status_code, (r.json() if r.content else None), None

EXAMPLE = REPO / "tests" / "fixtures" / "nemo_configs" / "examples" / "15_slurm_gsm8k_vllm.yaml"


def _poll(url: str, deadline: float) -> float:
    while time.monotonic() < deadline:
        try:
            if http_json("GET", url, timeout=2)[0] == 200:
                return time.monotonic()
        except (OSError, httpx.HTTPError):
            pass
        time.sleep(0.02)
    raise SystemExit(f"{url} did not answer in time")


def submit_to_healthy(d: Path) -> tuple[float, float]:
    """(s to /health answering, s to the first chat completion answered) from `sbatch`."""
    port = free_port()
    body = f"exec vllm serve org/model --host 127.0.0.1 --port {port} --tensor-parallel-size 4 " \
           "--served-model-name m"
    script = d / f"serve-{port}.sbatch"
    script.write_text(render_script(SbatchHeader("nel-bench-launch", str(d / "serve-%j.log"),
                                                 walltime="00:05:00", partition="debug",
                                                 gres="gpu:4"), body))
    sl = SlurmLauncher()
    t0 = time.monotonic()
    job = sl.submit(script)
    try:
        healthy = _poll(f"http://127.0.0.1:{port}/health", t0 + 300)
        status, _, _ = http_json("POST", f"http://127.0.0.1:{port}/v1/chat/completions",
                                 {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        first = time.monotonic()
        assert status == 200
    finally:
        sl.cancel([job])
        sl.wait_gone([job])
    return healthy - t0, first - t0


def in_task_launch(d: Path) -> float:
    """Seconds for LaunchedService.start() (command, /health answered) plus stop()."""
    from nel_resources.config import ServiceConfig
    from nel_resources.services.launch import LaunchedService

    svc = ServiceConfig(type="vllm", model_path="org/model", model="m", tensor_parallel_size=4,
                        env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    server = LaunchedService("bench", svc, d / "logs")
    t0 = time.monotonic()
    try:
        server.start()
    finally:
        server.stop()
    return time.monotonic() - t0


def nel_run(d: Path, shards: int, problems: int, url: str | None, env: dict[str, str]) -> float:
    """Wall time of one `nel eval run` of the example on the cluster (fresh output)."""
    cfg = yaml.safe_load(EXAMPLE.read_text())
    svc = cfg["services"]["model"]
    if url is None:
        svc.update({"port": free_port(), "startup_timeout": 300})
    else:
        cfg["services"]["model"] = {"type": "api", "url": f"{url}/chat/completions",
                                    "model": svc["model"], "node_pool": "compute"}
    cfg["benchmarks"][0]["max_problems"] = problems
    cfg["cluster"]["node_pools"]["compute"]["partition"] = "debug"
    cfg["cluster"]["shards"] = shards
    out = Path(tempfile.mkdtemp(dir=d))
    cfg["output"] = {"dir": str(out / "out")}
    path = out / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "dagster_project.cli.main", "eval", "run", str(path),
                        "--no-progress"], env=env, cwd=out, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise SystemExit(f"nel eval run failed:\n{r.stderr[-3000:]}")
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--problems", type=int, default=8)
    a = ap.parse_args()
    if "SLURM_CONF" not in os.environ:
        raise SystemExit("export SLURM_CONF of the fake-GPU cluster (see this script's docstring)")
    with tempfile.TemporaryDirectory(prefix="nel-bench-launch-") as tmp:
        d = Path(tmp)
        env = stand_in_env(d / "record.jsonl")
        os.environ.update(env)  # the serve jobs inherit PATH (the stand-in `vllm`) from sbatch
        figures = [submit_to_healthy(d) for _ in range(a.rounds)]
        in_task = [in_task_launch(d) for _ in range(a.rounds)]
        proc, url = start_reference_server()
        try:
            launched, running = [], []
            for _ in range(a.rounds):  # alternate, so machine load hits both alike
                launched.append(nel_run(d, a.shards, a.problems, None, env))
                running.append(nel_run(d, a.shards, a.problems, url, env))
        finally:
            proc.stop()
    med = statistics.median
    result = {
        "submit_to_healthy_s": round(med(f[0] for f in figures), 3),
        "submit_to_first_request_s": round(med(f[1] for f in figures), 3),
        "in_task_start_and_stop_s": round(med(in_task), 3),
        "nel_run_launched_server_s": round(med(launched), 2),
        "nel_run_running_server_s": round(med(running), 2),
        "overhead_per_shard_s": round((med(launched) - med(running)) / a.shards, 2),
        "rounds": a.rounds, "shards": a.shards, "problems": a.problems,
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
