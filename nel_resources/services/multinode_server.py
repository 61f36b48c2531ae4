"""A launched server over several SLURM nodes (`services.<n>.num_nodes > 1`): the same face as
`LaunchedService` (start, wait healthy, stop), started as one `srun` step over the job's
nodes (nel_resources.launchers.slurm_multinode writes the step and the per-node script).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.errors import NelError
from nel_resources.launchers import slurm_multinode as mn
from nel_resources.runtime.processes import free_port
from nel_resources.services.launch import LaunchedService, service_command

if TYPE_CHECKING:
    from nel_resources.config import ServiceConfig
    from nel_resources.config.deployment import ClusterConfig

#: How many lines of each node's log a failed start quotes.
TAIL_LINES = 4


class MultiNodeService(LaunchedService):
    """A server on `svc.num_nodes` nodes of the current SLURM job; its head (node 0) is this
    node, where the health check and the eval client talk to it on `svc.host`.

    Args:
        name: service name.
        svc: the service config (`num_nodes > 1`, a type of slurm_multinode.MULTINODE_FORMS).
        log_dir: where the step's log, each node's log and the per-node script go.
        cluster: `cluster:` (its Pyxis settings, for a service with an `image`).
        environ: the job's environment (default os.environ).
    """

    def __init__(self, name: str, svc: ServiceConfig, log_dir: Path, cluster: ClusterConfig,
                 environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        mn.check_in_job(name, svc, env)
        if (why := mn.refusal(svc)) is not None:
            raise NelError(f"services.{name}: num_nodes {svc.num_nodes}: {why}")
        super().__init__(name, svc, log_dir)
        head = mn.head_address()
        try:
            port = free_port(head)
        except OSError:  # an address this process cannot bind: any free port here
            port = free_port()
        self.rendezvous = mn.Rendezvous(head, port)
        self.script = self.log_dir / f"{self.log_path.stem}.ranks.sh"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.script.write_text(mn.rank_script(name, svc, service_command(name, svc, self.port),
                                              self.rendezvous))
        self.argv = mn.step_argv(svc, self.script, self.log_path,
                                 mn.pyxis_options(cluster, svc, self.log_dir, env))
        self.node_logs = mn.node_logs(self.log_path, svc.num_nodes)

    def start(self) -> str:
        """Start the step on every node and wait until the head answers its health check.

        Raises:
            NelError: as LaunchedService.start, with the last lines of every node's log.
        """
        try:
            return super().start()
        except NelError as exc:
            # The step's own log holds srun's lines only: the nodes' logs say why.
            first = str(exc).splitlines()[0].split("; log ")[0].rstrip(":")
            raise NelError(f"{first}\n{self.tails()}") from None

    def tails(self) -> str:
        """The last lines of each node's log, the head's first."""
        out = []
        for i, path in enumerate(self.node_logs):
            try:
                lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
            except OSError:
                lines = []
            role = "head" if i == 0 else "worker"
            out.append(f"node {i} ({role}) log {path} ends with:" if lines else
                       f"node {i} ({role}) log {path} is empty")
            out += [f"  {ln}" for ln in _collapse(lines)[-TAIL_LINES:]]
        return "\n".join(out)


def _collapse(lines: list[str]) -> list[str]:
    """Runs of one repeated line as one (`... (xN)`): a node stuck retrying logs the same
    line every second, and the tail must still show what came before."""
    out: list[str] = []
    count = 0
    for i, ln in enumerate(lines):
        count += 1
        if i + 1 < len(lines) and lines[i + 1] == ln:
            continue
        out.append(ln if count == 1 else f"{ln} (x{count})")
        count = 0
    return out
