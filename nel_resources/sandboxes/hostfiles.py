"""Moving files between nel and a sandbox whose directories live on this host (the `local`
sandbox's workdir, the `docker` sandbox's bind-mounted workdir and /tmp, volumes).

Files are copied by nel itself, never through a command line. A sandboxed program may have
planted symlinks: every path is resolved on the host and refused if it leads outside the
sandbox's directories, and the final component is opened with O_NOFOLLOW.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from nel_resources.sandboxes.base import SandboxError


@dataclass(frozen=True)
class HostFiles:
    """The host directories behind a sandbox's paths."""

    #: sandbox path (absolute) -> host directory, e.g. ("/workspace", /tmp/nel-sandbox-x)
    roots: tuple[tuple[str, Path], ...]
    #: relative sandbox paths are relative to this one
    workdir: str
    #: host uid (and gid) that files nel writes must belong to (None: leave as made)
    owner: int | None = None

    def inside(self, path: str) -> str:
        """`path` as an absolute sandbox path."""
        p = PurePosixPath(path)
        return str(p if p.is_absolute() else PurePosixPath(self.workdir) / p)

    def host_path(self, remote: str) -> Path:
        """The host path behind a sandbox path (`..` and planted symlinks that lead out
        are refused)."""
        return self._resolve(remote)[0]

    def _resolve(self, remote: str) -> tuple[Path, Path]:
        inside = PurePosixPath(os.path.normpath(self.inside(remote)))
        for root_in, root_host in self.roots:
            r = PurePosixPath(root_in)
            if inside == r or r in inside.parents:
                host = root_host / inside.relative_to(r)
                real_root, real = root_host.resolve(), host.resolve()
                if real != real_root and real_root not in real.parents:
                    raise SandboxError(f"{remote!r} leads outside the sandbox")
                return host, root_host
        raise SandboxError(f"{remote!r} is outside the sandbox's workdir {self.workdir} "
                           "and volumes")

    def write(self, remote: str, data: bytes) -> None:
        """Create or replace a file in the sandbox, with its missing parent directories."""
        host, root = self._resolve(remote)
        made = [p for p in reversed(host.parents) if p.is_relative_to(root) and not p.exists()]
        host.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(host, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if self.owner is not None:
            for p in [*made, host]:
                os.chown(p, self.owner, self.owner, follow_symlinks=False)

    def read_to(self, remote: str, local_path: Path) -> None:
        """Copy a regular file out of the sandbox to `local_path`."""
        src = self.host_path(remote)
        if src.is_symlink() or not src.is_file():
            raise SandboxError(f"no regular file {remote!r} in the sandbox")
        local_path = Path(local_path)
        local_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f, open(local_path, "wb") as out:
            shutil.copyfileobj(f, out)


def empty_dir(path: Path) -> bool:
    """Remove everything inside `path` (never following links out); True if it is empty."""
    with os.scandir(path) as it:
        for entry in it:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
    return not any(path.iterdir())
