"""A TCP listener on this machine that only a networked container can reach: bound to the
gateway address of a docker network the test creates (a local address of this host, never
an outside one). It records every connection, so a test proves a sandbox had no network by
a connection that did not arrive, next to one (from a `bridge` container) that did."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from tests.support.docker_engine import docker_client


@dataclass
class GatewayListener:
    """Where to connect (`host`, `port`) and the connections seen so far."""

    host: str
    port: int
    seen: list[str] = field(default_factory=list)

    def connect_code(self) -> str:
        """Python lines that try to reach the listener (and say which way it went)."""
        return (f"import socket\ntry:\n    socket.create_connection(({self.host!r}, {self.port}), "
                "timeout=3).close()\n    print('CONNECTED')\nexcept OSError as e:\n"
                "    print('BLOCKED', e)\n")


@contextmanager
def gateway_listener() -> Iterator[GatewayListener]:
    """A listener on the gateway of a fresh docker network, removed afterwards."""
    docker = docker_client()
    name = f"nel-test-net-{uuid.uuid4().hex[:8]}"
    subprocess.run([docker, "network", "create", name], check=True, capture_output=True, timeout=60)
    srv = socket.socket()
    try:
        info = json.loads(subprocess.run([docker, "network", "inspect", name], check=True,
                                         capture_output=True, text=True, timeout=60).stdout)
        gateway = info[0]["IPAM"]["Config"][0]["Gateway"]
        srv.bind((gateway, 0))
        srv.listen(16)
        srv.settimeout(0.2)
        lis = GatewayListener(gateway, srv.getsockname()[1])
        stop = threading.Event()

        def accept() -> None:
            while not stop.is_set():
                try:
                    conn, addr = srv.accept()
                except OSError:
                    continue
                lis.seen.append(addr[0])
                conn.close()
        t = threading.Thread(target=accept, daemon=True)
        t.start()
        try:
            yield lis
        finally:
            stop.set()
            t.join(5)
    finally:
        srv.close()
        subprocess.run([docker, "network", "rm", name], capture_output=True, timeout=60)
