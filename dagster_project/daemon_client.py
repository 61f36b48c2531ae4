"""Hand a `nel eval run` to a running nel daemon (see `daemon_server`).

The caller sends its arguments, environment, working directory, umask and its stdin,
stdout and stderr; the daemon forks the run and answers with its pid, later with its exit
status. Meanwhile the caller passes on the signals it gets (Ctrl-C to the run's process
group, as a terminal would; SIGTERM and SIGHUP to the run), so `kill`, a CI timeout and
Ctrl-C end the run as they end an in-process one. No daemon for this code, or one that is
stopping: the run happens in-process, as without a daemon.

Standard library only: this runs before anything heavy is imported.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
from typing import Any

from dagster_project import daemon_paths

_MODES = {"on": "on", "1": "on", "true": "on", "yes": "on",
          "off": "off", "0": "off", "false": "off", "no": "off", "auto": "auto"}
IDLE_MINUTES = 30.0


def interactive() -> bool:
    """Whether nel runs at a terminal (stdin and stderr), outside CI (`CI` unset or empty)."""
    try:
        at_terminal = os.isatty(0) and os.isatty(2)
    except OSError:
        return False
    return at_terminal and not os.environ.get("CI", "").strip()


def mode() -> str:
    """`NEL_DAEMON`: "on" (use a running daemon of this code), "auto" (and start one for the
    next runs when none runs) or "off" (never). Unset (or empty): "auto" at a terminal,
    where a user runs one evaluation after another, and "on" elsewhere (a script, CI, a
    batch job: no background process nobody asked for)."""
    raw = os.environ.get("NEL_DAEMON", "")
    if not raw.strip():
        return "auto" if interactive() else "on"
    try:
        return _MODES[raw.strip().lower()]
    except KeyError:
        from benchmarks.errors import NelError

        raise NelError(f"NEL_DAEMON must be on, off or auto, got {raw!r}") from None


def spawn(path: Any, idle_minutes: float = IDLE_MINUTES) -> Any:
    """Start a daemon for the socket `path` in its own session (output to `<path>.log`);
    returns the `subprocess.Popen`. It is ready once `path` exists. A second daemon for the
    same code exits at once (the first holds `<path>.lock`)."""
    import subprocess
    from pathlib import Path

    path = Path(path)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    env.pop("NEL_DAEMON", None)
    with open(path.with_suffix(".log"), "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "dagster_project.daemon_server", str(path), str(idle_minutes * 60),
             daemon_paths.setting_key()],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, cwd="/", env=env, start_new_session=True)


def find() -> str | None:
    """The socket of a daemon serving this code, or None. Cheap when no daemon was ever
    started (one directory listing; the fingerprint only when some socket exists)."""
    try:
        names = os.listdir(daemon_paths.daemon_dir())
    except OSError:
        return None
    if not any(n.endswith(".sock") for n in names):
        return None
    path = daemon_paths.socket_path()
    return str(path) if path.name in names else None


def request(path: str, msg: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
    """Send a control request (status, stop) and return the answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        _connect(s, path)
        s.sendall(daemon_paths.pack(msg))
        answer = _read_frame(s)
    if answer is None:
        raise ConnectionError("the daemon closed the connection without answering")
    return answer


def delegate(argv: list[str]) -> int | None:
    """Run `nel <argv>` in the daemon and return its exit status; None when no daemon takes
    it (the caller then runs it itself)."""
    how = mode()
    if how == "off":
        return None
    path = find()
    if path is None:
        if how == "auto":  # this run stays in-process; the next ones find it warm
            proc = spawn(daemon_paths.socket_path())
            if os.isatty(2):
                print(f"nel: starting a nel daemon (pid {proc.pid}) so that the next runs skip "
                      f"the start-up; it stops after {IDLE_MINUTES:g} idle minutes or with "
                      "`nel daemon stop` (NEL_DAEMON=off: never start one)", file=sys.stderr)
        return None
    try:
        cwd = os.getcwd()
    except OSError:  # the working directory was removed: the in-process run says so
        return None
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        _connect(s, path)
    except OSError:  # a socket left by a daemon that was killed
        s.close()
        return None
    fds = [_open_or_null(fd) for fd in (0, 1, 2)]
    umask = os.umask(0)
    os.umask(umask)
    msg = {"cmd": "run", "argv": list(argv), "env": dict(os.environ), "cwd": cwd, "umask": umask,
           "sys_path": sys.path}
    try:
        socket.send_fds(s, [daemon_paths.pack(msg)], fds)
        first = _read_frame(s)
    except OSError:
        first = None
    finally:
        for fd, orig in zip(fds, (0, 1, 2), strict=True):
            if fd != orig:
                os.close(fd)
    if first is None or "pid" not in first:
        s.close()
        return None  # not taken (stopping, or gone): run in-process
    return _follow(s, int(first["pid"]))


def _follow(s: socket.socket, pid: int) -> int:
    """Pass signals on to run `pid` until the daemon reports its exit status."""

    def to_group(signum: int, _frame: Any) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signum)

    def to_run(signum: int, _frame: Any) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)

    signal.signal(signal.SIGINT, to_group)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, to_run)
    try:
        done = _read_frame(s)
    except OSError:
        done = None
    finally:
        s.close()
    if done is None or "exit" not in done:
        print(f"error: the nel daemon ended before the run (pid {pid}) did; its outcome is in "
              "`nel eval status` and the output directory", file=sys.stderr)
        return 1
    return int(done["exit"])


def _connect(s: socket.socket, path: str) -> None:
    from pathlib import Path

    with daemon_paths.addressable(Path(path)) as name:
        s.connect(name)


def _open_or_null(fd: int) -> int:
    """`fd` when it is open, else a descriptor on /dev/null (a caller with stdin closed)."""
    try:
        os.fstat(fd)
        return fd
    except OSError:
        return os.open(os.devnull, os.O_RDWR)


def _read_frame(s: socket.socket) -> dict[str, Any] | None:
    """One frame, or None at the end of the stream."""
    head = _read_exactly(s, 4)
    if head is None:
        return None
    body = _read_exactly(s, daemon_paths.frame_length(head))
    return None if body is None else json.loads(body)


def _read_exactly(s: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)
