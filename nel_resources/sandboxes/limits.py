"""Resource limits shared by the sandbox types that enforce them on this machine
(`local` with rlimits inside bubblewrap, `docker` with cgroups and ulimits)."""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

from nel_resources.sandboxes.base import SandboxError, StopReason

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
#: Tail of stderr in which a program's death by a limit is recognised.
_TAIL = 4096
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_size(value: str | int) -> int:
    """Bytes from Docker's size notation (`512m`, `4g`, `1.5G`, `256MiB`) or an int of bytes.

    Raises:
        SandboxError: the value is not a size (the message says what is accepted).
    """
    if isinstance(value, int) and not isinstance(value, bool):
        if value <= 0:
            raise SandboxError(f"sandbox memory must be positive, got {value}")
        return value
    m = _SIZE.match(str(value))
    if not m:
        raise SandboxError(f"sandbox memory {value!r} is not a size: write e.g. 512m, 4g "
                           "or a number of bytes")
    return max(1, int(float(m.group(1)) * _UNITS[m.group(2).lower()]))


@dataclass(frozen=True)
class Limits:
    """What one command in a sandbox may use. Every field applies per sandbox type as far
    as the type can enforce it; `None` means the type's own default (no limit is never
    the default)."""

    #: address space (local) / cgroup memory (docker), bytes
    memory_bytes: int = 4 << 30
    #: CPU seconds per process (RLIMIT_CPU); the wall-clock timeout is separate
    cpu_time_s: int = 600
    #: processes and threads alive at once
    max_processes: int = 256
    #: largest file a command may write (RLIMIT_FSIZE), bytes
    max_file_bytes: int = 256 << 20
    #: open file descriptors per process
    max_open_files: int = 1024
    #: size of the writable workdir / tmp (docker tmpfs), bytes
    scratch_bytes: int = 512 << 20

    @classmethod
    def from_config(cls, memory: str | int | None, *, base: Limits | None = None) -> Limits:
        """The defaults (or `base`) with the config's `memory` applied."""
        lim = base or cls()
        if memory is None:
            return lim
        return cls(**{**lim.__dict__, "memory_bytes": parse_size(memory)})


def stop_reason(return_code: int, stderr: bytes) -> StopReason | None:
    """Why a command that exited non-zero died, when a limit killed it (a signal: shells,
    bubblewrap and `docker exec` report 128 + the signal) or made the Python program fail
    (its last error line names the limit)."""
    if return_code in (128 + signal.SIGXCPU, -signal.SIGXCPU):
        return "cpu_time"
    if return_code in (128 + signal.SIGXFSZ, -signal.SIGXFSZ):
        return "file_size"
    if return_code == 0:
        return None
    tail = stderr[-_TAIL:]
    last = tail.rstrip().rsplit(b"\n", 1)[-1]
    if last.startswith(b"MemoryError"):
        return "memory"
    if b"[Errno 27] File too large" in last:
        return "file_size"
    # Python's EAGAIN, bash's "fork: Resource temporarily unavailable", dash's "Cannot fork"
    # (dash, the image's /bin/sh, exits 2 when its own fork fails at the pids limit).
    if (b"[Errno 11] Resource temporarily unavailable" in last or b"fork: Resource" in tail
            or b"Cannot fork" in tail):
        return "pids"
    return None
