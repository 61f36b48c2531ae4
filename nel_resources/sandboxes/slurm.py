"""The `slurm` sandbox: each sandbox is one SLURM allocation, each command one `srun` step in it.

`start` asks for the allocation (`salloc --no-shell`) with the sandbox's CPUs, memory and
lifetime (`timeout`) on the benchmark's node pool (its partition), and writes `spec.files`
into the sandbox's workdir, a directory on the shared filesystem the nodes see. `exec` runs
one step (`srun --jobid=<job> --overlap`) with a clean environment: none of nel's variables
(API keys) reach the program. A step that passes its timeout or the output cap is cancelled
with `scancel <job>.<step>`; `stop` cancels the allocation (our own job id only) and waits
until SLURM no longer lists it, so nothing is left running.

With an image (`image:` or the spec's), steps run in a Pyxis/Enroot container: the workdir is
mounted at `spec.workdir`, `--container-name` keeps one container filesystem for all steps of
the sandbox (stateful solve/verify). Pyxis is a plugin of the cluster's `srun`; where it is
missing the sandbox says so when it starts instead of running the program on the bare node.

Without an image a step runs on the bare node inside bubblewrap, as the `local` sandbox does
on this machine (and with its helpers): the workdir bound at `spec.workdir`, no network, no
host process and no host file but read-only system directories, rlimits (address space from
`memory`, CPU time, processes, file size) set inside the namespaces, an unprivileged uid of its
own when nel runs as root; the command's PID namespace dies with it, so nothing it started
outlives the step. `bwrap` must be installed on the nodes (this machine: `make system-deps`).
`_reaper` is the fallback wrapper for `SlurmSettings(isolate=False)`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import math
import os
import re
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from nel_resources.config.benchmarks import SandboxConfig
from nel_resources.config.deployment import NodePool
from nel_resources.sandboxes._capped import run_capped
from nel_resources.sandboxes._reaper import REAPER_SOURCE
from nel_resources.sandboxes.base import (
    ExecResult,
    FixedConcurrencyFactory,
    SandboxError,
    SandboxSpec,
)
from nel_resources.sandboxes.hostfiles import HostFiles
from nel_resources.sandboxes.limits import Limits, stop_reason
from nel_resources.sandboxes.local import bwrap_argv, host_python
from nel_resources.sandboxes.refusal import Refusal, image_template_refusal

#: PATH inside a bare (no image) step: the environment is cleared, so it must be given.
BARE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# srun's own lines about how a step ended, which it writes to the same stderr as the program.
_SRUN_NOISE = re.compile(
    r"^(srun: (error: \S+: tasks? [\d,-]+: (Exited with exit code \d+|Killed|Terminated)"
    r"|Job step aborted.*|Force Terminated.*|error: Timed out waiting for job step.*)"
    r"|slurmstepd(-\S+)?: error: \*\*\* STEP \S+ ON \S+ CANCELLED AT .*\*\*\*)\s*$")
_TIME_LIMIT = re.compile(r"\*\*\* STEP \S+ ON \S+ CANCELLED AT \S+ DUE TO TIME LIMIT")
_OOM = re.compile(r"oom[-_ ]kill", re.IGNORECASE)
_JOB_ID = re.compile(r"(?:Granted|Pending) job allocation (\d+)")


def parse_memory_mb(value: str | int | None) -> int | None:
    """`4g`, `512M`, `2GiB` or a bare number of megabytes (as SLURM reads `--mem`) -> MB."""
    if value is None:
        return None
    if isinstance(value, int):
        return value
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", value.lower())
    if not m:
        raise SandboxError(f"memory {value!r} is not a size (write e.g. 4g or 512m)")
    scale = {"k": 1 / 1024, "": 1, "m": 1, "g": 1024, "t": 1024 * 1024}[m.group(2)]
    return max(1, math.ceil(float(m.group(1)) * scale))


def _minutes(seconds: float) -> int:
    """SLURM time limits are whole minutes: round up, at least one."""
    return max(1, math.ceil(seconds / 60))


@dataclass(frozen=True)
class SlurmSettings:
    """What every sandbox of one `slurm` block asks SLURM for."""

    partition: str | None = None
    gres: str | None = None
    cpus: float | None = None
    memory_mb: int | None = None
    #: the allocation's lifetime: a backstop that ends the sandbox if nel dies
    lifetime_s: float = 1800.0
    image: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    #: where sandbox workdirs are made: must be a filesystem the nodes share with nel
    shared_dir: Path | None = None
    #: rlimits of a bare-node step (memory: the block's `memory` when set)
    limits: Limits = field(default_factory=Limits)
    #: bare-node steps run inside bubblewrap (needs `bwrap` on the nodes)
    isolate: bool = True

    @classmethod
    def from_config(cls, cfg: SandboxConfig, *, node_pools: Mapping[str, NodePool] | None = None,
                    shared_dir: Path | None = None) -> SlurmSettings:
        pool = None
        if cfg.node_pool is not None:
            pool = (node_pools or {}).get(cfg.node_pool)
            if pool is None:
                raise SandboxError(f"node_pool {cfg.node_pool!r} is not in cluster.node_pools")
        memory_mb = parse_memory_mb(cfg.memory)
        limits = Limits() if memory_mb is None else Limits(**{**Limits().__dict__,
                                                              "memory_bytes": memory_mb << 20})
        return cls(partition=pool.partition if pool else None, gres=pool.gres if pool else None,
                   cpus=cfg.cpus, memory_mb=memory_mb, lifetime_s=cfg.timeout,
                   image=cfg.image, env=dict(cfg.container_env), shared_dir=shared_dir,
                   limits=limits)


def unavailable_reason(image: str | None = None) -> str | None:
    """Why `slurm` sandboxes cannot run from this machine, or None when they can."""
    missing = [b for b in ("salloc", "srun", "scancel", "squeue") if shutil.which(b) is None]
    if missing:
        return (f"the SLURM client commands are not installed here ({', '.join(missing)} not on "
                "PATH): run nel on a SLURM submit host")
    if not image and shutil.which("bwrap") is None:
        return ("without an `image` its steps run on the bare node inside bubblewrap, which "
                "is not installed (Debian package `bubblewrap`; `make system-deps`)")
    return None


@functools.cache
def srun_has_pyxis() -> bool:
    """The cluster's `srun` knows `--container-image` (the Pyxis plugin is installed)."""
    try:
        out = subprocess.run(["srun", "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--container-image" in out.stdout + out.stderr


class SlurmSandbox:
    """One problem's sandbox: a SLURM allocation and a workdir on the shared filesystem."""

    def __init__(self, spec: SandboxSpec, settings: SlurmSettings) -> None:
        self._spec = spec
        self._s = settings
        self._image = spec.image or settings.image or ""
        self._name = f"nel-sandbox-{uuid.uuid4().hex[:12]}"
        self._host_dir: Path | None = None
        self.job_id: str | None = None
        self._steps = 0
        self._stopped = False
        #: the unprivileged uid bare-node steps run as (when nel runs as root)
        self._uid: int | None = None

    @property
    def spec(self) -> SandboxSpec:
        return self._spec

    @property
    def shares_host_pids(self) -> bool:
        """A Pyxis/enroot container has no PID namespace of its own: its processes see (and
        may signal) the node's; SLURM ends them with their step. A bare-node step runs in
        bubblewrap's own PID namespace."""
        return bool(self._image)

    @property
    def host_dir(self) -> Path | None:
        """The sandbox's workdir as nel sees it (on the shared filesystem)."""
        return self._host_dir

    # -- command lines (pure, so they are testable where Pyxis is missing) --------------------
    def salloc_argv(self) -> list[str]:
        """The allocation request."""
        s = self._s
        argv = ["salloc", "--no-shell", f"--job-name={self._name}", "--nodes=1", "--ntasks=1",
                f"--time={_minutes(s.lifetime_s)}"]
        if s.partition:
            argv.append(f"--partition={s.partition}")
        if s.gres:
            argv.append(f"--gres={s.gres}")
        if s.cpus is not None:
            argv.append(f"--cpus-per-task={math.ceil(s.cpus)}")
        if s.memory_mb is not None:
            argv.append(f"--mem={s.memory_mb}M")
        return argv

    def srun_prefix(self, *, timeout_sec: float, step_name: str) -> list[str]:
        """`srun` of one step in the allocation, up to the program it runs."""
        if self.job_id is None or self._host_dir is None:
            raise SandboxError("the slurm sandbox is not started")
        argv = ["srun", f"--jobid={self.job_id}", "--overlap", "--nodes=1", "--ntasks=1",
                "--quiet", "--export=NONE", f"--job-name={step_name}",
                f"--time={_minutes(timeout_sec) + 1}"]
        if self._s.cpus is not None:
            argv.append(f"--cpus-per-task={math.ceil(self._s.cpus)}")
        return argv

    def step_argv(self, command: str | list[str], *, timeout_sec: float, step_name: str,
                  cwd: str | None = None, env: Mapping[str, str] | None = None) -> list[str]:
        """One `srun` step running `command` in the allocation (and the container, if any)."""
        argv = self.srun_prefix(timeout_sec=timeout_sec, step_name=step_name)
        assert self._host_dir is not None
        variables = {**self._s.env, **self._spec.env, **(env or {})}
        if self._image:
            workdir = self._spec.workdir
            mounts = [f"{self._host_dir}:{workdir}"]
            for v in self._spec.volumes:
                mounts.append(f"{v.host_path}:{v.container_path}" + (":ro" if v.readonly else ""))
            argv += [f"--container-image={self._image}", f"--container-name={self._name}",
                     f"--container-mounts={','.join(mounts)}",
                     f"--container-workdir={self._in_sandbox(cwd) if cwd else workdir}",
                     "--no-container-mount-home"]
            # The image's own environment (its PATH) stays; only ours is added.
            argv += ["/usr/bin/env", *(f"{k}={v}" for k, v in variables.items())]
        elif self._s.isolate:
            argv.append(f"--chdir={self._host_dir}")
            argv += ["/usr/bin/env", "-i", *(f"{k}={v}" for k, v in self._bare_env(variables))]
            argv += self._bwrap_argv(self._in_sandbox(cwd) if cwd else self._spec.workdir)
        else:
            argv.append(f"--chdir={self._on_host(cwd) if cwd else self._host_dir}")
            argv += ["/usr/bin/env", "-i", f"PATH={BARE_PATH}", f"HOME={self._host_dir}",
                     "LANG=C.UTF-8", *(f"{k}={v}" for k, v in variables.items()),
                     # the program's daemonized leftovers die with the step (see _reaper)
                     "python3", "-I", "-S", "-c", REAPER_SOURCE]
        argv += ["/bin/bash", "-c", command] if isinstance(command, str) else list(command)
        return argv

    def _bare_env(self, variables: Mapping[str, str]) -> list[tuple[str, str]]:
        path = dict.fromkeys([host_python().bin_dir, "/usr/local/bin", "/usr/bin", "/bin"])
        base = {"PATH": ":".join(path), "HOME": self._spec.workdir, "TMPDIR": "/tmp",
                "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
        return list({**base, **variables}.items())

    def _bwrap_argv(self, chdir: str) -> list[str]:
        """Bubblewrap around a bare-node step: no network, no host process, no host file but
        the read-only system directories and the workdir; rlimits set inside the namespaces;
        its PID namespace dies with the command, taking every leftover with it."""
        assert self._host_dir is not None
        lim = self._s.limits
        argv = bwrap_argv(uid=self._uid, binds=host_python().binds,
                          scratch_bytes=lim.scratch_bytes, host_dir=self._host_dir,
                          spec=self._spec, chdir=chdir)
        argv += ["/usr/bin/prlimit", f"--as={lim.memory_bytes}",
                 f"--cpu={lim.cpu_time_s}:{lim.cpu_time_s + 1}", f"--nproc={lim.max_processes}",
                 f"--fsize={lim.max_file_bytes}", f"--nofile={lim.max_open_files}", "--core=0",
                 "--"]
        return argv

    # -- lifecycle --------------------------------------------------------------------------
    async def start(self) -> None:
        """Ask SLURM for the allocation and write `spec.files` into the workdir."""
        if self._image and not srun_has_pyxis():
            raise SandboxError(f"image {self._image!r} needs Pyxis/Enroot, and this cluster's "
                               "srun has no --container-image (the Pyxis plugin is not "
                               "installed); remove `image` to run steps on the bare node")
        base = self._s.shared_dir or Path(tempfile.gettempdir())
        base.mkdir(parents=True, exist_ok=True)
        self._host_dir = Path(tempfile.mkdtemp(prefix=f"{self._name}-", dir=base))
        if not self._image and self._s.isolate and os.geteuid() == 0:
            self._uid = _next_uid()
            os.chown(self._host_dir, self._uid, self._uid)
            # bubblewrap resolves the workdir as that uid: every parent must let it through
            for parent in self._host_dir.parents:
                if not parent.stat().st_mode & 0o001:
                    shutil.rmtree(self._host_dir, ignore_errors=True)
                    raise SandboxError(f"the slurm sandbox's directory {parent} is not "
                                       "searchable by others: chmod o+x it or use another "
                                       "shared directory")
        for rel, content in self._spec.files.items():
            self._write(rel, content.encode())
        await self._allocate()

    async def _allocate(self) -> None:
        proc = await asyncio.create_subprocess_exec(
            *self.salloc_argv(), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            start_new_session=True)
        assert proc.stderr is not None
        lines: list[str] = []
        try:
            # The job id is printed when the request is queued, before it is granted: know it
            # early so a cancelled start can still scancel it.
            while raw := await proc.stderr.readline():
                line = raw.decode(errors="replace").rstrip()
                lines.append(line)
                if self.job_id is None and (m := _JOB_ID.search(line)):
                    self.job_id = m.group(1)
            rc = await proc.wait()
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            raise
        if rc != 0 or self.job_id is None:
            raise SandboxError("salloc failed: " + (" | ".join(lines[-3:]) or f"exit {rc}"))

    async def exec(self, command: str | list[str], timeout_sec: float = 180, *,
                   cwd: str | None = None, env: dict[str, str] | None = None,
                   stdin: bytes | None = None, output_limit: int = 1 << 20) -> ExecResult:
        """Run `command` as one srun step; a timeout or the cap cancels the step."""
        self._steps += 1
        step_name = f"{self._name}-s{self._steps}"
        argv = self.step_argv(command, timeout_sec=timeout_sec, step_name=step_name, cwd=cwd,
                              env=env)
        res = await run_capped(argv, timeout_sec=timeout_sec, output_limit=output_limit,
                               stdin=stdin, stop_remote=lambda: self._cancel_step(step_name))
        stderr_lines = res.stderr.splitlines(keepends=True)
        stderr = "".join(x for x in stderr_lines if not _SRUN_NOISE.match(x))
        stopped = res.stopped
        if stopped is None and any(_TIME_LIMIT.search(x) for x in stderr_lines):
            stopped = "timeout"
        elif stopped is None and any(_OOM.search(x) for x in stderr_lines if "slurmstepd" in x):
            stopped = "memory"
        elif stopped is None:  # a limit set inside the step (rlimits)
            stopped = stop_reason(res.return_code, stderr.encode())
        return ExecResult(stdout=res.stdout, stderr=stderr, return_code=res.return_code,
                          stopped=stopped, truncated=res.truncated, duration_s=res.duration_s)

    async def _cancel_step(self, step_name: str) -> None:
        """scancel the step named `step_name` of our job (it may not be registered yet)."""
        for _ in range(50):
            out = await _run(["squeue", "-h", "-s", f"--jobs={self.job_id}", "-o", "%i %j"])
            for line in out.splitlines():
                step_id, _, name = line.strip().partition(" ")
                if name == step_name:
                    await _run(["scancel", "--signal=KILL", step_id])
                    await _run(["scancel", step_id])
                    return
            await asyncio.sleep(0.1)

    async def upload(self, local_path: Path, remote_path: str) -> None:
        """Copy into the workdir (or a volume) on the shared filesystem (no shell, no
        command line)."""
        if self._host_dir is None:
            raise SandboxError("the slurm sandbox is not started")
        data = await asyncio.to_thread(local_path.read_bytes)
        await asyncio.to_thread(self._write, remote_path, data)

    def _files(self) -> HostFiles:
        """The host directories behind the sandbox's paths: the workdir and the spec's volumes
        (a Harbor task's /tests and /logs scratch mounts), all on the shared filesystem."""
        assert self._host_dir is not None
        roots = [(self._spec.workdir, self._host_dir)]
        roots += [(v.container_path, Path(v.host_path)) for v in self._spec.volumes]
        return HostFiles(tuple(roots), self._spec.workdir, owner=self._uid)

    def _write(self, remote: str, data: bytes) -> None:
        # no shell, and O_NOFOLLOW: a symlink the program planted must not redirect nel's write
        self._files().write(remote, data)

    async def download(self, remote_path: str, local_path: Path) -> None:
        """Copy out of the workdir (or a volume) on the shared filesystem."""
        if self._host_dir is None:
            raise SandboxError("the slurm sandbox is not started")
        await asyncio.to_thread(self._files().read_to, remote_path, local_path)

    async def stop(self) -> None:
        """Cancel our allocation (every step in it dies with it) and remove the workdir."""
        if self._stopped:
            return
        self._stopped = True
        if self.job_id is not None:
            await _run(["scancel", self.job_id])
            for _ in range(600):  # slurmstepd kills the steps; wait until SLURM lets the job go
                state = (await _run(["squeue", "-h", f"--jobs={self.job_id}", "-o", "%T"])).strip()
                if state in ("", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT"):
                    break
                await asyncio.sleep(0.1)
        if self._host_dir is not None:
            await asyncio.to_thread(shutil.rmtree, self._host_dir, True)

    # -- paths ------------------------------------------------------------------------------
    def _relative(self, path: str) -> Path:
        p = Path(path)
        if p.is_absolute():
            try:
                p = p.relative_to(self._spec.workdir)
            except ValueError:
                raise SandboxError(f"{path}: a slurm sandbox moves files through its workdir "
                                   f"({self._spec.workdir}); use a path inside it") from None
        if ".." in p.parts:
            raise SandboxError(f"{path}: '..' would leave the sandbox's workdir")
        return p

    def _on_host(self, path: str) -> Path:
        """The host path behind a sandbox path; a symlink leading out of the workdir (one the
        program planted) is refused."""
        assert self._host_dir is not None
        host = self._host_dir / self._relative(path)
        real_root, real = self._host_dir.resolve(), host.resolve()
        if real != real_root and real_root not in real.parents:
            raise SandboxError(f"{path!r} leads outside the sandbox's workdir")
        return host

    def _in_sandbox(self, path: str) -> str:
        return str(Path(self._spec.workdir) / self._relative(path))


_UID_BASE = 2_000_000_000  # above the local sandbox's range; below 2**31
_uid_counter = itertools.count()


def _next_uid() -> int:
    """A host uid no account uses, one per sandbox (so RLIMIT_NPROC counts per sandbox)."""
    return _UID_BASE + (os.getpid() % 100_000) * 1000 + next(_uid_counter) % 1000


async def _run(argv: list[str]) -> str:
    """A SLURM client command's stdout ("" when it fails: the caller checks the state)."""
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.DEVNULL)
    out, _ = await proc.communicate()
    return out.decode(errors="replace")


class SlurmSandboxFactory(FixedConcurrencyFactory):
    """A configured `slurm` block: makes sandboxes; at most `concurrency` are alive at once
    (the block's `concurrency`, and no more than the pool's nodes × `slots_per_node`)."""

    def __init__(self, cfg: SandboxConfig, *, node_pools: Mapping[str, NodePool] | None = None,
                 shared_dir: Path | None = None) -> None:
        reason = unavailable_reason(cfg.image)
        if reason:
            raise SandboxError(f"slurm sandbox: {reason}")
        self.settings = SlurmSettings.from_config(cfg, node_pools=node_pools,
                                                  shared_dir=shared_dir)
        pool = (node_pools or {}).get(cfg.node_pool or "")
        # each sandbox cancels its own allocation: nothing is kept between them
        super().__init__(min(cfg.concurrency, (pool.nodes if pool else 1) * cfg.slots_per_node))

    @property
    def shared_dir(self) -> Path | None:
        """The directory the nodes share with nel (None: the system temp directory)."""
        return self.settings.shared_dir

    def create(self, spec: SandboxSpec) -> SlurmSandbox:
        """A new sandbox for `spec` (not started)."""
        return SlurmSandbox(spec, self.settings)


def refusal(cfg: SandboxConfig) -> Refusal | None:
    """Why this block cannot run from here (checked before any request), or None."""
    if (r := image_template_refusal(cfg)) is not None:
        return r
    why = unavailable_reason(cfg.image)
    return Refusal("type", why) if why else None


def build(cfg: SandboxConfig, limits: Limits | None = None) -> SlurmSandboxFactory:
    """A `slurm` factory from its config block (the `make_factory` entry point).

    SLURM enforces what it is asked for (`--mem`, `--cpus-per-task`, `--time`) as far as the
    cluster's cgroup setup does; `limits` supplies `--mem` when the block sets no `memory`.
    A `node_pool` needs the cluster's pools: build `SlurmSandboxFactory` with `node_pools`.
    """
    if cfg.image_template:
        raise SandboxError("`image_template` (an image per problem) is not supported by nel's "
                           "slurm sandbox yet: give one `image`")
    if cfg.memory is None and limits is not None:
        cfg = cfg.model_copy(update={"memory": max(1, limits.memory_bytes >> 20)})
    return SlurmSandboxFactory(cfg)


def build_on_pool(cfg: SandboxConfig, limits: Limits | None, pool: NodePool) -> SlurmSandboxFactory:
    """A `slurm` factory whose allocations go to node pool `pool` (the block's `node_pool`):
    its partition and gres, and at most its nodes × `slots_per_node` sandboxes at once."""
    if cfg.image_template:
        raise SandboxError("`image_template` (an image per problem) is not supported by nel's "
                           "slurm sandbox yet: give one `image`")
    if cfg.memory is None and limits is not None:
        cfg = cfg.model_copy(update={"memory": max(1, limits.memory_bytes >> 20)})
    return SlurmSandboxFactory(cfg, node_pools={str(cfg.node_pool): pool})
