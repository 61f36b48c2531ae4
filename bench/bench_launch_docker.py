"""What running a launched model server as a container costs (`cluster.type: docker`), on the
real Docker engine with the vLLM stand-in of tests/support/gpu_servers in an image built FROM
nel's (no weights to load: the launch path's own costs, not vLLM's).

Per round, alternating which goes first, in this process:
- container: nel's `ContainerService` (`docker run` with the GPU device request, /health
  wait, log saved, container removed), start to healthy, to the first answered chat
  completion, and the stop;
- process: nel's `LaunchedService` starting the same stand-in as a local process.
Prints medians and the container's extra seconds per launch (one launch per run).

    eval "$(NEL_DOCKER_PY_BASE=1 NEL_DOCKER_GPU_HOOK=tests/support/gpu_servers/hook/nvidia-container-runtime-hook \
        bash deploy/docker/start_engine.sh)"
    python bench/bench_launch_docker.py --rounds 5
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nel_resources.config import ServiceConfig  # noqa: E402
from nel_resources.launchers.nel_image import build_nel_image  # noqa: E402
from nel_resources.services.container_server import ContainerService  # noqa: E402
from nel_resources.services.launch import LaunchedService  # noqa: E402

STAND_INS = REPO / "tests" / "support" / "gpu_servers"
TAG = "nel-gpu-standins:bench"


def standin_image(base: str) -> str:
    """nel's image with the stand-ins where their REPO path resolves (/opt/nel/src)."""
    dest = "/opt/nel/src/tests/support/gpu_servers"
    dockerfile = (f"FROM {base}\nCOPY . {dest}\nRUN ln -sf {dest}/bin/vllm /usr/local/bin/vllm\n"
                  f"ENV NEL_STANDIN_PYTHON=/opt/nel/venv/bin/python\n")
    subprocess.run(["docker", "build", "-q", "-t", TAG, "-f", "-", str(STAND_INS)], input=dockerfile,
                   text=True, check=True, capture_output=True)
    return TAG


def one(server: LaunchedService | ContainerService) -> dict[str, float]:
    """Start to healthy, to the first answer, and the stop, in seconds."""
    t0 = time.perf_counter()
    url = server.start()
    healthy = time.perf_counter() - t0
    r = httpx.post(f"{url}/chat/completions", json={"model": "org/m", "messages": [
        {"role": "user", "content": "hi"}]}, timeout=30)
    r.raise_for_status()
    first = time.perf_counter() - t0
    t1 = time.perf_counter()
    server.stop()
    return {"healthy_s": healthy, "first_answer_s": first, "stop_s": time.perf_counter() - t1}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    image = standin_image(build_nel_image("nel:local"))
    env = {"NEL_STANDIN_HEALTH_DELAY": "0"}
    os.environ["PATH"] = f"{STAND_INS / 'bin'}{os.pathsep}{os.environ['PATH']}"
    os.environ["NEL_STANDIN_PYTHON"] = sys.executable
    os.environ["CUDA_VISIBLE_DEVICES"] = "0,1"  # the local process's GPUs (the stand-in checks)
    svc = ServiceConfig(type="vllm", model="org/m", tensor_parallel_size=2, startup_timeout=120,
                        env=env)
    runs: dict[str, list[dict[str, float]]] = {"container": [], "process": []}
    with tempfile.TemporaryDirectory() as logs:
        for i in range(a.rounds):
            order = ["container", "process"] if i % 2 == 0 else ["process", "container"]
            for kind in order:
                server = (ContainerService("model", svc.model_copy(update={"image": image}), Path(logs))
                          if kind == "container" else LaunchedService("model", svc, Path(logs)))
                runs[kind].append(one(server))
    med = {k: {m: round(statistics.median(r[m] for r in v), 3) for m in v[0]} for k, v in runs.items()}
    med["container_extra_s_per_launch"] = round(
        med["container"]["first_answer_s"] + med["container"]["stop_s"]
        - med["process"]["first_answer_s"] - med["process"]["stop_s"], 3)
    print(json.dumps({"rounds": a.rounds, **med}, indent=2))


if __name__ == "__main__":
    main()
