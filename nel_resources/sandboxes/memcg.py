"""A memory cgroup per sandbox: one limit on everything a sample runs, read back after.

The limit covers the sample's whole process tree and the tmpfs pages it writes (its
`/tmp`, `/dev/shm` and workdir), so eight children of 600 MB each cannot hold 4.8 GB
between them the way eight per-process rlimits let them. The kernel's own counters give
the peak and whether the OOM killer fired (the command then reads as stopped by `memory`).

cgroup v2 is used where nel may create a child with the memory controller (below its own
cgroup, or beside it when its own cgroup holds processes), else cgroup v1's memory hierarchy
(hybrid hosts, such as the VMs CI runs on). Where neither is writable (a container without
cgroup delegation, a non-root user without a delegated subtree) `memcg_base()` is None and
the caller falls back to rlimits.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

_NAMES = itertools.count()
#: how long `remove` waits for the killed processes to leave the cgroup
_REMOVE_WAIT_S = 10.0


@dataclass(frozen=True)
class CgroupBase:
    """Where sandbox cgroups are made: a directory of the memory hierarchy, and its version."""

    path: Path
    version: int


def _mountinfo() -> list[tuple[str, str, str]]:
    """(mount point, fs type, super options) of every mount nel can see."""
    out = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            pre, _, post = line.partition(" - ")
            fields, tail = pre.split(), post.split()
            if len(fields) >= 5 and len(tail) >= 3:
                out.append((fields[4], tail[0], tail[2]))
    return out


def _own_cgroups() -> dict[str, str]:
    """Controller (`""` for v2) -> nel's own cgroup path in that hierarchy."""
    own: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                own[c] = path
    return own


def _probe(base: Path, version: int) -> bool:
    """Can a child with a memory limit be made (and removed) here?"""
    probe = base / f"nel-probe-{os.getpid()}-{next(_NAMES)}"
    try:
        probe.mkdir()
    except OSError:
        return False
    try:
        limit = "memory.max" if version == 2 else "memory.limit_in_bytes"
        (probe / limit).write_text(str(64 << 20))
        return True
    except OSError:
        return False
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()


def _v2_candidates(mount: Path, own: str) -> list[Path]:
    here = mount / own.lstrip("/")
    found = []
    for base in (here, here.parent) if here != mount else (here,):
        try:
            enabled = (base / "cgroup.subtree_control").read_text().split()
        except OSError:
            continue
        if "memory" not in enabled and base == here:
            # Enabling it fails (EBUSY) while nel's own cgroup holds processes: then the
            # parent, where nel's cgroup itself gets its memory controller, is tried.
            with contextlib.suppress(OSError):
                (base / "cgroup.subtree_control").write_text("+memory")
                enabled.append("memory")
        if "memory" in enabled:
            found.append(base)
    return found


@cache
def memcg_base() -> CgroupBase | None:
    """Where this process can make memory-limited cgroups, or None (probed once)."""
    own = _own_cgroups()
    mounts = _mountinfo()
    for point, fstype, _ in mounts:
        if fstype == "cgroup2" and "" in own:
            for base in _v2_candidates(Path(point), own[""]):
                if _probe(base, 2):
                    return CgroupBase(base, 2)
    for point, fstype, opts in mounts:
        if fstype == "cgroup" and "memory" in opts.split(",") and "memory" in own:
            base = Path(point) / own["memory"].lstrip("/")
            if _probe(base, 1):
                return CgroupBase(base, 1)
    return None


class MemoryCgroup:
    """One sandbox's cgroup: made with its limit, entered by each command's first process
    (`enter`, run in the child before exec), read (`peak_bytes`, `oom_kills`), removed."""

    def __init__(self, path: Path, version: int) -> None:
        self.path = path
        self.version = version
        self._procs = str(path / "cgroup.procs").encode()

    @classmethod
    def create(cls, base: CgroupBase, limit_bytes: int) -> MemoryCgroup:
        """A new cgroup under `base` limited to `limit_bytes`, swap included.

        Raises:
            OSError: the cgroup could not be made or limited.
        """
        path = base.path / f"nel-sandbox-{os.getpid()}-{next(_NAMES)}"
        path.mkdir()
        cg = cls(path, base.version)
        try:
            if base.version == 2:
                (path / "memory.max").write_text(str(limit_bytes))
                for name, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
                    with contextlib.suppress(OSError):  # no swap accounting / older kernel
                        (path / name).write_text(value)
            else:
                (path / "memory.limit_in_bytes").write_text(str(limit_bytes))
                with contextlib.suppress(OSError):  # memsw exists only with swap accounting
                    (path / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))
        except OSError:
            cg.remove()
            raise
        return cg

    def enter(self) -> None:
        """Move the calling process into this cgroup (a `preexec_fn`: async-signal-safe
        calls only, so no Python file objects)."""
        fd = os.open(self._procs, os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)

    def _read(self, name: str) -> str:
        try:
            return (self.path / name).read_text()
        except OSError:
            return ""

    def oom_kills(self) -> int:
        """How many processes the OOM killer has killed in this cgroup so far."""
        text = self._read("memory.events" if self.version == 2 else "memory.oom_control")
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def peak_bytes(self) -> int | None:
        """The most memory the cgroup has held (processes and tmpfs pages), when the kernel
        tracks it (`memory.peak` needs Linux 5.19 on v2)."""
        text = self._read("memory.peak" if self.version == 2 else "memory.max_usage_in_bytes")
        return int(text) if text.strip().isdigit() else None

    def remove(self) -> None:
        """Kill whatever is left in the cgroup and remove it (idempotent)."""
        deadline = time.monotonic() + _REMOVE_WAIT_S
        while self.path.exists():
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    return  # left for the kernel: empty once its last process is reaped
            if self.version == 2 and (self.path / "cgroup.kill").exists():
                with contextlib.suppress(OSError):
                    (self.path / "cgroup.kill").write_text("1")
            for pid in self._read("cgroup.procs").split():
                with contextlib.suppress(OSError):
                    os.kill(int(pid), signal.SIGKILL)
            time.sleep(0.01)  # the kernel reaps the killed processes asynchronously
