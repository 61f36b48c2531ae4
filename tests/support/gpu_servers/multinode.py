"""How the stand-ins of a multi-node server meet (tests only): a head listens on a loopback
port (Ray's GCS port, SGLang's `--dist-init-addr`), each worker rank connects and says
`JOIN <rank> <gpus> <host>`, then holds the connection until the head goes away (as the
real workers live as long as their head). `STATUS` asks the head for its nodes.

`NEL_STANDIN_NEVER_JOIN=1` makes a worker never reach its head (it logs "stuck" lines), as
a node whose network or container never comes up.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Head:
    """The head's side: who joined (rank -> GPUs), its own node counted as rank 0."""

    host: str
    port: int
    own_gpus: int = 0
    joined: dict[int, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> Head:
        """Listen (the socket and every worker's connection stay open across an exec: the
        workers then hold on until the server that replaced this process exits)."""
        self.sock = socket.create_server((self.host, self.port))
        self.sock.set_inheritable(True)
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def _accept(self) -> None:
        while True:
            conn, _ = self.sock.accept()
            conn.set_inheritable(True)
            line = conn.makefile("r").readline().split()
            if line[:1] == ["JOIN"] and len(line) >= 3:
                with self._lock:
                    self.joined[int(line[1])] = int(line[2])
                print(f"INFO head: node rank {line[1]} joined from {line[3:] or '?'} with "
                      f"{line[2]} GPU(s)", flush=True)
            elif line[:1] == ["STATUS"]:
                with self._lock:
                    nodes = {0: self.own_gpus, **self.joined}
                conn.sendall((json.dumps({"nodes": nodes}) + "\n").encode())
                conn.close()
            else:
                conn.close()

    def wait_for(self, workers: int) -> None:
        """Block until `workers` ranks joined, saying how many so far when it changes."""
        seen = -1
        while True:
            with self._lock:
                n = len(self.joined)
            if n != seen:
                print(f"INFO head: {n} of {workers} worker node(s) joined at {self.host}:{self.port}",
                      flush=True)
                seen = n
            if n >= workers:
                return
            time.sleep(0.1)


def join(address: str, rank: int, gpus: int, *, retry_s: float = 600.0) -> None:
    """A worker: reach the head at `address` (retrying while it starts), join, and hold on
    until the head is gone; then return."""
    if os.environ.get("NEL_STANDIN_NEVER_JOIN") == "1":
        while True:
            print(f"INFO rank {rank}: connecting to {address} ... (stuck)", flush=True)
            time.sleep(1)
    host, port = address.rsplit(":", 1)
    end = time.monotonic() + retry_s
    while True:
        try:
            conn = socket.create_connection((host, int(port)), timeout=5)
            break
        except OSError as exc:
            if time.monotonic() > end:
                print(f"RuntimeError: rank {rank} could not reach the head at {address}: {exc}", flush=True)
                raise SystemExit(1) from None
            time.sleep(0.2)
    conn.settimeout(None)
    conn.sendall(f"JOIN {rank} {gpus} {socket.gethostname()}\n".encode())
    print(f"INFO rank {rank}: joined the head at {address} with {gpus} GPU(s)", flush=True)
    while conn.recv(4096):
        pass
    print(f"INFO rank {rank}: the head at {address} is gone; exiting", flush=True)


def status(address: str) -> dict[int, int] | None:
    """The head's nodes (rank -> GPUs), None when it does not answer."""
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=5) as conn:
            conn.sendall(b"STATUS\n")
            data = conn.makefile("r").readline()
    except OSError:
        return None
    return {int(k): v for k, v in json.loads(data)["nodes"].items()}


def log(msg: str) -> None:
    """One line to the node's log."""
    print(msg, file=sys.stdout, flush=True)
