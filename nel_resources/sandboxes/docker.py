"""The `docker` sandbox: one container per sandbox, kept warm and reused between sandboxes.

Every container is locked down the same way: read-only root filesystem, all capabilities
dropped, `no-new-privileges`, a pids limit, a memory limit (swap included), CPU quota,
per-process ulimits (CPU seconds, data size, file size, open files, no core files), no
System V or POSIX IPC objects (they would outlive a sample), an
unprivileged user (65534, `nobody`, when nel runs as root; else nel's own uid), and no
network (`--network none`) unless the config names one. Nothing of nel's environment is
passed in: a command sees the image's environment plus the spec's and config's variables.
The only writable places are the workdir, /tmp and /dev/shm, host directories nel makes for
the container and bind-mounts (the engine must run on this host, as `deploy/docker/
start_engine.sh` starts it): files move in and out by nel's own file copies, never through
a command line, and wiping them needs no call to the engine.

Warm reuse: starting a container costs several times a short program's run, so when a
sandbox stops its container is kept for the next sandbox with the same image and volumes:
its workdir, /tmp and /dev/shm are emptied, and if anything is still running in it (its cgroup
counts more than the keeper's two processes, or the count cannot be read) every process
but PID 1 is killed first. A container that cannot be made clean is removed. NeMo
Evaluator 0.3.0 starts and removes one container per sandbox; `bench/bench_sandboxes.py`
measures the difference.

Commands run through the engine's HTTP API on its unix socket (`docker_api`); containers
are started and removed, and commands with stdin run, with the `docker` CLI (DOCKER_HOST as
set in nel's environment). No Dagster here.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from nel_resources.sandboxes.base import ExecResult, SandboxError, SandboxSpec
from nel_resources.sandboxes.capture import capture
from nel_resources.sandboxes.docker_api import ApiExec, EngineError, engine_socket
from nel_resources.sandboxes.hostfiles import HostFiles, empty_dir
from nel_resources.sandboxes.limits import Limits
from nel_resources.sandboxes.slots import SlotPool

if TYPE_CHECKING:
    from nel_resources.config import SandboxConfig

#: The unprivileged user commands run as when nel runs as root (`nobody` in Debian-based
#: images; numeric, so it works in images that have no such account).
NOBODY = 65534
#: Label on every container nel starts, with the pid of the nel process that owns it.
LABEL = "nel.sandbox.owner"
#: PID 1 of a sandbox container: stays up and reaps orphans (a shell's `wait` collects
#: any child, adopted ones included), so leftover processes never fill the pids limit.
#: It ignores the signals a program could send it (SIGKILL from inside is ignored by
#: the kernel for a PID 1), so only the engine ends it.
_KEEPER = "trap '' TERM INT HUP QUIT USR1 USR2; while :; do sleep 86400 & wait; done"
#: Run as the sandbox user: kill every process but PID 1 and this shell (three rounds, in
#: case one was forking during the first).
_KILL_ALL = "for _ in 1 2 3; do kill -9 -1 2>/dev/null; done; true"
#: Namespaced sysctls that leave a container's IPC namespace unable to hold anything.
_NO_IPC_OBJECTS = ("--sysctl", "kernel.shmall=0", "--sysctl", "kernel.msgmni=0",
                   "--sysctl", "kernel.sem=0 0 0 0", "--sysctl", "fs.mqueue.queues_max=0")
#: Processes in a container at rest: the keeper shell and its `sleep`.
_AT_REST = 2
_ENGINE_CALL_TIMEOUT_S = 120.0
#: How long killed processes may take to leave a container's cgroup before it is removed.
_SETTLE_S = 5.0


@cache
def docker_cli() -> str:
    """The docker client (Debian's, which matches the engine `deploy/docker/start_engine.sh`
    starts, before any other on PATH)."""
    for cand in ("/usr/bin/docker", shutil.which("docker")):
        if cand and os.access(cand, os.X_OK):
            return cand
    raise SandboxError("the docker sandbox needs the docker CLI and engine: run "
                       "`deploy/docker/start_engine.sh` and export the DOCKER_HOST it prints")


async def _docker(*args: str, stdin: bytes | None = None,
                  timeout: float = _ENGINE_CALL_TIMEOUT_S) -> tuple[int, str, str]:
    """One docker CLI call to its end: (status, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        docker_cli(), *args, start_new_session=True,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        return -1, "", f"docker {args[0]} did not answer within {timeout:.0f} s"
    return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")


@dataclass(frozen=True)
class _Shape:
    """What makes two sandboxes' containers interchangeable."""

    image: str
    workdir: str
    volumes: tuple[tuple[str, str, bool], ...]


@dataclass
class _Box:
    """One started container and the host directories bound as its workdir and /tmp."""

    cid: str
    work: Path
    tmp: Path
    shm: Path
    #: the container's cgroup process count, when the engine's layout is known
    pids_current: Path | None

    def at_rest(self) -> bool | None:
        """Nothing but the keeper runs (None: cannot tell)."""
        if self.pids_current is None:
            return None
        try:
            return int(self.pids_current.read_text()) <= _AT_REST
        except (OSError, ValueError):
            return None


def _pids_file(cid: str) -> Path | None:
    for cand in (f"/sys/fs/cgroup/pids/docker/{cid}/pids.current",  # v1, cgroupfs driver
                 f"/sys/fs/cgroup/docker/{cid}/pids.current",  # v2, cgroupfs driver
                 f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/pids.current",  # v2, systemd
                 f"/sys/fs/cgroup/pids/system.slice/docker-{cid}.scope/pids.current"):
        if os.path.exists(cand):
            return Path(cand)
    return None


@dataclass
class DockerSandboxFactory:
    """Makes `docker` sandboxes; at most `concurrency` containers are in use at once, and up
    to `concurrency` wiped ones wait warm for the next sandbox."""

    image: str | None = None
    limits: Limits = field(default_factory=Limits)
    cpus: float | None = 1.0
    #: `none` unless the config sets one (the config's own default; NeMo Evaluator's is `bridge`)
    network: str = "none"
    concurrency_: int = 4
    max_timeout: float = 1800.0
    base_env: dict[str, str] = field(default_factory=dict)
    #: keep wiped containers for the next sandbox (False: one container per sandbox)
    reuse: bool = True
    #: where the containers' host workdirs are made (default: the system temp dir)
    root: Path | None = None

    def __post_init__(self) -> None:
        docker_cli()
        self._slots = SlotPool(self.concurrency_)
        self._idle: dict[_Shape, list[_Box]] = {}
        self._live: dict[str, _Box] = {}
        self._tag = f"{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._seq = 0
        self._uid = NOBODY if os.geteuid() == 0 else os.getuid()
        self._gid = NOBODY if os.geteuid() == 0 else os.getgid()

    @property
    def user(self) -> str:
        """The uid:gid commands run as."""
        return f"{self._uid}:{self._gid}"

    @property
    def concurrency(self) -> int:
        """How many sandboxes may be alive at once."""
        return self.concurrency_

    @property
    def in_use(self) -> int:
        """Sandboxes alive right now."""
        return self._slots.in_use

    def create(self, spec: SandboxSpec) -> DockerSandbox:
        """A new, not yet started sandbox; its image is `spec.image`, else the config's."""
        image = spec.image or self.image
        if not image:
            raise SandboxError("a docker sandbox needs an image: set `image:` on the sandbox "
                               "(nothing is pulled: build or load it into the engine first)")
        return DockerSandbox(self, spec, image)

    async def aclose(self) -> None:
        """Remove every container this factory started (warm ones and any still in use)."""
        boxes = [b for bs in self._idle.values() for b in bs] + list(self._live.values())
        self._idle.clear()
        self._live.clear()
        if boxes:
            await _docker("rm", "-f", *(b.cid for b in boxes))
        for b in boxes:
            shutil.rmtree(b.work.parent, ignore_errors=True)

    # -- containers --------------------------------------------------------------------

    async def _take(self, shape: _Shape) -> _Box:
        idle = self._idle.get(shape)
        box = idle.pop() if idle else await self._run(shape)
        self._live[box.cid] = box
        return box

    async def _give_back(self, shape: _Shape, box: _Box) -> None:
        self._live.pop(box.cid, None)
        if self.reuse and await self._clean(box):
            self._idle.setdefault(shape, []).append(box)
            await self._trim_idle()
            return
        await _docker("rm", "-f", box.cid)
        shutil.rmtree(box.work.parent, ignore_errors=True)

    async def _trim_idle(self) -> None:
        # At most `concurrency` containers wait warm: a shape seen once (a sample's own
        # volumes, e.g. a Harbor task's scratch /tests and /logs) is never reused, so
        # without a bound they would pile up until the factory closes. The earliest shape's oldest goes first.
        while sum(map(len, self._idle.values())) > self.concurrency_:
            shape = next(iter(self._idle))
            old = self._idle[shape].pop(0)
            if not self._idle[shape]:
                del self._idle[shape]
            await _docker("rm", "-f", old.cid)
            shutil.rmtree(old.work.parent, ignore_errors=True)

    async def _clean(self, box: _Box) -> bool:
        """Make a used container as good as new: nothing running, workdir, /tmp and
        /dev/shm empty."""
        if box.at_rest() is not True and not await self.kill_all(box.cid, box):
            return False
        return empty_dir(box.work) and empty_dir(box.tmp) and empty_dir(box.shm)

    async def kill_all(self, cid: str, box: _Box | None = None) -> bool:
        """End every process in the container but the keeper (after a timeout or output cap,
        and before reuse: what a command left running must not go on). True if it is at
        rest afterwards.

        A `kill -9 -1` inside is cheap, but cannot run when a fork bomb holds every pid the
        limit allows; then the container is restarted (`docker kill` ends its PID
        namespace at once; its workdir and /tmp are host directories and survive)."""
        box = box or self._live.get(cid)
        code, _, _ = await _docker("exec", "-u", self.user, cid, "sh", "-c", _KILL_ALL,
                                   timeout=_SETTLE_S)
        if code == 0 and box is not None and await self._settled(box):
            return True
        if code == 0 and box is not None and box.pids_current is None:
            return True  # nothing to check against: the kill ran
        await _docker("kill", "-s", "KILL", cid)
        # `docker kill` returns once the signal is sent: a `start` before the container has
        # stopped is a no-op, and the next exec then found it stopped ("is not running").
        await _docker("wait", cid)
        code, _, _ = await _docker("start", cid)
        if code != 0 or not await self._accepts_exec(cid):
            return False
        return box is None or await self._settled(box) or box.pids_current is None

    async def _accepts_exec(self, cid: str) -> bool:
        """Wait until a restarted container runs commands: on a busy engine `docker start`
        returned while runc still saw the task stopped, and the sample's next exec failed
        with "cannot exec in a stopped state" (a CI run's docker fork-bomb drill)."""
        deadline = time.monotonic() + _SETTLE_S
        while True:
            code, _, _ = await _docker("exec", "-u", self.user, cid, "true", timeout=_SETTLE_S)
            if code == 0:
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.05)

    async def _settled(self, box: _Box) -> bool:
        # Killed processes leave the cgroup as the kernel reaps them: give it a moment.
        deadline = time.monotonic() + _SETTLE_S
        while box.at_rest() is False and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return box.at_rest() is not False

    async def _run(self, shape: _Shape) -> _Box:
        lim = self.limits
        self._seq += 1
        home = Path(tempfile.mkdtemp(prefix="nel-docker-sandbox-", dir=self.root))
        home.chmod(0o755)  # the container's user must reach the two directories inside
        work, tmp, shm = home / "work", home / "tmp", home / "shm"
        for d in (work, tmp, shm):
            d.mkdir(mode=0o700)
            os.chown(d, self._uid, self._gid)
        args = ["run", "-d", "--pull", "never", "--name", f"nel-sandbox-{self._tag}-{self._seq}",
                "--label", f"{LABEL}={os.getpid()}",
                "--read-only", "--security-opt", "no-new-privileges", "--cap-drop", "ALL",
                "--user", self.user, "--network", self.network,
                "--pids-limit", str(lim.max_processes),
                "--memory", str(lim.memory_bytes), "--memory-swap", str(lim.memory_bytes),
                "--ulimit", f"cpu={lim.cpu_time_s}:{lim.cpu_time_s + 1}",
                # below the cgroup's limit: a program's own allocations fail (MemoryError)
                # before the kernel starts reclaiming and thrashing at the cgroup's edge
                "--ulimit", f"data={lim.memory_bytes - min(64 << 20, lim.memory_bytes // 8)}",
                "--ulimit", f"fsize={lim.max_file_bytes}",
                "--ulimit", f"nofile={lim.max_open_files}", "--ulimit", "core=0",
                "-v", f"{work}:{shape.workdir}", "-v", f"{tmp}:/tmp",
                # The engine's own /dev/shm tmpfs would outlive a sample in a warm
                # container: a host directory is wiped with the workdir and /tmp instead.
                "-v", f"{shm}:/dev/shm",
                # No System V segments, message queues or semaphore sets and no POSIX
                # message queues: they live in the container's IPC namespace, not in a
                # directory, and would pass from one sample to the next. (multiprocessing's
                # locks are POSIX semaphores: files in /dev/shm, which still work.)
                *_NO_IPC_OBJECTS,
                "-w", shape.workdir]
        if self.cpus:
            args += ["--cpus", str(self.cpus)]
        for host, inside, ro in shape.volumes:
            args += ["-v", f"{host}:{inside}{':ro' if ro else ''}"]
        args += [shape.image, "sh", "-c", _KEEPER]
        code, out, err = await _docker(*args)
        if code != 0:
            shutil.rmtree(home, ignore_errors=True)
            raise SandboxError(f"docker could not start a sandbox from image {shape.image!r}: "
                               f"{err.strip().splitlines()[-1] if err.strip() else 'no reason given'}")
        cid = out.strip()
        return _Box(cid, work, tmp, shm, _pids_file(cid))


class DockerSandbox:
    """One container (fresh or wiped) held from `start` to `stop`."""

    def __init__(self, factory: DockerSandboxFactory, spec: SandboxSpec, image: str) -> None:
        self._f = factory
        self._spec = spec
        self._shape = _Shape(image, spec.workdir, tuple(
            (v.host_path, v.container_path, v.readonly) for v in spec.volumes))
        self._slot: int | None = None
        self._box: _Box | None = None
        self._running: set[asyncio.subprocess.Process | ApiExec] = set()

    @property
    def spec(self) -> SandboxSpec:
        """What this sandbox was made for."""
        return self._spec

    @property
    def container_id(self) -> str | None:
        """The container behind the sandbox while it is alive."""
        return self._box.cid if self._box else None

    async def start(self) -> None:
        """Take a slot and a container (a warm one if any), write `spec.files`."""
        if self._slot is not None:
            raise SandboxError("this sandbox was already started")
        self._slot = await self._f._slots.acquire()
        try:
            self._box = await self._f._take(self._shape)
            files = self._files()
            for rel, content in self._spec.files.items():
                files.write(rel, content.encode())
        except BaseException:
            await self.stop()
            raise

    async def exec(self, command: str | list[str], timeout_sec: float = 180, *,
                   cwd: str | None = None, env: dict[str, str] | None = None,
                   stdin: bytes | None = None, output_limit: int = 1 << 20) -> ExecResult:
        """Run `command` as the sandbox user; never raises for what it does."""
        cid = self._need().cid
        workdir = self._files().inside(cwd) if cwd else self._spec.workdir
        all_env = {**self._f.base_env, **self._spec.env, **(env or {})}
        argv = ["sh", "-c", command] if isinstance(command, str) else list(command)
        timeout = min(float(timeout_sec), self._f.max_timeout)
        began = time.monotonic()
        sock = engine_socket() if stdin is None else None
        proc: asyncio.subprocess.Process | ApiExec
        if sock is not None:  # the engine's API directly: no CLI process per command
            try:
                proc = await ApiExec.start(sock, cid, argv, user=self._f.user, workdir=workdir,
                                           env=all_env)
            except EngineError as e:
                # A container restarted after a fork bomb (kill_all) can still be stopping when
                # the engine first reports it started: start it again, once, and retry. Its
                # workdir and /tmp are host directories and survive.
                if "is not running" not in str(e) and "stopped state" not in str(e):
                    raise SandboxError(str(e)) from None
                await _docker("start", cid)
                if not await self._f._accepts_exec(cid):
                    raise SandboxError(str(e)) from None
                try:
                    proc = await ApiExec.start(sock, cid, argv, user=self._f.user,
                                               workdir=workdir, env=all_env)
                except EngineError as again:
                    raise SandboxError(str(again)) from None
        else:
            args = ["exec", "-u", self._f.user, "-w", workdir]
            if stdin is not None:
                args.append("-i")
            for k, v in all_env.items():
                args += ["-e", f"{k}={v}"]
            proc = await asyncio.create_subprocess_exec(
                docker_cli(), *args, cid, *argv, start_new_session=True,
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        self._running.add(proc)

        async def kill() -> None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            # Ending the client does not stop the command inside: kill it there.
            await self._f.kill_all(cid)
        try:
            got = await capture(proc, stdin=stdin, timeout=timeout,  # type: ignore[arg-type]
                                output_limit=output_limit, kill=kill)
        finally:
            self._running.discard(proc)
            if isinstance(proc, ApiExec):
                await proc.aclose()
        code, stopped = got.outcome()
        if not got.timed_out and not got.over_cap and code != 0 \
                and got.stderr.startswith(b"Error response from daemon"):
            raise SandboxError(f"docker exec failed: {got.stderr.decode(errors='replace').strip()}")
        return got.result(began, code, stopped)

    async def upload(self, local_path: Path, remote_path: str) -> None:
        """Copy a host file into the sandbox's workdir, /tmp or a volume."""
        self._files().write(remote_path, Path(local_path).read_bytes())

    async def download(self, remote_path: str, local_path: Path) -> None:
        """Copy a regular file out (a symlink is refused, as in the local sandbox)."""
        self._files().read_to(remote_path, local_path)

    async def stop(self) -> None:
        """Kill what runs, give the container back (wiped) or remove it. Idempotent."""
        for proc in list(self._running):
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        if self._box is not None:
            box, self._box = self._box, None
            await self._f._give_back(self._shape, box)
        if self._slot is not None:
            slot, self._slot = self._slot, None
            self._f._slots.release(slot)

    # -- internals ---------------------------------------------------------------------

    def _need(self) -> _Box:
        if self._box is None:
            raise SandboxError("the sandbox is not started")
        return self._box

    def _files(self) -> HostFiles:
        box = self._need()
        roots = ((self._spec.workdir, box.work), ("/tmp", box.tmp),
                 *((v.container_path, Path(v.host_path)) for v in self._spec.volumes))
        return HostFiles(roots, self._spec.workdir, NOBODY if os.geteuid() == 0 else None)


def build(cfg: SandboxConfig, limits: Limits | None = None) -> DockerSandboxFactory:
    """A `docker` factory from its config block: `image`, `memory`, `cpus`, `network`
    (`none` unless set), `timeout` (the most any one command may run), `concurrency`,
    `container_env`."""
    if cfg.image_template:
        raise SandboxError("`image_template` is not supported by nel's docker sandbox yet: "
                           "set `image:` (or return the image in the benchmark's SandboxSpec)")
    return DockerSandboxFactory(image=cfg.image, limits=Limits.from_config(cfg.memory, base=limits),
                                cpus=cfg.cpus if cfg.cpus is not None else 1.0, network=cfg.network,
                                concurrency_=cfg.concurrency, max_timeout=cfg.timeout,
                                base_env=dict(cfg.container_env))


def preflight(cfg: SandboxConfig) -> None:
    """Before any model request: the engine answers and holds `cfg.image` (nothing is pulled,
    so a missing image would otherwise fail every sample after requests were paid for).

    Raises:
        SandboxError: one line naming the image, or saying how to start the engine.
    """
    if not cfg.image:
        return  # the benchmark's SandboxSpec names it per sample; checked at start
    try:
        proc = subprocess.run([docker_cli(), "image", "inspect", "--format", "{{.Id}}", cfg.image],
                              capture_output=True, text=True, timeout=_ENGINE_CALL_TIMEOUT_S,
                              start_new_session=True)
    except subprocess.TimeoutExpired:
        raise SandboxError("the Docker engine did not answer within "
                           f"{_ENGINE_CALL_TIMEOUT_S:.0f} s (is DOCKER_HOST right?)") from None
    if proc.returncode == 0:
        return
    err = (proc.stderr or "").strip().splitlines()
    if any("No such image" in line or "No such object" in line for line in err):
        raise SandboxError(f"the docker sandbox's image {cfg.image!r} is not in the Docker engine: "
                           "build or load it first (nothing is pulled)")
    raise SandboxError(f"the docker sandbox cannot reach the Docker engine ({err[-1] if err else 'no answer'}): "
                       "run `deploy/docker/start_engine.sh` and export the DOCKER_HOST it prints")
