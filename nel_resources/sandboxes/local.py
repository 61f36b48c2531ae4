"""The `local` sandbox: model-written code on this machine, inside bubblewrap.

Each sandbox is one host directory, bound read-write at `spec.workdir`; every command
runs in fresh user, PID, network, IPC and UTS namespaces (`bwrap --unshare-all`), so it
sees no network (not even the host's 127.0.0.1), no host process, and no host file but
the read-only system directories a program needs (`/usr` and the Python installation).
The environment is built from scratch: nothing of nel's (API keys included) is passed on.

A sample's total is bounded, not only each process: all its commands run in one memory
cgroup of `memory` bytes (see `memcg`), which also counts the tmpfs pages it writes; its
workdir is a tmpfs of `scratch_bytes` mounted on the host directory (root only, see
`tmpfs`), and each command gets its own `/tmp` and `/dev/shm` tmpfs of that size, so a
full disk is ENOSPC inside the sandbox and nothing of it survives into the next sample.
Where no cgroup can be made, the total is bounded by rlimits instead: at most
`FALLBACK_PROCESSES` processes of `memory / FALLBACK_PROCESSES` address space each.
Per-process rlimits are set *inside* the namespaces (so the process count is counted
per sandbox, not per host user): address space, CPU seconds, processes, file size, open
files, no core files. When the command ends, is killed at its timeout or passes the output
cap, bubblewrap's PID 1 dies and the kernel kills everything left in the namespace, so no
background process outlives a command. Run as root, nel also drops each sandbox to its
own unprivileged host uid (one per concurrency slot) before bubblewrap starts.

Needs the `bwrap` binary (Debian package `bubblewrap`, installed by
`deploy/install_system_deps.sh`). No Dagster here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from nel_resources.sandboxes.base import ExecResult, SandboxError, SandboxSpec
from nel_resources.sandboxes.capture import capture
from nel_resources.sandboxes.hostfiles import HostFiles
from nel_resources.sandboxes.limits import Limits
from nel_resources.sandboxes.memcg import MemoryCgroup, memcg_base
from nel_resources.sandboxes.slots import SlotPool
from nel_resources.sandboxes.tmpfs import can_mount, mount_tmpfs, unmount

if TYPE_CHECKING:
    from nel_resources.config import SandboxConfig

#: Host uids for sandboxes when nel runs as root: per process and slot, far above any
#: real account (uids up to 2**31 are valid; 1000 slots per nel process).
_UID_BASE = 1_000_000_000
_SLOTS_PER_PROCESS = 1000
#: A sample's memory (processes and tmpfs pages) when the config sets no `memory`.
DEFAULT_MEMORY_BYTES = 2 << 30
#: Without a memory cgroup: at most this many processes (and threads) per command, each
#: with `memory / FALLBACK_PROCESSES` bytes of address space, so their sum stays `memory`.
FALLBACK_PROCESSES = 16
_log = logging.getLogger("nel.sandbox")


@dataclass(frozen=True)
class HostPython:
    """The interpreter `python3` means inside the sandbox, and what must be bound for it."""

    bin_dir: str
    binds: tuple[str, ...] = ()


@cache
def host_python() -> HostPython:
    """The host's python3: Debian's `/usr/bin/python3` when present (bound with `/usr`),
    else the interpreter `python3` on PATH resolves to (a pyenv shim is followed to the
    real installation, whose prefix is bound read-only)."""
    if os.access("/usr/bin/python3", os.X_OK):
        return HostPython("/usr/bin")
    exe = shutil.which("python3")
    if exe is None:
        raise SandboxError("the local sandbox found no python3 on this machine")
    out = subprocess.run([exe, "-c", "import sys; print(sys.executable); print(sys.base_prefix)"],
                         capture_output=True, text=True, timeout=60, check=False)
    lines = out.stdout.split()
    if out.returncode != 0 or len(lines) != 2:
        raise SandboxError(f"the local sandbox could not locate python3's installation: "
                           f"{out.stderr.strip()[-300:]}")
    real, prefix = (os.path.realpath(p) for p in lines)
    binds = () if prefix.startswith("/usr/") else (prefix,)
    return HostPython(os.path.dirname(real), binds)


@cache
def bwrap_path() -> str:
    """The bubblewrap binary, or a one-line error saying how to install it."""
    found = shutil.which("bwrap")
    if found is None:
        raise SandboxError("the local sandbox needs bubblewrap (`bwrap`): install the Debian "
                           "package `bubblewrap` (`make system-deps` does)")
    return found


def bwrap_argv(*, uid: int | None, binds: Iterable[str], scratch_bytes: int, host_dir: Path,
               spec: SandboxSpec, chdir: str) -> list[str]:
    """The command line that puts what follows it (after the trailing `--`) in a bubblewrap
    box: fresh namespaces with no network and no host process, the read-only system
    directories and Python, a private /tmp of `scratch_bytes`, `host_dir` as the workdir and
    the spec's volumes; with `uid`, dropped to that uid with no capabilities first. The local
    sandbox and the slurm sandbox's bare-node steps share it."""
    argv: list[str] = []
    if uid is not None:
        argv += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                 "--inh-caps=-all", "--"]
    argv += [bwrap_path(), "--die-with-parent", "--unshare-all", "--unshare-user",
             "--disable-userns", "--new-session", "--hostname", "sandbox",
             "--ro-bind", "/usr", "/usr"]
    for top in ("bin", "lib", "lib32", "lib64", "libx32", "sbin"):
        host = Path("/") / top
        if host.is_symlink():
            argv += ["--symlink", os.readlink(host), f"/{top}"]
        elif host.is_dir():
            argv += ["--ro-bind", str(host), f"/{top}"]
    argv += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    for path in binds:
        argv += ["--ro-bind", path, path]
    # /tmp and /dev/shm: tmpfs private to this command and bounded (bwrap's /dev is not).
    argv += ["--proc", "/proc", "--dev", "/dev", "--size", str(scratch_bytes), "--tmpfs", "/tmp",
             "--size", str(scratch_bytes), "--tmpfs", "/dev/shm",
             "--bind", str(host_dir), spec.workdir]
    for vol in spec.volumes:
        argv += ["--ro-bind" if vol.readonly else "--bind", vol.host_path, vol.container_path]
    return [*argv, "--chdir", chdir, "--"]


def _check_reachable(path: Path, uid: int) -> None:
    """Refuse a volume the sandbox's own (unprivileged) uid cannot reach on the host:
    bubblewrap resolves it as that uid, so every parent must be searchable by others."""
    if not path.exists():
        raise SandboxError(f"sandbox volume {path} does not exist")
    for parent in [path.resolve(), *path.resolve().parents]:
        st = parent.stat()
        if st.st_uid != uid and not st.st_mode & 0o001:
            raise SandboxError(f"sandbox volume {path} is not reachable by the sandbox's "
                               f"user: {parent} is not searchable by others (chmod o+x it, "
                               "or put the volume under the system temp directory)")


@dataclass
class LocalSandboxFactory:
    """Makes `local` sandboxes; at most `concurrency` are alive at once."""

    limits: Limits = field(default_factory=lambda: Limits(memory_bytes=DEFAULT_MEMORY_BYTES))
    concurrency_: int = 4
    #: upper bound of any single command's wall-clock time, seconds
    max_timeout: float = 1800.0
    #: environment every command sees (the config's `container_env`), under `spec.env`
    base_env: dict[str, str] = field(default_factory=dict)
    #: where the per-sandbox host directories are made (default: the system temp dir)
    root: Path | None = None
    #: bound a sample's memory with a cgroup: None = where one can be made (else rlimits),
    #: False = rlimits only, True = a cgroup or a SandboxError
    cgroup: bool | None = None
    #: a tmpfs of `limits.scratch_bytes` as the workdir: None = when root, False = a plain
    #: host directory, True = the tmpfs or a SandboxError
    workdir_tmpfs: bool | None = None

    def __post_init__(self) -> None:
        bwrap_path()
        if self.concurrency_ > _SLOTS_PER_PROCESS:
            raise SandboxError(f"a local sandbox allows at most {_SLOTS_PER_PROCESS} "
                               f"concurrent sandboxes, got concurrency {self.concurrency_}")
        self._slots = SlotPool(self.concurrency_)
        self._python = host_python()
        self._drop_to_uid = os.geteuid() == 0
        self._probed = False
        self._memcg = memcg_base() if self.cgroup is not False else None
        if self.cgroup and self._memcg is None:
            raise SandboxError("the local sandbox could not create a memory cgroup (no writable "
                               "cgroup v2 or v1 memory hierarchy): run as root or delegate one")
        if self._memcg is None and self.cgroup is None:
            _log.warning("no writable memory cgroup: a local sandbox's total memory is bounded "
                         "by rlimits (%d processes of %d bytes each)", *self._fallback())
        self._tmpfs = can_mount() if self.workdir_tmpfs is not False else False
        if self.workdir_tmpfs and not self._tmpfs:
            raise SandboxError("the local sandbox could not mount a tmpfs workdir (needs root)")
        if not self._tmpfs and self.workdir_tmpfs is None:
            _log.warning("not root: a local sandbox's workdir is on the host disk, bounded per "
                         "file (%d bytes) but not in total", self.limits.max_file_bytes)

    def _fallback(self) -> tuple[int, int]:
        """(processes, address space each) when no cgroup bounds the total."""
        procs = min(self.limits.max_processes, FALLBACK_PROCESSES)
        return procs, self.limits.memory_bytes // procs

    @property
    def memory_enforcement(self) -> str:
        """How a sample's total memory is bounded: `cgroup v2`, `cgroup v1` or `rlimit`."""
        return f"cgroup v{self._memcg.version}" if self._memcg else "rlimit"

    @property
    def concurrency(self) -> int:
        """How many sandboxes may be alive at once."""
        return self.concurrency_

    @property
    def in_use(self) -> int:
        """Sandboxes alive right now."""
        return self._slots.in_use

    def create(self, spec: SandboxSpec) -> LocalSandbox:
        """A new, not yet started sandbox (`spec.image` is ignored: nothing to pull here)."""
        return LocalSandbox(self, spec)

    async def aclose(self) -> None:
        """Nothing is kept between sandboxes."""

    def _uid(self, slot: int) -> int:
        return _UID_BASE + (os.getpid() % 1_000_000) * _SLOTS_PER_PROCESS + slot


class LocalSandbox:
    """One host directory and the commands run against it (see the module docstring)."""

    def __init__(self, factory: LocalSandboxFactory, spec: SandboxSpec) -> None:
        self._f = factory
        self._spec = spec
        self._slot: int | None = None
        self._dir: Path | None = None
        self._running: set[asyncio.subprocess.Process] = set()
        self._cgroup: MemoryCgroup | None = None
        self._mounted = False

    @property
    def spec(self) -> SandboxSpec:
        """What this sandbox was made for."""
        return self._spec

    @property
    def host_workdir(self) -> Path | None:
        """The host directory behind `spec.workdir` while the sandbox is alive."""
        return self._dir

    @property
    def memory_peak_bytes(self) -> int | None:
        """The most memory this sample has held so far (its cgroup's peak: processes and
        tmpfs pages), or None without a cgroup."""
        return self._cgroup.peak_bytes() if self._cgroup else None

    async def start(self) -> None:
        """Take a concurrency slot, make the workdir and write `spec.files` into it."""
        if self._slot is not None:
            raise SandboxError("this sandbox was already started")
        self._slot = await self._f._slots.acquire()
        try:
            self._dir = Path(tempfile.mkdtemp(prefix="nel-sandbox-", dir=self._f.root))
            uid = self._f._uid(self._slot) if self._f._drop_to_uid else None
            self._bound(uid)
            if uid is not None:
                os.chown(self._dir, uid, uid)
                for vol in self._spec.volumes:
                    _check_reachable(Path(vol.host_path), uid)
            files = self._files()
            for rel, content in self._spec.files.items():
                files.write(rel, content.encode())
            if not self._f._probed:
                # Once per factory: a machine where bubblewrap cannot make its namespaces
                # (user namespaces disabled) must fail loudly, not as a failed program.
                await self.exec(["true"], timeout_sec=60)
                self._f._probed = True
        except BaseException:
            await self.stop()
            raise

    async def exec(self, command: str | list[str], timeout_sec: float = 180, *,
                   cwd: str | None = None, env: dict[str, str] | None = None,
                   stdin: bytes | None = None, output_limit: int = 1 << 20) -> ExecResult:
        """Run `command` in fresh namespaces with the limits; never raises for what it does."""
        if self._dir is None or self._slot is None:
            raise SandboxError("the sandbox is not started")
        argv = self._argv(command, cwd)
        timeout = min(float(timeout_sec), self._f.max_timeout)
        began = time.monotonic()
        cgroup = self._cgroup
        ooms = cgroup.oom_kills() if cgroup else 0
        proc = await asyncio.create_subprocess_exec(
            *argv, env=self._env(env), cwd="/", start_new_session=True,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            preexec_fn=cgroup.enter if cgroup else None)
        self._running.add(proc)
        try:
            got = await capture(proc, stdin=stdin, timeout=timeout, output_limit=output_limit,
                                kill=lambda: self._kill(proc))
        finally:
            self._running.discard(proc)
        code, stopped = got.outcome()
        if stopped is None and cgroup is not None and cgroup.oom_kills() > ooms:
            stopped = "memory"  # the sample's total passed `memory`: the kernel killed a process
        if not got.timed_out and not got.over_cap and code == 1 \
                and got.stderr.startswith(b"bwrap: ") and not got.stdout:
            raise SandboxError("the local sandbox could not start the command: "
                               + got.stderr.decode(errors="replace").strip().splitlines()[0])
        return got.result(began, code, stopped)

    async def upload(self, local_path: Path, remote_path: str) -> None:
        """Copy a host file into the sandbox (a path under the workdir or a volume)."""
        self._files().write(remote_path, Path(local_path).read_bytes())

    async def download(self, remote_path: str, local_path: Path) -> None:
        """Copy a file out of the sandbox; a symlink that leads outside it is refused."""
        self._files().read_to(remote_path, local_path)

    async def stop(self) -> None:
        """Kill what still runs, remove the workdir, free the slot. Idempotent."""
        for proc in list(self._running):
            await self._kill(proc)
        if self._dir is not None:
            if self._mounted:
                with contextlib.suppress(OSError):
                    unmount(self._dir)
                self._mounted = False
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        if self._cgroup is not None:
            cgroup, self._cgroup = self._cgroup, None
            await asyncio.to_thread(cgroup.remove)
        if self._slot is not None:
            slot, self._slot = self._slot, None
            self._f._slots.release(slot)

    # -- internals ---------------------------------------------------------------------

    def _bound(self, uid: int | None) -> None:
        """Give the sample its tmpfs workdir and its memory cgroup (as the factory can)."""
        assert self._dir is not None
        lim = self._f.limits
        try:
            if self._f._tmpfs:
                mount_tmpfs(self._dir, lim.scratch_bytes, uid)
                self._mounted = True
            if self._f._memcg is not None:
                self._cgroup = MemoryCgroup.create(self._f._memcg, lim.memory_bytes)
        except OSError as e:
            raise SandboxError(f"the local sandbox could not bound its sample: {e}") from e

    async def _kill(self, proc: asyncio.subprocess.Process) -> None:
        # bwrap leads its own session; it dies here and takes the namespace with it
        # (--die-with-parent on its PID 1, whose death kills every process inside).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()

    def _env(self, extra: dict[str, str] | None) -> dict[str, str]:
        path = dict.fromkeys([self._f._python.bin_dir, "/usr/local/bin", "/usr/bin", "/bin"])
        env = {"PATH": ":".join(path),
               "HOME": self._spec.workdir, "TMPDIR": "/tmp", "LANG": "C.UTF-8",
               "PYTHONDONTWRITEBYTECODE": "1"}
        return {**env, **self._f.base_env, **self._spec.env, **(extra or {})}

    def _argv(self, command: str | list[str], cwd: str | None) -> list[str]:
        assert self._dir is not None and self._slot is not None
        lim = self._f.limits
        spec = self._spec
        uid = self._f._uid(self._slot) if self._f._drop_to_uid else None
        argv = bwrap_argv(uid=uid, binds=self._f._python.binds, scratch_bytes=lim.scratch_bytes,
                          host_dir=self._dir, spec=spec,
                          chdir=self._files().inside(cwd) if cwd else spec.workdir)
        # The limits are set inside the namespaces: RLIMIT_NPROC then counts this
        # sandbox's processes only, and bubblewrap itself runs unconstrained.
        # With a cgroup bounding the total, one process may use all of it (and hits a
        # MemoryError there rather than the OOM killer); without, the rlimits are the bound.
        nproc, address_space = ((lim.max_processes, lim.memory_bytes)
                                if self._cgroup else self._f._fallback())
        argv += ["/usr/bin/prlimit", f"--as={address_space}",
                 f"--cpu={lim.cpu_time_s}:{lim.cpu_time_s + 1}",
                 f"--nproc={nproc}", f"--fsize={lim.max_file_bytes}",
                 f"--nofile={lim.max_open_files}", "--core=0", "--"]
        if isinstance(command, str):
            argv += ["/bin/sh", "-c", command]
        else:
            argv += list(command)
        return argv

    def _files(self) -> HostFiles:
        if self._dir is None or self._slot is None:
            raise SandboxError("the sandbox is not started")
        roots = ((self._spec.workdir, self._dir),
                 *((v.container_path, Path(v.host_path)) for v in self._spec.volumes))
        return HostFiles(roots, self._spec.workdir,
                         self._f._uid(self._slot) if self._f._drop_to_uid else None)


def build(cfg: SandboxConfig, limits: Limits | None = None) -> LocalSandboxFactory:
    """A `local` factory from its config block: `memory` (a sample's total, default 2 GiB),
    `ephemeral_storage_gib` (the size of its workdir, `/tmp` and `/dev/shm` each, default
    512 MiB), `timeout` (the most any one command may run), `concurrency`, `container_env`."""
    if cfg.image or cfg.image_template:
        key = "image" if cfg.image else "image_template"
        raise SandboxError(f"a `local` sandbox runs on this machine and has no image: remove "
                           f"`{key}` or use `type: docker`")
    base = limits or Limits(memory_bytes=DEFAULT_MEMORY_BYTES)
    if cfg.ephemeral_storage_gib is not None:
        base = Limits(**{**base.__dict__, "scratch_bytes": cfg.ephemeral_storage_gib << 30})
    return LocalSandboxFactory(limits=Limits.from_config(cfg.memory, base=base),
                               concurrency_=cfg.concurrency, max_timeout=cfg.timeout,
                               base_env=dict(cfg.container_env))
