"""Disaggregated Dynamo workers on a node pool of their own: the component of a
heterogeneous SLURM job that runs them (`nel eval run --slurm-service <name>@<role>`), and
what the eval side needs to let them find NATS and etcd.

NeMo Evaluator 0.3.0 gives each role's pool its own het group and starts the role's workers
there with NATS's and etcd's address in `NATS_SERVER` / `ETCD_ENDPOINTS`; so does nel. The
deployment's NATS, etcd and frontend run beside the eval client (they are the URL it talks
to); it writes their addresses to `<services dir>/<name>.dynamo.json` (DynamoServer), which
the component waits for.

No Dagster here.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from benchmarks.errors import NelError
from nel_resources.config import ServiceConfig
from nel_resources.runtime.processes import free_port
from nel_resources.services.dynamo import RENDEZVOUS_SUFFIX, RoleWorkers, role_key

#: The job's services directory, exported by the heterogeneous job script (slurm_het).
SERVICES_DIR_ENV = "NEL_SLURM_SERVICES_DIR"
_POLL_S = 0.5


def rendezvous_here(away: Mapping[str, str] | None) -> tuple[Path, str] | None:
    """(services directory, this node's address) when some roles run `away`, else None.

    Raises:
        NelError: roles run away but this process is not in such a job.
    """
    if not away:
        return None
    where = os.environ.get(SERVICES_DIR_ENV)
    if not where:
        raise NelError(f"Dynamo {', '.join(away)} workers on another node pool run only in nel's "
                       f"heterogeneous SLURM job ({SERVICES_DIR_ENV} is not set)")
    from nel_resources.launchers.slurm_nodes import node_address

    return Path(where), node_address()


def _one_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0] if lines else text


def serve_role(name: str, svc: ServiceConfig, role: str, svc_dir: Path, stop_file: Path,
               prefix: Sequence[str] = ()) -> int:
    """Run the `role` workers of Dynamo service `name` on this node until `stop_file`
    appears (the eval client ended) or SIGTERM/SIGINT (a KeyboardInterrupt: see slurm_het).
    Returns 1, with `<name>@<role>.error` written (one line, its log named), when NATS's
    address never came or a worker exited."""
    key = role_key(name, role)
    err = svc_dir / f"{key}.error"
    where = svc_dir / f"{name}{RENDEZVOUS_SUFFIX}"
    deadline = time.monotonic() + svc.startup_timeout + 60
    while not where.exists():
        if stop_file.exists():
            return 0
        if time.monotonic() > deadline:
            _write(err, f"no NATS/etcd address in {where} within {svc.startup_timeout:g} s")
            return 1
        time.sleep(_POLL_S)
    infra = json.loads(where.read_text())
    workers = RoleWorkers(name, svc, svc_dir, key, svc.port or free_port(svc.host), roles=(role,),
                          prefix=prefix)
    try:
        try:
            workers.start(infra)
        except NelError as exc:
            _write(err, _one_line(str(exc)))
            return 1
        for log in workers.logs():
            print(f"nel: services.{name} {role} worker started (log {log})", flush=True)
        while not stop_file.exists():
            gone = workers.exited()
            if gone is not None:
                w, proc = gone
                _write(err, f"its {w.label} worker exited with status {proc.stop()} (log {proc.log_path})")
                return 1
            time.sleep(_POLL_S)
        print(f"nel: services.{name} {role} workers stopping (the eval client ended)", flush=True)
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        workers.stop()


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text + "\n")
    os.replace(tmp, path)
