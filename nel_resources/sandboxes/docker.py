"""The `docker` sandbox: one container per sandbox, kept warm and reused between sandboxes.

Every container is locked down the same way: read-only root filesystem, the workdir and
`/tmp` as size-capped tmpfs, all capabilities dropped, `no-new-privileges`, a pids limit,
a memory limit (swap included), CPU quota, per-process ulimits (CPU seconds, data size,
file size, open files, no core files), an unprivileged user (65534, `nobody`), and no
network (`--network none`) unless the config names one. Nothing of nel's environment is
passed in: a command sees the image's environment plus the spec's and config's variables.

Warm reuse: starting a container costs about as much as running a short program in it, so
when a sandbox stops its container is wiped (every process killed, workdir and /tmp
emptied) and kept for the next sandbox with the same image and volumes; a container that
cannot be wiped is removed. NeMo Evaluator 0.3.0 starts and removes one container per
sandbox; `bench/bench_sandboxes.py` measures the difference.

Talks to the engine with the `docker` CLI (DOCKER_HOST as set in nel's environment). No
Dagster here.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from nel_resources.sandboxes.base import ExecResult, SandboxError, SandboxSpec, StopReason
from nel_resources.sandboxes.capture import capture
from nel_resources.sandboxes.limits import Limits, stop_reason
from nel_resources.sandboxes.slots import SlotPool

if TYPE_CHECKING:
    from nel_resources.config import SandboxConfig

#: The unprivileged user commands run as (`nobody` in Debian-based images; numeric, so it
#: works in images that have no such account).
SANDBOX_USER = "65534:65534"
#: Label on every container nel starts, with the pid of the nel process that owns it.
LABEL = "nel.sandbox.owner"
#: PID 1 of a sandbox container: stays up and reaps orphans (a shell's `wait` collects
#: any child, adopted ones included), so leftover processes never fill the pids limit.
_KEEPER = "trap 'exit 0' TERM; while :; do sleep 86400 & wait; done"
#: Run as the sandbox user: kill every process but PID 1 (three rounds, in case one was
#: forking during the first), then empty the writable places. Prints nothing on success.
_WIPE = ("for _ in 1 2 3; do kill -9 -1 2>/dev/null; done; "
         "for d in \"$@\"; do find \"$d\" -mindepth 1 -delete 2>/dev/null; "
         "[ -z \"$(ls -A \"$d\")\" ] || echo \"not empty: $d\"; done")
_ENGINE_CALL_TIMEOUT_S = 120.0


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
class DockerSandboxFactory:
    """Makes `docker` sandboxes; at most `concurrency` containers are in use at once, and up
    to `concurrency` wiped ones wait warm for the next sandbox."""

    image: str | None = None
    limits: Limits = field(default_factory=Limits)
    cpus: float | None = 1.0
    #: `none` unless the config sets one (NeMo Evaluator's default is `bridge`)
    network: str = "none"
    concurrency_: int = 4
    max_timeout: float = 1800.0
    base_env: dict[str, str] = field(default_factory=dict)
    #: keep wiped containers for the next sandbox (False: one container per sandbox)
    reuse: bool = True

    def __post_init__(self) -> None:
        docker_cli()
        self._slots = SlotPool(self.concurrency_)
        self._idle: dict[_Shape, list[str]] = {}
        self._live: set[str] = set()
        self._tag = f"{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._seq = 0

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
        ids = [c for cs in self._idle.values() for c in cs] + list(self._live)
        self._idle.clear()
        self._live.clear()
        if ids:
            await _docker("rm", "-f", *ids)

    # -- containers --------------------------------------------------------------------

    async def _take(self, shape: _Shape) -> str:
        idle = self._idle.get(shape)
        if idle:
            cid = idle.pop()
        else:
            cid = await self._run(shape)
        self._live.add(cid)
        return cid

    async def _give_back(self, shape: _Shape, cid: str) -> None:
        self._live.discard(cid)
        if self.reuse and await self._wipe(shape, cid):
            self._idle.setdefault(shape, []).append(cid)
            return
        await _docker("rm", "-f", cid)

    async def _wipe(self, shape: _Shape, cid: str) -> bool:
        code, out, _ = await _docker("exec", "-u", SANDBOX_USER, cid, "sh", "-c", _WIPE, "sh",
                                     shape.workdir, "/tmp")
        return code == 0 and not out.strip()

    async def _kill_all(self, cid: str) -> None:
        """Kill every process in the container but its PID 1 (after a timeout or output cap:
        what the command left running must not go on)."""
        await _docker("exec", "-u", SANDBOX_USER, cid, "sh", "-c",
                      "for _ in 1 2 3; do kill -9 -1 2>/dev/null; done; true")

    async def _run(self, shape: _Shape) -> str:
        lim = self.limits
        self._seq += 1
        scratch = f"size={lim.scratch_bytes},nosuid,nodev,exec"
        args = ["run", "-d", "--pull", "never", "--name", f"nel-sandbox-{self._tag}-{self._seq}",
                "--label", f"{LABEL}={os.getpid()}",
                "--read-only", "--security-opt", "no-new-privileges", "--cap-drop", "ALL",
                "--user", SANDBOX_USER, "--network", self.network,
                "--pids-limit", str(lim.max_processes),
                "--memory", str(lim.memory_bytes), "--memory-swap", str(lim.memory_bytes),
                "--ulimit", f"cpu={lim.cpu_time_s}:{lim.cpu_time_s + 1}",
                "--ulimit", f"data={lim.memory_bytes}",
                "--ulimit", f"fsize={lim.max_file_bytes}",
                "--ulimit", f"nofile={lim.max_open_files}", "--ulimit", "core=0",
                "--tmpfs", f"{shape.workdir}:{scratch},mode=0700,uid=65534,gid=65534",
                "--tmpfs", f"/tmp:{scratch},mode=1777",
                "-w", shape.workdir]
        if self.cpus:
            args += ["--cpus", str(self.cpus)]
        for host, inside, ro in shape.volumes:
            args += ["-v", f"{host}:{inside}{':ro' if ro else ''}"]
        args += [shape.image, "sh", "-c", _KEEPER]
        code, out, err = await _docker(*args)
        if code != 0:
            raise SandboxError(f"docker could not start a sandbox from image {shape.image!r}: "
                               f"{err.strip().splitlines()[-1] if err.strip() else 'no reason given'}")
        return out.strip()


class DockerSandbox:
    """One container (fresh or wiped) held from `start` to `stop`."""

    def __init__(self, factory: DockerSandboxFactory, spec: SandboxSpec, image: str) -> None:
        self._f = factory
        self._spec = spec
        self._shape = _Shape(image, spec.workdir, tuple(
            (v.host_path, v.container_path, v.readonly) for v in spec.volumes))
        self._slot: int | None = None
        self._cid: str | None = None
        self._running: set[asyncio.subprocess.Process] = set()

    @property
    def spec(self) -> SandboxSpec:
        """What this sandbox was made for."""
        return self._spec

    @property
    def container_id(self) -> str | None:
        """The container behind the sandbox while it is alive."""
        return self._cid

    async def start(self) -> None:
        """Take a slot and a container (a warm one if any), write `spec.files`."""
        if self._slot is not None:
            raise SandboxError("this sandbox was already started")
        self._slot = await self._f._slots.acquire()
        try:
            self._cid = await self._f._take(self._shape)
            for rel, content in self._spec.files.items():
                await self._put(rel, content.encode())
        except BaseException:
            await self.stop()
            raise

    async def exec(self, command: str | list[str], timeout_sec: float = 180, *,
                   cwd: str | None = None, env: dict[str, str] | None = None,
                   stdin: bytes | None = None, output_limit: int = 1 << 20) -> ExecResult:
        """Run `command` as the sandbox user; never raises for what it does."""
        cid = self._need()
        args = ["exec", "-u", SANDBOX_USER, "-w", self._inside(cwd) if cwd else self._spec.workdir]
        if stdin is not None:
            args.append("-i")
        for k, v in {**self._f.base_env, **self._spec.env, **(env or {})}.items():
            args += ["-e", f"{k}={v}"]
        args.append(cid)
        args += ["sh", "-c", command] if isinstance(command, str) else list(command)
        timeout = min(float(timeout_sec), self._f.max_timeout)
        began = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            docker_cli(), *args, start_new_session=True,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        self._running.add(proc)

        async def kill() -> None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            # The CLI's death does not stop the command inside: kill it there.
            await self._f._kill_all(cid)
        try:
            got = await capture(proc, stdin=stdin, timeout=timeout, output_limit=output_limit,
                                kill=kill)
        finally:
            self._running.discard(proc)
        stopped: StopReason | None
        if got.timed_out:
            stopped, code = "timeout", -1
        elif got.over_cap:
            stopped, code = "output_limit", -1
        else:
            code = got.return_code if got.return_code is not None else -1
            stopped = stop_reason(code, got.stderr)
            if code != 0 and got.stderr.startswith(b"Error response from daemon"):
                raise SandboxError(f"docker exec failed: {got.stderr.decode(errors='replace').strip()}")
        return ExecResult(got.stdout.decode(errors="replace"), got.stderr.decode(errors="replace"),
                          code, stopped=stopped, truncated=got.over_cap,
                          duration_s=time.monotonic() - began)

    async def upload(self, local_path: Path, remote_path: str) -> None:
        """Copy a host file in, through the command's stdin (never its command line)."""
        self._need()
        await self._put(remote_path, Path(local_path).read_bytes())

    async def download(self, remote_path: str, local_path: Path) -> None:
        """Copy a regular file out (a symlink is refused, as in the local sandbox)."""
        cid = self._need()
        local_path = Path(local_path)
        local_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = local_path.with_name(local_path.name + ".part")
        with open(tmp, "wb") as out:
            proc = await asyncio.create_subprocess_exec(
                docker_cli(), "exec", "-u", SANDBOX_USER, cid, "sh", "-c",
                '[ -f "$1" ] && [ ! -L "$1" ] || { echo "no regular file $1" >&2; exit 3; }; '
                'exec cat -- "$1"', "sh", self._inside(remote_path),
                start_new_session=True, stdin=asyncio.subprocess.DEVNULL, stdout=out,
                stderr=asyncio.subprocess.PIPE)
            _, err = await asyncio.wait_for(proc.communicate(), _ENGINE_CALL_TIMEOUT_S)
        if proc.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise SandboxError(f"could not download {remote_path!r} from the sandbox: "
                               f"{err.decode(errors='replace').strip()}")
        tmp.replace(local_path)

    async def stop(self) -> None:
        """Kill what runs, give the container back (wiped) or remove it. Idempotent."""
        for proc in list(self._running):
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        if self._cid is not None:
            cid, self._cid = self._cid, None
            await self._f._give_back(self._shape, cid)
        if self._slot is not None:
            slot, self._slot = self._slot, None
            self._f._slots.release(slot)

    # -- internals ---------------------------------------------------------------------

    def _need(self) -> str:
        if self._cid is None:
            raise SandboxError("the sandbox is not started")
        return self._cid

    def _inside(self, path: str) -> str:
        p = PurePosixPath(path)
        return str(p if p.is_absolute() else PurePosixPath(self._spec.workdir) / p)

    async def _put(self, remote: str, data: bytes) -> None:
        code, _, err = await _docker(
            "exec", "-i", "-u", SANDBOX_USER, self._need(), "sh", "-c",
            'mkdir -p -- "$(dirname -- "$1")" && [ ! -L "$1" ] && cat > "$1"', "sh",
            self._inside(remote), stdin=data)
        if code != 0:
            raise SandboxError(f"could not upload to {remote!r} in the sandbox: "
                               f"{err.strip() or 'a symlink is in the way'}")


def build(cfg: SandboxConfig, limits: Limits | None = None) -> DockerSandboxFactory:
    """A `docker` factory from its config block: `image`, `memory`, `cpus`, `network`
    (`none` unless set), `timeout` (the most any one command may run), `concurrency`,
    `container_env`."""
    if cfg.image_template:
        raise SandboxError("`image_template` is not supported by nel's docker sandbox yet: "
                           "set `image:` (or return the image in the benchmark's SandboxSpec)")
    network = cfg.network if "network" in cfg.model_fields_set else "none"
    return DockerSandboxFactory(image=cfg.image, limits=Limits.from_config(cfg.memory, base=limits),
                                cpus=cfg.cpus if cfg.cpus is not None else 1.0, network=network,
                                concurrency_=cfg.concurrency, max_timeout=cfg.timeout,
                                base_env=dict(cfg.container_env))
