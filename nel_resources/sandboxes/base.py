"""The one interface every sandbox type implements.

A sandbox is an isolated place to run model-written code (a scorer's tests, an agent's
tools). Types (`local`, `docker`, `slurm`, `apptainer`, `ecs_fargate`) live in one module
each under this package and are built from a `SandboxConfig` by `make_factory`.

The names of `SandboxSpec`'s and `VolumeMount`'s fields are NeMo Evaluator 0.3.0's, so a
BYOB benchmark whose `seed()` returns its spec works unchanged; `ExecResult` keeps its
`stdout` / `stderr` / `return_code` and adds why a command was stopped.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from benchmarks.errors import NelError

#: Why a command did not run to its own end: the wall-clock timeout, a resource limit
#: (memory, processes, CPU time, file size), or its output passing the cap.
StopReason = Literal["timeout", "memory", "pids", "cpu_time", "file_size", "output_limit", "killed"]


@dataclass(frozen=True)
class VolumeMount:
    """A host directory (or shared volume) mounted into the sandbox."""

    host_path: str = ""
    container_path: str = ""
    readonly: bool = False


@dataclass(frozen=True)
class SandboxSpec:
    """What one problem needs from its sandbox (a benchmark's `seed()` may return one)."""

    image: str = ""
    workdir: str = "/workspace"
    env: dict[str, str] = field(default_factory=dict)
    #: path inside the sandbox (relative to `workdir` unless absolute) -> content
    files: dict[str, str] = field(default_factory=dict)
    entrypoint: str | None = None
    volumes: list[VolumeMount] = field(default_factory=list)
    #: a Harbor task's `environment/` (its Dockerfile's build context): an `ecs_fargate`
    #: block with `ecr_repository` builds the task's image from it (0.3.0's field)
    environment_dir: str | None = None
    #: nel's: host ports on 127.0.0.1 the sandbox must reach as its own 127.0.0.1 ports (an
    #: agent inside calling nel's proxy; `ecs_fargate` forwards them back over its SSH tunnel)
    reach_ports: tuple[int, ...] = ()


@dataclass(frozen=True)
class ExecResult:
    """The outcome of one command in a sandbox."""

    stdout: str
    stderr: str
    return_code: int
    #: set when the sandbox stopped the command (the return code is then not the program's own)
    stopped: StopReason | None = None
    #: stdout or stderr was cut at the output cap
    truncated: bool = False
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        """The command ran to its end and exited 0."""
        return self.stopped is None and self.return_code == 0


@runtime_checkable
class Sandbox(Protocol):
    """One live sandbox: start it, run commands in it, move files, stop it."""

    @property
    def spec(self) -> SandboxSpec: ...

    async def start(self) -> None:
        """Create the sandbox and write `spec.files` into its workdir."""

    async def exec(self, command: str | list[str], timeout_sec: float = 180, *,
                   cwd: str | None = None, env: dict[str, str] | None = None,
                   stdin: bytes | None = None, output_limit: int = 1 << 20) -> ExecResult:
        """Run a command (a shell string, or an argv list run without a shell); never raises
        for what the command does: a timeout or limit is `ExecResult.stopped`."""

    async def upload(self, local_path: Path, remote_path: str) -> None:
        """Copy a host file into the sandbox (never through a shell command line)."""

    async def download(self, remote_path: str, local_path: Path) -> None:
        """Copy a file out of the sandbox."""

    async def stop(self) -> None:
        """Tear down: kill every process the sandbox started and remove what it made.
        Safe to call twice and after a failed `start`."""


class SandboxFactory(Protocol):
    """One configured sandbox block: makes sandboxes and bounds how many are alive at once
    (`concurrency`, apart from the model's `max_concurrent`)."""

    @property
    def concurrency(self) -> int: ...

    def create(self, spec: SandboxSpec) -> Sandbox:
        """A new, not yet started sandbox for `spec`."""

    async def aclose(self) -> None:
        """Release what the factory keeps between sandboxes (warm containers, clients)."""


class FixedConcurrencyFactory:
    """What most factories share: a concurrency fixed when the block is read, and nothing
    kept between sandboxes to release (subclasses that keep something override `aclose`)."""

    def __init__(self, concurrency: int) -> None:
        self._concurrency = concurrency

    @property
    def concurrency(self) -> int:
        """How many sandboxes of this block may be alive at once."""
        return self._concurrency

    async def aclose(self) -> None:
        """Nothing is kept between sandboxes."""


class SandboxError(NelError):
    """The sandbox itself failed (could not start, engine gone) or cannot be made as
    configured: not the program's fault. The message is one line saying what to fix."""


@contextlib.asynccontextmanager
async def running(sandbox: Sandbox) -> AsyncIterator[Sandbox]:
    """Start `sandbox` and always stop it, whatever happens inside the block."""
    try:
        await sandbox.start()
        yield sandbox
    finally:
        await sandbox.stop()
