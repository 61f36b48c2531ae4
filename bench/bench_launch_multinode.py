"""Multi-node against one-node launched servers on the real test cluster with fake GPUs
(partition `multi`: its two slurmd nodes, on this one host) and the stand-ins of
tests/support/gpu_servers (vLLM over the `ray` stand-in, SGLang with --nnodes; no weights
to load, so these are the launch path's own costs).

For each server kind and node count: `sbatch` of a job (`--nodes=N --gres=gpu:4`) whose
batch step starts the server exactly as a task does (nel_resources.services.launch.make_server:
a MultiNodeService over the job's nodes for N > 1), until its head's `/health` answers, and
until the first chat completion is answered. Medians over `--rounds`.

    NEL_SLURM_DIR=/var/lib/nel-slurm-gpu NEL_SLURM_PORT=6851 NEL_SLURM_GPUS=4 bash deploy/slurm/start_slurm.sh
    SLURM_CONF=/var/lib/nel-slurm-gpu/slurm.conf python bench/bench_launch_multinode.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_launch import _poll, http_json, stand_in_env  # noqa: E402
from nel_resources.launchers.slurm import SbatchHeader, SlurmLauncher, render_script  # noqa: E402
from nel_resources.runtime.processes import free_port  # noqa: E402

SIZES = {"vllm": {"tensor_parallel_size": 4}, "sglang": {"tensor_parallel_size": 4}}


def serve_in_job(service_json: str, log_dir: str) -> None:
    """Inside the job: start the server as a task does, then keep it up until scancel."""
    from nel_resources.config import ServiceConfig
    from nel_resources.config.deployment import ClusterConfig
    from nel_resources.services.launch import make_server

    svc = ServiceConfig.model_validate_json(service_json)
    cluster = ClusterConfig(type="slurm", node_pools={"p": {"partition": "multi"}})
    server = make_server("bench", svc, Path(log_dir), cluster=cluster)
    try:
        server.start()
        while True:
            time.sleep(60)
    finally:
        server.stop()


def submit_to_healthy(d: Path, typ: str, nodes: int) -> tuple[float, float]:
    """(s to the head's /health answering, s to the first chat completion) from `sbatch`."""
    port = free_port()
    sizes = dict(SIZES[typ])
    if nodes > 1 and typ == "vllm":
        sizes["pipeline_parallel_size"] = nodes  # TP in a node, PP across them
    elif nodes > 1:
        sizes["tensor_parallel_size"] *= nodes
    svc = {"type": typ, "model_path": "org/model", "model": "m", "port": port, "num_nodes": nodes,
           "startup_timeout": 300, **sizes}
    body = " ".join(shlex.quote(a) for a in [sys.executable, str(Path(__file__).resolve()), "--serve",
                                             json.dumps(svc), str(d / "logs")])
    script = d / f"serve-{port}.sbatch"
    script.write_text(render_script(SbatchHeader("nel-bench-multinode", str(d / "serve-%j.log"),
                                                 walltime="00:05:00", partition="multi", nodes=nodes,
                                                 gres="gpu:4"), f"exec {body}"))
    sl = SlurmLauncher()
    t0 = time.monotonic()
    job = sl.submit(script)
    try:
        healthy = _poll(f"http://127.0.0.1:{port}/health", t0 + 300)
        status, _, _ = http_json("POST", f"http://127.0.0.1:{port}/v1/chat/completions",
                                 {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        first = time.monotonic()
        assert status == 200, status
    finally:
        sl.cancel([job])
        sl.wait_gone([job])
    return healthy - t0, first - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--serve", nargs=2, metavar=("SERVICE_JSON", "LOG_DIR"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        serve_in_job(*a.serve)
        return
    if "SLURM_CONF" not in os.environ:
        raise SystemExit("export SLURM_CONF of the fake-GPU cluster (see this script's docstring)")
    result: dict[str, object] = {"rounds": a.rounds}
    with tempfile.TemporaryDirectory(prefix="nel-bench-multinode-") as tmp:
        d = Path(tmp)
        os.environ.update(stand_in_env(d / "record.jsonl"))  # the jobs inherit PATH (stand-ins)
        for typ in SIZES:
            runs: dict[int, list[tuple[float, float]]] = {1: [], 2: []}
            for _ in range(a.rounds):  # alternate, so machine load hits both alike
                for nodes in (1, 2):
                    runs[nodes].append(submit_to_healthy(d, typ, nodes))
            for nodes, figs in runs.items():
                result[f"{typ}_{nodes}node_submit_to_healthy_s"] = round(statistics.median(f[0] for f in figs), 2)
                result[f"{typ}_{nodes}node_submit_to_first_answer_s"] = round(
                    statistics.median(f[1] for f in figs), 2)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
