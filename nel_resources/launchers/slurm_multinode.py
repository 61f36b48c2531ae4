"""Multi-node model servers in a SLURM job (`services.<n>.num_nodes > 1`).

The job asks for `--nodes=num_nodes` on the service's node pool (`job_nodes`); the eval client
runs on the first node (the batch step's), which is the server's head. nel starts one `srun`
step over all the nodes, one task per node (TRT-LLM: one MPI rank per GPU), each running the
per-node script `rank_script` writes; the step's output goes to one log per node,
`<name>.slurm-<task>.node<N>.log`, next to the results. The health check hits the head only
(127.0.0.1 on the eval client's node); stopping the step (or scancel) stops every node.

Each server's documented multi-node form, as NeMo Evaluator 0.3.0 writes it
(orchestration/slurm_gen.py) where it has one:
- vLLM: a Ray cluster (`ray start --head --port=P` on the first node, `ray start
  --address=HEAD:P --block` on the others, retried as 0.3.0 does), then `vllm serve ...
  --distributed-executor-backend ray` on the head once every node joined (0.3.0 sleeps 90 s
  instead; nel waits until `ray status` lists `num_nodes` nodes).
- SGLang: the same `python -m sglang.launch_server ... --nnodes N --node-rank R
  --dist-init-addr HEAD:P` on every node (rank 0 serves HTTP).
- TRT-LLM: one MPI world over the nodes, `srun --mpi=pmix ... trtllm-llmapi-launch
  trtllm-serve ...` (TRT-LLM's documented multi-node form; 0.3.0 gives trtllm-serve vLLM's
  `--distributed-executor-backend ray`, a flag trtllm-serve does not have).

The rendezvous port (Ray's, SGLang's) is picked free on the head by the eval client when it
starts the server, so two jobs on one node never collide. No Dagster here.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.errors import NelError

if TYPE_CHECKING:
    from nel_resources.config import NelConfig
    from nel_resources.config.deployment import ClusterConfig
    from nel_resources.config.services import ServiceConfig

#: The launched types that run over several nodes, and how they join.
MULTINODE_FORMS: dict[str, str] = {"vllm": "a Ray cluster", "sglang": "torch.distributed",
                                   "trt_llm": "one MPI world"}
#: What `ray status` prints per node of the cluster (`Active:` then ` 1 node_<id>`).
_RAY_NODE_LINE = r"^ *[0-9]+ node_"


@dataclass(frozen=True)
class Rendezvous:
    """Where the other nodes find the head: its address (the cluster's `NodeAddr` of the
    first node) and a port free there (Ray's GCS port, SGLang's `--dist-init-addr` port)."""

    head: str
    port: int | str  # a str only where a script is shown before the job picks it


def is_multinode(svc: ServiceConfig) -> bool:
    """Whether `svc` is a server nel launches over several nodes."""
    return svc.num_nodes > 1


def refusal(svc: ServiceConfig) -> str | None:
    """Why `svc`'s `num_nodes` cannot be honoured (one line), None when it can."""
    if svc.type not in MULTINODE_FORMS:
        return f"a {svc.type} server runs on one node (multi-node: {', '.join(MULTINODE_FORMS)})"
    if svc.command:
        return "a custom `command` gives nel no multi-node form to start on each node"
    if svc.type == "trt_llm":
        world = (svc.tensor_parallel_size or 1) * (svc.pipeline_parallel_size or 1)
        if world % svc.num_nodes:
            return (f"TRT-LLM runs one MPI rank per GPU: tensor x pipeline parallel size ({world}) "
                    f"must be a multiple of num_nodes ({svc.num_nodes})")
    return None


def job_nodes(cfg: NelConfig, pool_name: str, services: list[str] | None = None) -> int:
    """The `--nodes` of a job on node pool `pool_name`: the pool's `nodes`, or more when a
    multi-node service started in that job needs them (`services`: the launched services the
    job starts; default every launched service of the config placed there or nowhere)."""
    from nel_resources.config.services import LAUNCHED_TYPES

    pool = cfg.cluster.node_pools[pool_name]
    names = services if services is not None else [
        n for n, s in cfg.services.items() if s.node_pool in (None, pool_name)]
    wanted = [cfg.services[n].num_nodes for n in names
              if n in cfg.services and cfg.services[n].type in LAUNCHED_TYPES]
    return max([pool.nodes, *wanted])


def node_log_pattern(log_path: Path) -> Path:
    """`<name>.slurm-<task>.log` -> `<name>.slurm-<task>.node%n.log` (srun's per-node file)."""
    return log_path.with_name(log_path.stem + ".node%n" + log_path.suffix)


def node_logs(log_path: Path, num_nodes: int) -> list[Path]:
    """The per-node logs `node_log_pattern` names, node 0 (the head) first."""
    pattern = str(node_log_pattern(log_path))
    return [Path(pattern.replace("%n", str(i))) for i in range(num_nodes)]


def _gpus_per_task(svc: ServiceConfig) -> int:
    return (svc.tensor_parallel_size or 1) * (svc.pipeline_parallel_size or 1) // svc.num_nodes


def step_argv(svc: ServiceConfig, script: Path, log_path: Path,
              container: list[str] | None = None) -> list[str]:
    """The `srun` step that runs `script` on every node of the job: one task per node (one
    per GPU for TRT-LLM's MPI world), its output in one log per node; a rank that fails
    ends the step (`--kill-on-bad-exit`), so a dead worker is seen at once. `container`: the
    Pyxis options of the service's image (launchers.pyxis.container_flags)."""
    n = svc.num_nodes
    per_node = _gpus_per_task(svc) if svc.type == "trt_llm" else 1
    mpi = ["--mpi=pmix"] if svc.type == "trt_llm" else []
    return ["srun", "--overlap", *mpi, f"--nodes={n}", f"--ntasks={n * per_node}",
            f"--ntasks-per-node={per_node}", "--kill-on-bad-exit=1",
            f"--output={node_log_pattern(log_path)}", *(container or []), "bash", str(script)]


def rank_script(name: str, svc: ServiceConfig, command: list[str], rdv: Rendezvous) -> str:
    """The script each node (TRT-LLM: each MPI rank) runs; `command` is the server's own
    single-node command line (nel_resources.services.launch.service_command)."""
    n = svc.num_nodes
    head = f"{rdv.head}:{rdv.port}"
    cmd = shlex.join(command)
    lines = ["#!/usr/bin/env bash",
             f"# services.{name} ({svc.type}) on {n} nodes through {MULTINODE_FORMS[svc.type]}; "
             "written by nel, run by srun on every node",
             "set -uo pipefail",
             'rank="${SLURM_NODEID:-0}"',
             f'echo "nel: services.{name} ({svc.type}) node $rank of {n} on $(hostname)"']
    if svc.type == "sglang":
        lines.append(f'exec {cmd} --nnodes {n} --node-rank "$rank" --dist-init-addr {shlex.quote(head)}')
    elif svc.type == "trt_llm":
        lines.append(f"exec trtllm-llmapi-launch {cmd}")
    else:  # vLLM over Ray
        ray = shlex.quote(svc.ray_binary)
        lines += [
            'gpus=(); [[ -n "${SLURM_GPUS_ON_NODE:-}" ]] && gpus=(--num-gpus="$SLURM_GPUS_ON_NODE")',
            'if [[ "$rank" == 0 ]]; then',
            f'  {ray} start --head {shlex.quote(f"--port={rdv.port}")} "${{gpus[@]}}" --block &',
            "  ray_head=$!",
            '  trap \'kill "$ray_head" 2>/dev/null\' EXIT',
            "  seen=-1",
            "  while :; do",
            '    kill -0 "$ray_head" 2>/dev/null || { echo "nel: the Ray head exited"; exit 1; }',
            f"    joined=$({ray} status --address={shlex.quote(head)} 2>/dev/null "
            f"| grep -cE '{_RAY_NODE_LINE}')",
            f'    [[ "$joined" != "$seen" ]] && echo "nel: $joined of {n} nodes in the Ray cluster '
            f'at {head}" && seen=$joined',
            f'    [[ "$joined" -ge {n} ]] && break',
            "    sleep 1",
            "  done",
            f"  export RAY_ADDRESS={shlex.quote(head)}",
            f"  {cmd} --distributed-executor-backend ray",
            "else",
            "  for try in $(seq 1 60); do",
            f'    {ray} start --address={shlex.quote(head)} "${{gpus[@]}}" --block && exit 0',
            f'    echo "nel: could not join the Ray head at {head} (try $try of 60)"',
            "    sleep 5",
            "  done",
            "  exit 1",
            "fi"]
    return "\n".join(lines) + "\n"


def describe(name: str, svc: ServiceConfig, command: list[str], log_dir: Path,
             container: list[str] | None = None) -> list[str]:
    """What a job script or a dry run shows of a multi-node server: the step and the
    per-node script (the head's address and port are known only inside the job)."""
    log = log_dir / f"{name}.slurm-<job>.log"
    script = log_dir / f"{log.stem}.ranks.sh"
    step = shlex.join(step_argv(svc, script, log, container))
    body = rank_script(name, svc, command, Rendezvous("<head>", "<port>"))
    return [f"{step}", f"{script.name}:", *(f"  {ln}" for ln in body.splitlines()[1:])]


def head_address() -> str:
    """This node's address as the cluster knows it (`NodeAddr`): the head's, since the eval
    client that starts the server runs on the job's first node."""
    from nel_resources.launchers.slurm_nodes import node_address

    return node_address()


def check_in_job(name: str, svc: ServiceConfig, environ: Mapping[str, str]) -> None:
    """Refuse to start a multi-node server outside a job with enough nodes (one line)."""
    have = environ.get("SLURM_JOB_NUM_NODES", environ.get("SLURM_NNODES", ""))
    if not environ.get("SLURM_JOB_ID"):
        raise NelError(f"services.{name}: num_nodes {svc.num_nodes} runs in a SLURM job "
                       "(cluster.type: slurm)")
    if have.isdigit() and int(have) < svc.num_nodes:
        raise NelError(f"services.{name}: num_nodes {svc.num_nodes} but this job has {have} node(s)")


def pyxis_options(cluster: ClusterConfig, svc: ServiceConfig, log_dir: Path,
                  environ: Mapping[str, str]) -> list[str]:
    """The Pyxis options of the service's image (empty without one), with the log directory
    mounted too: the per-node script lives there."""
    from nel_resources.launchers.pyxis import service_prefix

    flags = [f for f in service_prefix(cluster, svc, environ)
             if f.startswith(("--container-", "--no-container-"))]  # not its own srun step
    if not flags:
        return []
    mount = f"{log_dir}:{log_dir}"
    out = []
    for f in flags:
        if f.startswith("--container-mounts="):
            f = f"{f},{mount}"
            mount = ""
        out.append(f)
    if mount:
        out.insert(1, f"--container-mounts={mount}")
    return out
