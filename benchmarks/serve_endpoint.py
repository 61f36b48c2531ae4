"""`nel serve --endpoint-file PATH`: tell others where the server is, once it answers.

PATH receives `host:port` (what `gym://` takes) written by the serving process itself, after
its own `/health` answered, so the file existing means "up" (a launcher that wrote it before
the bind would advertise a server that may never start). A sidecar `PATH` with `.json` as
suffix (`endpoint.json` beside `endpoint.txt`) says who wrote it: the pid, the node and the
SLURM job id, so a submitter can tell its own job's endpoint from an earlier one's. Both files
are written to a temporary name and renamed (readers never see half a line), and removed
again when the server stops.

No Dagster, no FastAPI here: the caller hands over how to learn the bound port.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import socket
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Binding these means every interface: other machines reach the server by the node's name.
_EVERY_INTERFACE = frozenset({"", "0.0.0.0", "::", "[::]"})


def advertised_host(bound: str) -> str:
    """The address clients on other machines use: this machine's hostname when the server
    binds every interface, else the address it binds."""
    return socket.gethostname() if bound in _EVERY_INTERFACE else bound


def _self_target(bound: str) -> str:
    """Where this process reaches its own server (a wildcard address is no destination)."""
    if bound in ("::", "[::]"):
        return "::1"
    return "127.0.0.1" if bound in _EVERY_INTERFACE else bound


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def sidecar_path(path: Path) -> Path:
    """`endpoint.txt` -> `endpoint.json`: who wrote the endpoint file."""
    return path.with_suffix(".json")


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to a temporary name beside `path`, then rename it over `path`."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())  # a shared filesystem must not show the rename before the data
    os.replace(tmp, path)


def read_owner(path: Path) -> dict[str, Any] | None:
    """The sidecar of an endpoint file (None when missing or unreadable)."""
    try:
        doc = json.loads(sidecar_path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def clear_endpoint(path: Path) -> None:
    """Remove an endpoint file and its sidecar (a stale one must not read as "up")."""
    for p in (path, sidecar_path(path)):
        p.unlink(missing_ok=True)


class EndpointAnnouncer:
    """Waits (in a daemon thread) until the server answers `/health`, then prints its
    address and writes the endpoint file.

    Args:
        bound_host: the address the server binds.
        port_of: returns the bound port once known (None before: with `--port 0` the port
            exists only after the bind).
        path: the endpoint file (None: only print the address).
        benchmark: the served benchmark's name, recorded in the sidecar.
        timeout_s: give up (saying so on stderr) when the server never answers.
    """

    def __init__(self, bound_host: str, port_of: Callable[[], int | None], path: Path | None,
                 *, benchmark: str = "", timeout_s: float = 600.0) -> None:
        self.bound_host = bound_host
        self.port_of = port_of
        self.path = path.expanduser().resolve() if path is not None else None
        self.benchmark = benchmark
        self.timeout_s = timeout_s
        self.written = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Clear a stale file at `path`, then watch for the server in the background."""
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            clear_endpoint(self.path)
        self._thread = threading.Thread(target=self._watch, name="nel-endpoint", daemon=True)
        self._thread.start()

    def _healthy(self, port: int) -> bool:
        url = f"http://{_hostport(_self_target(self.bound_host), port)}/health"
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return int(resp.status) == 200
        except (OSError, ValueError):
            return False

    def _watch(self) -> None:
        end = time.monotonic() + self.timeout_s
        while time.monotonic() < end:
            port = self.port_of()
            if port and self._healthy(port):
                self._announce(port)
                return
            time.sleep(0.05)
        print(f"nel serve: the server did not answer /health within {self.timeout_s:.0f} s; "
              "no endpoint written", file=sys.stderr, flush=True)

    def _announce(self, port: int) -> None:
        endpoint = _hostport(advertised_host(self.bound_host), port)
        if self.path is not None:
            owner = {"endpoint": endpoint, "gym": f"gym://{endpoint}", "port": port,
                     "bound_host": self.bound_host, "node": socket.gethostname(),
                     "pid": os.getpid(), "job_id": os.environ.get("SLURM_JOB_ID"),
                     "benchmark": self.benchmark,
                     "written_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")}
            # the sidecar first: whoever sees endpoint.txt can already tell whose it is
            write_atomic(sidecar_path(self.path), json.dumps(owner, indent=1) + "\n")
            write_atomic(self.path, endpoint + "\n")
        where = f" (written to {self.path})" if self.path is not None else ""
        print(f"nel serve: up at {endpoint}{where}", file=sys.stderr, flush=True)
        self.written.set()

    def withdraw(self) -> None:
        """The server stopped: remove the file if this process wrote it."""
        if self.path is None or not self.written.is_set():
            return
        owner = read_owner(self.path)
        if owner is not None and owner.get("pid") == os.getpid():
            clear_endpoint(self.path)
