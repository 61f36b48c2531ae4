"""Where this SLURM node is, as the cluster knows it: a leaf module, so that servers
(nel_resources.services) and job scripts (nel_resources.launchers) can both ask without the
servers importing the launchers that start them."""

from __future__ import annotations

import os
import socket
import subprocess


def node_address() -> str:
    """This node's address as the cluster knows it (`NodeAddr`), so a process on another node
    of the job can reach a server started here; the host name when scontrol cannot say."""
    node = os.environ.get("SLURMD_NODENAME", "")
    if node:
        try:
            out = subprocess.run(["scontrol", "show", "node", "-o", node], capture_output=True,
                                 text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        for tok in out.split():
            if tok.startswith("NodeAddr="):
                return tok.split("=", 1)[1]
    return socket.gethostname()
