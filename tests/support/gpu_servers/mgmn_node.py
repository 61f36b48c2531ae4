"""Stand-in for TRT-LLM's multi-node LLM-API nodes (tests only) that `trtllm-llmapi-launch`
runs: `tensorrt_llm.llmapi.mgmn_leader_node` on rank 0 (the MPI comm server the task's
`trtllm-serve` reaches at TLLM_SPAWN_PROXY_PROCESS_IPC_ADDR; `--action stop` ends it) and
`mgmn_worker_node` on every other rank (an MPI worker waiting for the leader's work).

The MPI world is the step's PMIx namespace (`srun --mpi=pmix` sets PMIX_NAMESPACE and
PMIX_RANK in every task, as mpirun does): without it a rank is an MPI singleton, so a worker
has no leader to serve and exits 1, and the leader's world is itself alone. Each rank drives
the GPU of its local rank (SLURM_LOCALID, else OMPI_COMM_WORLD_LOCAL_RANK) among
CUDA_VISIBLE_DEVICES. The leader listens on the IPC address (127.0.0.1: the test cluster's
nodes are this host) and leaves it, with its pid, in `mpi-<namespace>.leader` beside
NEL_STANDIN_RECORD, where the workers find it (the real ones meet through MPI itself); each
worker registers over loopback (multinode.join) and lives until the leader is gone.
Every rank appends what it got (ranks, world, GPU, node) to NEL_STANDIN_RECORD.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from multinode import Head, join
from stand_in import record_start, visible_gpus


def _rendezvous() -> Path | None:
    """Where the leader of this step's MPI world leaves its address (None: no world)."""
    ns = os.environ.get("PMIX_NAMESPACE")
    if not ns or os.environ.get("PMIX_RANK") is None:
        return None
    record = os.environ.get("NEL_STANDIN_RECORD")
    base = Path(record).parent if record else Path(tempfile.gettempdir())
    return base / f"mpi-{ns}.leader"


def _rank_gpu(rank: int) -> str:
    """The GPU this rank drives: its local rank's among the visible ones (exits 1 without)."""
    local = int(os.environ.get("SLURM_LOCALID", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")))
    devices = [d for d in (visible_gpus() or "").split(",") if d.strip()]
    if local >= len(devices):
        print(f"RuntimeError: rank {rank}: CUDA error: invalid device ordinal (local rank {local}, "
              f"CUDA_VISIBLE_DEVICES={visible_gpus()})", flush=True)
        raise SystemExit(1)
    return devices[local]


def _record(role: str, rank: int, gpu: str) -> None:
    record_start("trtllm-llmapi-launch", [role], extra={
        "role": role, "mpi_rank": rank, "pmix_rank": os.environ.get("PMIX_RANK"),
        "pmix_namespace": os.environ.get("PMIX_NAMESPACE"), "slurm_procid": os.environ.get("SLURM_PROCID"),
        "slurm_localid": os.environ.get("SLURM_LOCALID"), "world_size": os.environ.get("tllm_mpi_size"),  # noqa: SIM112 (the launcher's name)
        "gpu": gpu, "tllm_ipc_addr": os.environ.get("TLLM_SPAWN_PROXY_PROCESS_IPC_ADDR")})


def leader() -> None:
    """Rank 0: serve the task's connection and the workers' registrations until stopped."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # also where SIGTERM came ignored
    gpu = _rank_gpu(0)
    _record("leader", 0, gpu)
    host, port = os.environ["TLLM_SPAWN_PROXY_PROCESS_IPC_ADDR"].removeprefix("tcp://").rsplit(":", 1)
    Head(host, int(port), own_gpus=1).start()
    where = _rendezvous()
    if where is None:
        print("WARNING rank 0: no MPI world (PMIX_RANK/PMIX_NAMESPACE unset): an MPI singleton", flush=True)
    else:
        tmp = where.with_suffix(".tmp")
        tmp.write_text(f"{host}:{port} {os.getpid()}\n")
        tmp.replace(where)
    print(f"INFO rank 0: mgmn leader node listening at tcp://{host}:{port}", flush=True)
    try:
        while True:
            time.sleep(3600)
    finally:
        if where is not None:
            where.unlink(missing_ok=True)


def stop() -> None:
    """`mgmn_leader_node --action stop`, from rank 0's task subshell once the task ended."""
    where = _rendezvous_of_parent()
    if where is not None and where.exists():
        os.kill(int(where.read_text().split()[1]), signal.SIGTERM)


def _rendezvous_of_parent() -> Path | None:
    # The task's subshell has no MPI variables left: the leader it stops is the one at its
    # IPC address, named in a rendezvous file beside the record.
    record = os.environ.get("NEL_STANDIN_RECORD")
    addr = os.environ.get("TLLM_SPAWN_PROXY_PROCESS_IPC_ADDR", "").removeprefix("tcp://")
    base = Path(record).parent if record else Path(tempfile.gettempdir())
    for p in base.glob("mpi-*.leader"):
        if p.read_text().split()[:1] == [addr]:
            return p
    return None


def worker() -> None:
    """Any other rank: join the leader of this MPI world; exit when it is gone."""
    rank = int(os.environ.get("PMIX_RANK", os.environ.get("SLURM_PROCID", "0")))
    where = _rendezvous()
    if where is None:
        print(f"RuntimeError: rank {os.environ.get('SLURM_PROCID')}: no MPI world (PMIX_RANK / "
              "PMIX_NAMESPACE unset: start the ranks with srun --mpi=pmix or mpirun)", flush=True)
        raise SystemExit(1)
    gpu = _rank_gpu(rank)
    _record("worker", rank, gpu)
    end = time.monotonic() + 600
    while not where.exists():
        if time.monotonic() > end:
            print(f"RuntimeError: rank {rank}: no leader in MPI world {os.environ['PMIX_NAMESPACE']}", flush=True)
            raise SystemExit(1)
        time.sleep(0.1)
    join(where.read_text().split()[0], rank, 1)


def main(argv: list[str]) -> None:
    """`leader [--action stop]` / `worker`."""
    p = argparse.ArgumentParser(prog="mgmn_node", allow_abbrev=False)
    p.add_argument("role", choices=["leader", "worker"])
    p.add_argument("--action", choices=["stop"])
    ns = p.parse_args(argv)
    if ns.role == "worker":
        worker()
    elif ns.action == "stop":
        stop()
    else:
        leader()


if __name__ == "__main__":
    main(sys.argv[1:])
