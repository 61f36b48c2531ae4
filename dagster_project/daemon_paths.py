"""Where the nel daemon listens, and the code version it serves.

The daemon (`nel daemon start`, `dagster_project.daemon_server`) keeps nel, Dagster and their
storage modules imported; `nel eval run` hands a run to it only when the daemon was started
from the same code: same interpreter, same import path, same nel sources and same installed
packages. The socket's name carries that fingerprint, so a daemon of other code is simply
not found (an edited module or an upgraded package never runs stale).

Only the standard library here: the client computes this before anything heavy loads.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import sys
from collections.abc import Iterator
from pathlib import Path

# nel's own packages: every source file's size and mtime enter the fingerprint.
PACKAGES = ("benchmarks", "dagster_project", "nel_assets", "nel_resources")
REPO = Path(__file__).resolve().parents[1]  # the checkout whose code a daemon serves
IMPORT_TIME_ENV = ("PYTHONPATH", "PYTHONHASHSEED", "PYTHONMALLOC", "PYTHONDEVMODE", "PYTHONWARNINGS",
                   "PYTHONUTF8", "ARROW_DEFAULT_MEMORY_POOL")


def daemon_dir() -> Path:
    """The folder of the daemons' sockets and logs (`$NEL_DAEMON_DIR`, else
    `$XDG_CACHE_HOME/nel/daemon`, else ~/.cache/nel/daemon)."""
    if os.environ.get("NEL_DAEMON_DIR"):
        return Path(os.environ["NEL_DAEMON_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "nel" / "daemon"


def fingerprint() -> str:
    """A short hash of the code a daemon would run: the interpreter and its flags, the
    variables read at start-up (`IMPORT_TIME_ENV`), where nel's packages are and each of
    their source files' size and mtime, and the mtime of the installed packages'
    directories (installing or removing a package changes it). Not the whole
    import path: `python -m` puts the working directory first, and the same code run from
    another directory must find the same daemon."""
    import sysconfig

    h = hashlib.sha256()
    h.update(setting().encode())
    paths = sysconfig.get_paths()
    for site in sorted({paths["purelib"], paths["platlib"]}):
        with contextlib.suppress(OSError):
            h.update(f"\0{site}:{os.stat(site).st_mtime_ns}".encode())
    for pkg in PACKAGES:
        for root, dirs, files in os.walk(REPO / pkg):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(".py"):
                    st = os.stat(os.path.join(root, name))
                    h.update(f"{root}/{name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def setting() -> str:
    """The part of the fingerprint that is not code: the interpreter and its flags, the
    checkout, and the variables read at start-up (`IMPORT_TIME_ENV`: the daemon's values
    would hold for every run, so a caller with other values finds no daemon). Two daemons
    with the same setting and another fingerprint serve two versions of the same code."""
    parts = [sys.executable, str(REPO), repr(sys.flags)]
    parts += [f"{name}={os.environ.get(name)}" for name in IMPORT_TIME_ENV]
    return "\0".join(parts)


def setting_key() -> str:
    """A short hash of `setting()`, handed to a daemon at its start (`spawn`)."""
    return hashlib.sha256(setting().encode()).hexdigest()[:16]


def socket_path(fp: str | None = None) -> Path:
    """The socket of the daemon serving this code (it may not exist)."""
    return daemon_dir() / f"{fp or fingerprint()}.sock"


# A socket's path must fit in sun_path (108 bytes on Linux, NUL included); a deep
# XDG_CACHE_HOME or NEL_DAEMON_DIR would not. The same file is reached through the
# directory's descriptor (`/proc/self/fd/N/name`), which is always short.
_SUN_PATH_MAX = 100


@contextlib.contextmanager
def addressable(path: Path) -> Iterator[str]:
    """A name `bind` and `connect` accept for the socket file `path`."""
    if len(os.fsencode(str(path))) <= _SUN_PATH_MAX:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


# Messages on the socket are frames: a 4-byte big-endian length, then that much JSON.
def pack(msg: dict) -> bytes:
    """One frame holding `msg`."""
    data = json.dumps(msg).encode()
    return struct.pack(">I", len(data)) + data


def frame_length(head: bytes) -> int:
    """The length of the JSON that follows a frame's 4-byte head."""
    return int(struct.unpack(">I", head)[0])
