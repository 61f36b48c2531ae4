"""Stand-ins for the GPU inference servers nel launches (`vllm serve`, SGLang's
`python -m sglang.launch_server`, `trtllm-serve`), for machines without GPUs or the real
packages.

Each parses its tool's real flags strictly (an unknown flag exits 2 with the tool's own
kind of message, as the real one would), refuses to start without the GPUs its parallel
sizes need (`CUDA_VISIBLE_DEVICES`, which SLURM sets from the job's GRES), records what it
was asked, waits a configurable delay ("loading weights"), then becomes nel's reference
OpenAI-compatible server (`/health`, `/v1/models`, `/v1/chat/completions`) on the port and
host it was given, serving the model under its served name.

Environment (set by the test; a SLURM job inherits it from `nel eval run`):
  NEL_STANDIN_RECORD        append one JSON line per start: tool, argv, the visible GPUs
                            (CUDA_VISIBLE_DEVICES, else a container's NVIDIA_VISIBLE_DEVICES),
                            SLURM_JOB_ID, pid
  NEL_STANDIN_HEALTH_DELAY  seconds before the server answers, or `never` (it then keeps
                            logging "loading" lines and never serves), or `never-once:FILE`
                            (the first start creates FILE with its pid and never serves;
                            later ones serve at once)
  NEL_STANDIN_ANSWERS       the reference server's `--answers` JSONL (deterministic replies)
  NEL_STANDIN_NEVER_JOIN=1  a worker rank of a multi-node server never reaches its head

Multi-node (multinode.py): SGLang's `--nnodes/--node-rank/--dist-init-addr` (rank 0 serves
once the others reached it; the others join and never serve HTTP), vLLM's
`--distributed-executor-backend ray` (the GPUs counted are the Ray cluster's at RAY_ADDRESS,
see ray_stand_in.py, `ray` on PATH).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


class _ClickStyleParser(argparse.ArgumentParser):
    """trtllm-serve is a click command: its error for a bad flag reads `Error: No such option`."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        bad = message.split(": ", 1)[-1]
        sys.stderr.write(f"Try '{self.prog} --help' for help.\n\nError: No such option: {bad}\n")
        raise SystemExit(2)


def _vllm(argv: list[str]) -> argparse.Namespace:
    if not argv or argv[0] != "serve":
        sys.stderr.write("usage: vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ...\n")
        raise SystemExit(2)
    p = argparse.ArgumentParser(prog="vllm serve", allow_abbrev=False)
    p.add_argument("model")
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    p.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    p.add_argument("--served-model-name", nargs="+", default=None)
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--gpu-memory-utilization", type=float)
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--dtype")
    p.add_argument("--seed", type=int)
    p.add_argument("--distributed-executor-backend", choices=["ray", "mp", "uni", "external_launcher"])
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--enforce-eager", action="store_true")
    ns = p.parse_args(argv[1:])
    ns.served = (ns.served_model_name or [ns.model])[0]
    ns.gpus = ns.tensor_parallel_size * ns.pipeline_parallel_size * ns.data_parallel_size
    return ns


def _sglang(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="launch_server.py", allow_abbrev=False)
    p.add_argument("--model-path", "--model", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--tp-size", "--tp", "--tensor-parallel-size", dest="tp", type=int, default=1)
    p.add_argument("--pp-size", "--pipeline-parallel-size", dest="pp", type=int, default=1)
    p.add_argument("--dp-size", "--dp", "--data-parallel-size", dest="dp", type=int, default=1)
    p.add_argument("--served-model-name")
    p.add_argument("--mem-fraction-static", type=float)
    p.add_argument("--context-length", type=int)
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--dist-init-addr")
    ns = p.parse_args(argv)
    ns.served = ns.served_model_name or ns.model_path
    ns.gpus = ns.tp * ns.pp * ns.dp // max(ns.nnodes, 1)
    return ns


def _trtllm(argv: list[str]) -> argparse.Namespace:
    p = _ClickStyleParser(prog="trtllm-serve", allow_abbrev=False)
    p.add_argument("model")
    p.add_argument("--host", default="localhost")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--backend", choices=["pytorch", "tensorrt", "trt", "_autodeploy"])
    p.add_argument("--tp_size", type=int, default=1)
    p.add_argument("--pp_size", type=int, default=1)
    p.add_argument("--ep_size", type=int)
    p.add_argument("--served_model_name")
    p.add_argument("--tokenizer")
    p.add_argument("--max_batch_size", type=int)
    p.add_argument("--max_num_tokens", type=int)
    p.add_argument("--max_seq_len", type=int)
    p.add_argument("--kv_cache_free_gpu_memory_fraction", type=float)
    p.add_argument("--trust_remote_code", action="store_true")
    ns = p.parse_args(argv)
    ns.served = ns.served_model_name or ns.model
    ns.gpus = ns.tp_size * ns.pp_size
    return ns


def _slurm_task() -> str | None:
    """`<array job>_<index>` (how nel and SLURM name an array task), else the job id."""
    a, i = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{a}_{i}" if a and i else os.environ.get("SLURM_JOB_ID")


TOOLS = {"vllm": _vllm, "sglang": _sglang, "trtllm-serve": _trtllm}


def visible_gpus() -> str | None:
    """CUDA_VISIBLE_DEVICES, else a container's NVIDIA_VISIBLE_DEVICES."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None and os.environ.get("NVIDIA_VISIBLE_DEVICES") not in (None, "", "all", "none", "void"):
        # In a container the NVIDIA runtime exposes the GPUs asked for (`docker run --gpus`)
        # and names them in NVIDIA_VISIBLE_DEVICES; CUDA sees exactly those.
        visible = os.environ["NVIDIA_VISIBLE_DEVICES"]
    return visible


def record_start(tool: str, argv: list[str]) -> None:
    """Append what `tool` was given (and where: the job, the node) to NEL_STANDIN_RECORD."""
    record = os.environ.get("NEL_STANDIN_RECORD")
    if record:
        with open(record, "a", encoding="utf-8") as f:
            f.write(json.dumps({"tool": tool, "argv": argv, "cuda_visible_devices": visible_gpus(),
                                "nvidia_visible_devices": os.environ.get("NVIDIA_VISIBLE_DEVICES"),
                                "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
                                "slurm_task": _slurm_task(),
                                "slurm_node": os.environ.get("SLURMD_NODENAME"),
                                "slurm_nodeid": os.environ.get("SLURM_NODEID"),
                                "ray_address": os.environ.get("RAY_ADDRESS"),
                                "pid": os.getpid()}) + "\n")


def _ray_gpus(ns: argparse.Namespace) -> int:
    """vLLM's Ray executor places its tensor x pipeline parallel workers on the GPUs of the
    Ray cluster at RAY_ADDRESS (every node's, not this one's)."""
    from multinode import status

    address = os.environ.get("RAY_ADDRESS", "")
    nodes = status(address) if address else None
    if nodes is None:
        print(f"ConnectionError: --distributed-executor-backend ray but no Ray cluster at "
              f"RAY_ADDRESS={address!r}", flush=True)
        raise SystemExit(1)
    print(f"INFO Ray cluster at {address}: {len(nodes)} node(s), {sum(nodes.values())} GPU(s)", flush=True)
    return sum(nodes.values())


def _multinode(tool: str, ns: argparse.Namespace) -> None:
    """SGLang's `--nnodes N --node-rank R --dist-init-addr HOST:PORT`: rank 0 waits until
    the N-1 others reached it, then serves; another rank joins and never serves HTTP."""
    from multinode import Head, join

    if tool != "sglang" or ns.nnodes <= 1:
        return
    if not ns.dist_init_addr:
        print("ValueError: --nnodes > 1 needs --dist-init-addr", flush=True)
        raise SystemExit(2)
    if ns.node_rank:
        join(ns.dist_init_addr, ns.node_rank, ns.gpus)
        raise SystemExit(0)
    port = ns.dist_init_addr.rsplit(":", 1)[1]
    Head("127.0.0.1", int(port), own_gpus=ns.gpus).start().wait_for(ns.nnodes - 1)


def main(tool: str, argv: list[str]) -> None:
    """Parse `argv` as `tool` would, record it, wait, then serve (never returns)."""
    ns = TOOLS[tool](argv)
    visible = visible_gpus()
    record_start(tool, argv)
    devices = [d for d in (visible or "").split(",") if d.strip()]
    ray = getattr(ns, "distributed_executor_backend", None) == "ray"
    have = _ray_gpus(ns) if ray else len(devices)
    print(f"INFO {tool} stand-in: model {ns.served!r}, {ns.gpus} GPU(s) needed, "
          f"CUDA_VISIBLE_DEVICES={visible}", flush=True)
    if have < ns.gpus:
        # What vLLM / SGLang / TRT-LLM do on a node without the GPUs their sizes need.
        where = "in the Ray cluster" if ray else f"visible (CUDA_VISIBLE_DEVICES={visible})"
        print(f"RuntimeError: {ns.gpus} GPUs are needed (tensor x pipeline x data parallel) "
              f"but {have} are {where}", flush=True)
        raise SystemExit(1)
    _multinode(tool, ns)
    delay = os.environ.get("NEL_STANDIN_HEALTH_DELAY", "0")
    if delay.startswith("never-once:"):
        # Only the first server started with this setting is stuck (it claims the file).
        try:
            fd = os.open(delay.split(":", 1)[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            delay = "0"
        else:
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            delay = "never"
    if delay == "never":
        while True:  # a server stuck loading its weights: it logs, never serves
            print("INFO Loading model weights ... (stuck)", flush=True)
            time.sleep(1)
    print(f"INFO Loading model weights took {float(delay):.2f} s", flush=True)
    time.sleep(float(delay))
    host = ns.host or "0.0.0.0"
    args = [sys.executable, "-P", str(REPO / "nel_resources" / "reference_server" / "__main__.py"),
            "--host", "127.0.0.1" if host in ("localhost", "0.0.0.0") else host,
            "--port", str(ns.port), "--model-name", ns.served]
    if os.environ.get("NEL_STANDIN_ANSWERS"):
        args += ["--answers", os.environ["NEL_STANDIN_ANSWERS"]]
    print(f"INFO Uvicorn running on http://{host}:{ns.port}", flush=True)
    os.execv(sys.executable, args)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
