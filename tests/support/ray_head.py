"""A real Ray head node for the remote-cluster tests, as a separate process group.

`ray start --head --block` runs in its own session (ManagedProcess), so the whole cluster
(GCS, raylet, dashboard, workers) is stopped by killing that group: never `ray stop`, which
kills every Ray process on the machine, other engineers' included. Every port Ray would
otherwise take at a fixed default (10001, 52365, 8265, ...) is a free one, and the node's
address is the loopback one (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0: Ray otherwise replaces
127.0.0.1 with the machine's reachable address), so only 127.0.0.1 is ever a target.
Token authentication is on with a token of the head's own (RAY_AUTH_TOKEN_PATH in its temp
dir): Ray otherwise turns it on or off depending on whether some other run left a
`~/.ray/auth_token` behind, and every client (drivers, `ray job`, the dashboard) must agree.

The head's workers import this checkout (PYTHONPATH) and find `nel` on PATH (the venv's bin
first), as a cluster whose nodes have nel installed does.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import sys
import tempfile
import urllib.request
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nel_resources.runtime.processes import ManagedProcess
from tests.support.realcomponents import REPO_ROOT
from tests.support.waiting import PROCESS_START_S, wait_for

#: The head's environment and the one a driver on this machine needs to find it on loopback.
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
_PORTS = ("port", "dashboard-port", "ray-client-server-port", "dashboard-agent-listen-port",
          "dashboard-agent-grpc-port", "metrics-export-port", "runtime-env-agent-port",
          "node-manager-port", "object-manager-port")


@dataclass
class RayHead:
    """A running head: its GCS address (`ray.init`), dashboard URL (`ray job submit`)."""

    process: ManagedProcess
    gcs_address: str  # 127.0.0.1:PORT
    dashboard_url: str  # http://127.0.0.1:PORT
    temp_dir: Path
    env: dict[str, str]  # what a driver or `ray` CLI call on this machine runs with
    token: str  # the cluster's authentication token
    client_address: str  # ray://127.0.0.1:PORT (Ray Client, for a driver off the cluster)

    @property
    def driver_env(self) -> dict[str, str]:
        """What a driver or `ray` CLI call on this machine adds to its environment: the
        loopback node address and the cluster's token (and the venv's bin on PATH)."""
        return {k: v for k, v in self.env.items() if k.startswith("RAY_") or k == "PATH"}

    def get(self, path: str) -> Any:
        """GET a dashboard endpoint (authenticated), decoded from JSON."""
        # The dashboard is on loopback: no proxy may stand in between.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        req = urllib.request.Request(f"{self.dashboard_url}{path}",
                                     headers={"Authorization": f"Bearer {self.token}"})
        with opener.open(req, timeout=60) as resp:
            return json.loads(resp.read())

    def state(self, resource: str) -> list[dict[str, Any]]:
        """The state API's `resource` list (`nodes`, `tasks`, ...) from the dashboard."""
        body = self.get(f"/api/v0/{resource}?limit=10000&detail=true")
        return list(body["data"]["result"]["result"])

    def _node_alive(self) -> bool:
        try:
            return any(n.get("state") == "ALIVE" for n in self.state("nodes"))
        except (OSError, ValueError, KeyError):  # not up yet
            return False

    def head_node_id(self) -> str:
        """The node id of the head (the cluster's only node)."""
        (node,) = self.state("nodes")
        return str(node["node_id"])

    def client_server_logs(self, tail: int = 3000) -> str:
        """The tail of each Ray Client server log of the head (the proxy and the per-driver
        servers it starts): why a `ray://` driver could not join, for a failing test's message."""
        logs = sorted((self.temp_dir / "session_latest" / "logs").glob("ray_client_server*"))
        return "\n".join(f"== {f.name}\n{f.read_text(errors='replace')[-tail:]}" for f in logs)

    def stop(self) -> None:
        """Kill the head's process group (the whole cluster it runs) and remove its temp dir
        (session logs, spilled objects, uploaded working dirs)."""
        self.process.stop(grace=5.0)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def _free_ports(n: int) -> list[int]:
    """`n` distinct ports free a moment ago (all bound at once, so none repeats)."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]


def start_ray_head(num_cpus: int = 4) -> RayHead:
    """Start a head on 127.0.0.1 with the dashboard (job submission) and wait until the
    dashboard answers. The caller stops it (`RayHead.stop`)."""
    ports = dict(zip(_PORTS, _free_ports(len(_PORTS)), strict=True))
    # A short path: Ray's unix sockets live under it (108-byte limit).
    temp_dir = Path(tempfile.mkdtemp(prefix="nelrh", dir="/tmp"))
    token = secrets.token_hex(32)
    token_path = temp_dir / "auth_token"
    token_path.write_text(token)
    token_path.chmod(0o600)
    bindir = str(Path(sys.executable).parent)
    env = {**LOOPBACK_ENV, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_path),
           "PYTHONPATH": str(REPO_ROOT), "NO_COLOR": "1",
           "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}
    # The cluster's nodes see none of the test's own nel settings (NEL_DATA_DIR, ...): what a
    # worker needs must reach it through nel or the job's runtime_env, as on a real cluster.
    unset = [a for n in sorted(os.environ) if n.startswith(("NEL_", "DAGSTER_")) for a in ("-u", n)]
    argv = ["env", *unset, str(Path(bindir) / "ray"), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
            "--dashboard-host", "127.0.0.1", "--include-dashboard", "true", "--num-cpus", str(num_cpus),
            "--temp-dir", str(temp_dir), "--disable-usage-stats"]
    for flag, port in ports.items():
        argv += [f"--{flag}", str(port)]
    proc = ManagedProcess(argv, env=env, name="ray-head", log_path=temp_dir / "head.log").start()
    dashboard = f"http://127.0.0.1:{ports['dashboard-port']}"
    head = RayHead(proc, f"127.0.0.1:{ports['port']}", dashboard, temp_dir, env, token,
                   f"ray://127.0.0.1:{ports['ray-client-server-port']}")
    try:
        wait_for(head._node_alive, timeout=PROCESS_START_S, what="the Ray head node to be ALIVE",
                 alive=proc)
    except BaseException:
        head.stop()
        raise
    return head
