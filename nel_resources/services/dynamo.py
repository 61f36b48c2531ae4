"""An NVIDIA Dynamo deployment nel starts and stops itself (`services.<n>.type: dynamo`).

`DynamoServer` has the face of `LaunchedService` (start -> base URL, stop, url, pid,
log_path), so `nel eval run`, the Dagster resource and a SLURM job use it the same way. It
starts, in NeMo Evaluator 0.3.0's order (commands: dynamo_commands), NATS and etcd (and waits
until both accept connections, as 0.3.0's script does), the frontend, then the workers; it is
ready when the frontend's `/health` counts the workers it needs (0.3.0's rule: the frontend
answers 200 as soon as it binds, before any worker registered, so the status code alone
says nothing). A worker that exits, or never registers within `startup_timeout`, fails the
start with the last lines of its log. Each process runs in its own process group (behind
the Pyxis `srun` step when the service has an `image` inside a SLURM job) and is stopped,
workers first, on success, failure and Ctrl-C.

Disaggregated workers of a role placed on another node pool run on a component of their
own in a heterogeneous SLURM job (`RoleWorkers`, started by
nel_resources.launchers.slurm_het): this side writes where NATS and etcd listen to
`<services dir>/<name>.dynamo.json`, the component reads it, starts its workers and writes
`<name>@<role>.error` (one line) if they fail.

No Dagster here.
"""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.errors import NelError
from nel_resources.config import ServiceConfig
from nel_resources.runtime.processes import ManagedProcess, free_port
from nel_resources.services import dynamo_commands as cmds

#: `<services dir>/<name><RENDEZVOUS_SUFFIX>`: NATS's and etcd's addresses for remote roles.
RENDEZVOUS_SUFFIX = ".dynamo.json"
# Polling period of the readiness waits (a condition, checked often; never a fixed sleep).
_POLL_S = 0.2


def role_key(name: str, role: str) -> str:
    """`<service>@<role>`: how a role on a component of its own is named (its error file,
    its `--slurm-service` argument)."""
    return f"{name}@{role}"


def registered(health: Any) -> tuple[int, int]:
    """(prefill, decode-or-backend) `generate` instances a frontend `/health` body lists."""
    inst = health.get("instances") if isinstance(health, dict) else None
    gens = [i for i in inst or [] if isinstance(i, dict) and i.get("endpoint") == "generate"]
    return (sum(1 for i in gens if i.get("component") == "prefill"),
            sum(1 for i in gens if i.get("component") in ("decode", "tensorrt_llm", "backend")))


def _tail(path: Path, lines: int = 12) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


class RoleWorkers:
    """The worker processes of a Dynamo service that run on one node: start them against a
    running NATS and etcd (`infra`: their variables), stop them, say whether one exited.

    Args:
        name: the service name.
        svc: its config.
        log_dir: where each worker's log goes (`<base>.<role>-<i>.log`).
        base: the log files' stem (the service's log name without `.log`).
        roles: which roles run here (None: all of them).
        prefix: what runs each process (the Pyxis `srun` step), or nothing.
    """

    def __init__(self, name: str, svc: ServiceConfig, log_dir: Path, base: str, port: int, *,
                 roles: tuple[str, ...] | None = None, prefix: Sequence[str] = ()) -> None:
        self.name, self.svc, self.log_dir, self.base, self.port = name, svc, log_dir, base, port
        self.todo = cmds.workers(svc, roles)
        self.prefix = list(prefix)
        self.procs: list[tuple[cmds.Worker, ManagedProcess]] = []

    def start(self, infra: Mapping[str, str]) -> None:
        """Start every worker with the service's and its role's environment over `infra`."""
        py = cmds.python(bool(self.prefix))
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", self.svc.env.get("CUDA_VISIBLE_DEVICES"))
        devices = [d for d in (visible or "").split(",") if d.strip()]
        for slot, w in enumerate(self.todo):
            env = {**self.svc.env, **infra, **w.env}
            if devices and len(self.todo) > 1:
                # Workers sharing a node must not share GPUs: each takes the next ones.
                env["CUDA_VISIBLE_DEVICES"] = ",".join(devices[:w.gpus()])
                devices = devices[w.gpus():]
            proc = ManagedProcess([*self.prefix, *cmds.worker_command(py, self.svc, w, self.port, slot)],
                                  log_path=self.log_dir / f"{self.base}.{w.label}.log", env=env,
                                  name=f"{self.name} {w.label}")
            try:
                proc.start()
            except FileNotFoundError:
                raise NelError(f"service {self.name!r}: cannot start {proc.argv[0]!r} (is it "
                               "installed?)") from None
            self.procs.append((w, proc))

    def exited(self) -> tuple[cmds.Worker, ManagedProcess] | None:
        """The first worker whose process ended, if any."""
        return next(((w, p) for w, p in self.procs if not p.is_running()), None)

    def logs(self, role: str | None = None) -> list[Path]:
        """The log files of the workers (of `role`)."""
        return [p.log_path for w, p in self.procs if role is None or w.role == role]

    def stop(self) -> None:
        """Stop every worker (last started first); idempotent."""
        for _, proc in reversed(self.procs):
            proc.stop()


class DynamoServer:
    """One Dynamo deployment: NATS, etcd, the frontend and the workers of the roles that run
    here; the frontend is the service's URL.

    Args:
        name: service name (log files, errors).
        svc: the `type: dynamo` service config.
        log_dir: where the logs are kept: `<base>.log` (the frontend), `<base>.nats.log`,
            `<base>.etcd.log`, `<base>.<role>-<i>.log`.
        log_name: the frontend log's file name (default: `server_log_name`).
        prefix: the Pyxis `srun` step each process runs behind, or nothing.
        away: roles that run on components of their own -> their node pool.
        rendezvous: the job's services directory (for `away` roles).
        infra_host: the address NATS and etcd bind (the node's address when `away` workers
            on other nodes must reach them; else the service's host).
    """

    def __init__(self, name: str, svc: ServiceConfig, log_dir: Path, log_name: str | None = None,
                 prefix: Sequence[str] = (), *, away: Mapping[str, str] | None = None,
                 rendezvous: Path | None = None, infra_host: str | None = None) -> None:
        from nel_resources.services.launch import server_log_name

        self.name, self.svc, self.log_dir = name, svc, Path(log_dir)
        self.port = svc.port or free_port(svc.host)
        self.log_path = self.log_dir / (log_name or server_log_name(name))
        self.base = self.log_path.name.removesuffix(".log")
        self.prefix = list(prefix)
        self.away = dict(away or {})
        if self.away and rendezvous is None:
            raise NelError(f"service {name!r}: its {', '.join(self.away)} workers run on another "
                           "node pool, which needs the job's services directory")
        self.rendezvous = rendezvous
        self.infra_host = infra_host or svc.host
        self.argv = cmds.frontend_command(cmds.python(bool(prefix)), svc.host, self.port)
        self.url = f"http://{svc.host}:{self.port}/v1"
        self.health_url = f"http://{svc.host}:{self.port}/health"
        here = tuple(r for r in ("backend", "prefill", "decode") if r not in self.away)
        self.workers = RoleWorkers(name, svc, self.log_dir, self.base, self.port, roles=here, prefix=prefix)
        self._infra: list[ManagedProcess] = []
        self._frontend: ManagedProcess | None = None

    @property
    def pid(self) -> int | None:
        """PID of the frontend, once started."""
        return None if self._frontend is None else self._frontend.pid

    @property
    def process(self) -> DynamoServer:
        """Itself: `is_running()` answers for the whole deployment (slurm_het asks)."""
        return self

    def is_running(self) -> bool:
        """Whether every process started here is still running."""
        procs = [*self._infra, *([self._frontend] if self._frontend else []), *(p for _, p in self.workers.procs)]
        return bool(procs) and all(p.is_running() for p in procs)

    def _spawn(self, argv: list[str], log: str, env: Mapping[str, str], label: str) -> ManagedProcess:
        proc = ManagedProcess([*self.prefix, *argv], log_path=self.log_dir / log, env=dict(env),
                              name=f"{self.name} {label}")
        try:
            proc.start()
        except FileNotFoundError:
            raise NelError(f"service {self.name!r}: cannot start {proc.argv[0]!r} (is it installed?)") from None
        return proc

    def start(self) -> str:
        """Start the deployment and block until the frontend counts its workers; returns the
        base URL.

        Raises:
            NelError: a process could not start or exited, or the workers did not register
                within `startup_timeout` (with the last lines of the log that says why).
        """
        self.log_dir.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.svc.startup_timeout
        try:
            infra = self._start_infra(deadline)
            self._frontend = self._spawn(self.argv, self.log_path.name, {**self.svc.env, **infra}, "frontend")
            if self.away:
                assert self.rendezvous is not None
                self.rendezvous.mkdir(parents=True, exist_ok=True)
                tmp = self.rendezvous / f".{self.name}{RENDEZVOUS_SUFFIX}.tmp"
                tmp.write_text(json.dumps(infra))
                os.replace(tmp, self.rendezvous / f"{self.name}{RENDEZVOUS_SUFFIX}")
            self.workers.start(infra)
            self._wait_ready(deadline)
        except NelError as exc:
            self.stop()
            raise NelError(f"service {self.name!r} did not become healthy: {exc}") from None
        except BaseException:
            self.stop()  # Ctrl-C during the (long) wait leaves nothing behind
            raise
        return self.url

    def _start_infra(self, deadline: float) -> dict[str, str]:
        host = self.infra_host
        nats, etcd, peer = free_port(host), free_port(host), free_port(host)
        infra = cmds.infra_env(host, nats, etcd)
        env = {**self.svc.env, **infra}
        self._infra = [
            self._spawn(cmds.nats_command(host, nats, str(self.log_dir / f"{self.base}.nats")),
                        f"{self.base}.nats.log", env, "nats-server"),
            self._spawn(cmds.etcd_command(host, etcd, peer, str(self.log_dir / f"{self.base}.etcd")),
                        f"{self.base}.etcd.log", env, "etcd")]
        # 0.3.0 waits until both accept connections before it starts anything that registers.
        for proc, port in zip(self._infra, (nats, etcd), strict=True):
            while not _accepts(host, port):
                if not proc.is_running():
                    raise NelError(f"{proc.argv[len(self.prefix)]} exited; {proc.log_path} ends with:\n"
                                   f"{_tail(proc.log_path)}")
                if time.monotonic() > deadline:
                    raise NelError(f"{proc.argv[len(self.prefix)]} did not listen on {host}:{port} "
                                   f"within {self.svc.startup_timeout:g} s; {proc.log_path} ends with:\n"
                                   f"{_tail(proc.log_path)}")
                time.sleep(_POLL_S)
        return infra

    def _wait_ready(self, deadline: float) -> None:
        want_p, want_d = cmds.expected_counts(self.svc)
        got, last = (0, 0), "no answer yet"
        while True:
            self._check_alive()
            try:
                with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
                        self.health_url, timeout=5) as resp:
                    got = registered(json.loads(resp.read() or b"{}"))
                    last = f"HTTP {resp.status}"
            except (OSError, ValueError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            if got[0] >= want_p and got[1] >= want_d:
                return
            if time.monotonic() > deadline:
                raise NelError(self._not_registered(got, (want_p, want_d), last))
            time.sleep(_POLL_S)

    def _check_alive(self) -> None:
        for proc in [*self._infra, *([self._frontend] if self._frontend else [])]:
            if not proc.is_running():
                raise NelError(f"{proc.name} exited with status {proc.stop()}; {proc.log_path} "
                               f"ends with:\n{_tail(proc.log_path)}")
        gone = self.workers.exited()
        if gone is not None:
            w, proc = gone
            raise NelError(f"its {w.label} worker exited with status {proc.stop()}; {proc.log_path} "
                           f"ends with:\n{_tail(proc.log_path)}")
        for role, pool in self.away.items():
            assert self.rendezvous is not None
            err = self.rendezvous / f"{role_key(self.name, role)}.error"
            if err.exists():
                raise NelError(f"its {role} workers on node pool {pool}: {err.read_text().strip()}")

    def _not_registered(self, got: tuple[int, int], want: tuple[int, int], last: str) -> str:
        short = []
        logs: list[Path] = []
        for role, n, k in (("prefill", got[0], want[0]), ("decode", got[1], want[1])):
            if n < k:
                role_here = "backend" if want[0] == 0 else role
                short.append(f"{n} of {k} {role_here} worker(s)")
                logs += self.workers.logs(role_here)
                if role in self.away and self.rendezvous is not None:
                    logs += sorted(self.rendezvous.glob(f"{self.name}@{role}.*.log"))
        msg = (f"after {self.svc.startup_timeout:g} s the Dynamo frontend at {self.health_url} counts "
               f"{' and '.join(short)} registered (last: {last})")
        for log in logs[:2]:
            msg += f"; {log} ends with:\n{_tail(log)}"
        return msg

    def stop(self) -> None:
        """Stop the workers, then the frontend, etcd and NATS (idempotent); logs are kept."""
        self.workers.stop()
        for proc in [*([self._frontend] if self._frontend else []), *reversed(self._infra)]:
            proc.stop()
        if self.rendezvous is not None:
            (self.rendezvous / f"{self.name}{RENDEZVOUS_SUFFIX}").unlink(missing_ok=True)
