"""The nel daemon: a process that keeps nel, Dagster and their storage modules imported and
forks one child per `nel eval run` handed to it.

A fresh `nel eval run` spends about a second importing Dagster, SQLAlchemy and alembic and
building what they build at import; on this 2-core machine that is most of a 10,552-sample
run's fixed cost. The daemon pays it once. Each run is a fork of it: a new process with
those modules already loaded and no state of any earlier run (nothing runs in the daemon
itself but imports), given the caller's arguments, environment, working directory and
terminal (its stdin, stdout and stderr, passed over the socket), in a process group of its
own. The caller (`daemon_client`) forwards its signals to the run and exits with the run's
exit status; the daemon reaps the run and sends that status back.

After each run the child reports the modules it imported; the daemon imports those it lacks
from the interpreter's own library and nel's packages (never a user's benchmark module,
whose file may change), so the second run starts warmer than the first.

Single-threaded on purpose: a fork copies only the calling thread, so the daemon never has
another thread that could hold a lock at the moment of a fork.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import selectors
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dagster_project import daemon_paths

# Imported before the first fork: what every `nel eval run` loads. The rest arrives from the
# children's reports.
WARM_MODULES = (
    "dagster",
    "dagster._core.storage.sqlite_storage",
    "dagster._core.storage.event_log.sqlite.sqlite_event_log",
    "dagster._core.storage.runs.sqlite.sqlite_run_storage",
    "dagster._core.storage.schedules.sqlite.sqlite_schedule_storage",
    "dagster_project.sqlite_storage",
    "dagster_project.runner",
    "dagster_project.cli.main",
    "nel_assets.factory",
    "nel_assets.engine.evaluation.evaluate",
    "nel_assets.engine.nemo.exports",
    "pyarrow.parquet",
)


@dataclass
class _Run:
    """A run being served: its caller's connection and the child's module report pipe."""

    conn: socket.socket
    report_r: int
    started: float
    report: bytearray = field(default_factory=bytearray)


@dataclass
class _Stats:
    started: float = field(default_factory=time.time)
    served: int = 0
    last_run: dict[str, Any] | None = None


def _allowed_roots() -> tuple[str, ...]:
    """Where a module must live for the daemon to import it after a child used it: the
    interpreter's library, site-packages, and nel's own packages (all in the fingerprint)."""
    import sysconfig

    paths = sysconfig.get_paths()
    roots = {paths["stdlib"], paths["platstdlib"], paths["purelib"], paths["platlib"]}
    roots |= {str(Path(daemon_paths.__file__).resolve().parents[1] / p) for p in daemon_paths.PACKAGES}
    return tuple(sorted(os.path.realpath(r) + os.sep for r in roots))


def _warm(names: list[str], roots: tuple[str, ...]) -> int:
    """Import the listed modules that are not loaded yet and live under `roots`; returns
    how many were imported. A module that fails to import is skipped: the runs import it
    themselves."""
    import importlib.util

    done = 0
    for name in names:
        if name in sys.modules or name.startswith("__"):
            continue
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError, AttributeError):
            continue
        origin = spec.origin if spec is not None else None
        if not origin or not os.path.realpath(origin).startswith(roots):
            continue
        # Test modules and the like are not what a run needs; a module with side effects at
        # import is harmless here: each run is a fork and the daemon serves nothing itself.
        with contextlib.suppress(Exception):
            importlib.import_module(name)
            done += 1
    return done


class Daemon:
    """Serve `nel eval run` requests on `path` until stopped or idle for `idle_timeout` s."""

    def __init__(self, path: Path, idle_timeout: float, setting: str | None = None) -> None:
        self.path = path
        self.idle_timeout = idle_timeout
        # Its starter's `daemon_paths.setting_key()` (None: not given, never retired).
        self.setting = setting
        self.runs: dict[int, _Run] = {}
        self.stats = _Stats()
        self.roots = _allowed_roots()
        self.stopping = False
        self.sel = selectors.DefaultSelector()

    def serve(self) -> None:
        """Listen, warm up, answer requests; remove the socket on the way out."""
        # Whoever can connect runs nel as this user: the folder and socket are the owner's only.
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # One daemon per code version: a second one (two `auto` runs starting together)
        # leaves at once, and the first keeps serving.
        import fcntl

        self.lock = os.open(self.path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"another nel daemon serves {self.path}: leaving", file=sys.stderr)
            return
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with daemon_paths.addressable(tmp) as name:
            lsock.bind(name)
        os.chmod(tmp, 0o600)
        lsock.listen(64)
        _warm(list(WARM_MODULES), self.roots)
        with contextlib.suppress(Exception):  # a run loads them itself then
            from dagster_project.instance_config import prepare_template
            from dagster_project.sqlite_storage import load_migrations

            load_migrations()
            prepare_template()
        self._settle()
        # The socket appears under its real name only once the daemon is warm: a client that
        # finds it gets the warm daemon, never a half-loaded one.
        os.replace(tmp, self.path)
        self._retire_stale()
        self.lsock = lsock
        self.inode = os.stat(self.path).st_ino
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, lambda *_: self._stop())
        self.wake_r, self.wake_w = wake_r, wake_w
        self.sel.register(lsock, selectors.EVENT_READ, "accept")
        self.sel.register(wake_r, selectors.EVENT_READ, "wake")
        idle_since = time.monotonic()
        try:
            while True:
                if self.stopping and not self.runs:
                    break
                timeout = None if self.runs else max(0.0, idle_since + self.idle_timeout - time.monotonic())
                if not self.runs and timeout == 0.0:
                    break
                for key, _ in self.sel.select(timeout):
                    self._dispatch(key)
                self._reap()
                if self.runs:
                    idle_since = time.monotonic()
        finally:
            self._unlink()

    def _settle(self) -> None:
        """After imports: hand freed memory back and freeze the heap, so a child's garbage
        collections never walk (and so never copy) the daemon's objects."""
        from nel_resources.runtime import heap

        gc.collect()
        heap.give_back_freed()
        gc.freeze()

    def _retire_stale(self) -> None:
        """Stop the daemons with this daemon's setting (interpreter, flags, checkout and
        start-up variables: `daemon_paths.setting`) that serve an older version of its code:
        no run is handed to them any more (the fingerprint moved on), so each would only
        hold its memory until its idle timeout. Editing nel and running it again at a
        terminal (`auto`) thus leaves one daemon, not one per edit. A daemon for another
        setting (another PYTHONPATH, say) still serves its callers and is left alone.
        Their running runs finish."""
        from dagster_project import daemon_client

        if self.setting is None:
            return
        for other in sorted(self.path.parent.glob("*.sock")):
            if other == self.path:
                continue
            try:
                st = daemon_client.request(str(other), {"cmd": "status"}, timeout=2.0)
                if st.get("setting") == self.setting:
                    daemon_client.request(str(other), {"cmd": "stop"}, timeout=2.0)
                    print(f"stopped the daemon of older code at {other} (pid {st.get('pid')})",
                          file=sys.stderr)
            except (OSError, ValueError):
                continue  # not answering: not ours to judge

    def _unlink(self) -> None:
        """Remove the socket file, unless it is already another daemon's (started after a
        stop while this one finishes its runs)."""
        with contextlib.suppress(OSError):
            if os.stat(self.path).st_ino == self.inode:
                self.path.unlink()

    def _stop(self) -> None:
        """Stop taking runs (the socket goes at once); the running ones finish."""
        if not self.stopping:
            self.stopping = True
            self._unlink()
            with contextlib.suppress(Exception):
                self.sel.unregister(self.lsock)
            self.lsock.close()

    def _dispatch(self, key: selectors.SelectorKey) -> None:
        if key.data == "accept":
            try:
                conn, _ = self.lsock.accept()
            except OSError:
                return
            self._request(conn)
        elif key.data == "wake":
            with contextlib.suppress(BlockingIOError, InterruptedError):
                os.read(self.wake_r, 4096)
        elif key.data[0] == "report":
            pid = key.data[1]
            run = self.runs.get(pid)
            data = os.read(key.fd, 65536) if run is not None else b""
            if data and run is not None:
                run.report += data
            else:
                self.sel.unregister(key.fd)
        elif key.data[0] == "caller":
            # The caller went away before its run ended (killed): the run ends too.
            pid = key.data[1]
            if pid in self.runs:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
                with contextlib.suppress(Exception):
                    self.sel.unregister(key.fileobj)

    def _request(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        try:
            msg, fds = _recv_frame(conn)
        except (OSError, ValueError):
            conn.close()
            return
        try:
            cmd = msg.get("cmd")
            if cmd == "status":
                conn.sendall(daemon_paths.pack(self._status()))
            elif cmd == "stop":
                self._stop()
                conn.sendall(daemon_paths.pack({"stopping": True, "running": len(self.runs)}))
            elif cmd == "run" and len(fds) == 3 and not self.stopping:
                self._fork(conn, msg, fds)
                return
            else:
                conn.sendall(daemon_paths.pack({"error": "not taken: the daemon is stopping"
                                                if self.stopping else f"unknown request {cmd!r}"}))
        except OSError:
            pass
        finally:
            for fd in fds:
                os.close(fd)
        conn.close()

    def _status(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "socket": str(self.path), "started": self.stats.started,
                "served": self.stats.served, "running": sorted(self.runs),
                "modules": len(sys.modules), "last_run": self.stats.last_run, "setting": self.setting}

    def _fork(self, conn: socket.socket, msg: dict[str, Any], fds: list[int]) -> None:
        report_r, report_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the run
            code = 70
            try:
                os.close(report_r)
                code = _child(msg, fds, report_w, self._own_fds(conn, fds, report_w))
            finally:
                os._exit(code)
        os.close(report_w)  # the caller's descriptors are closed by _request
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)  # also in the child: whichever runs first
        self.runs[pid] = _Run(conn, report_r, time.time())
        self.stats.served += 1
        try:
            conn.sendall(daemon_paths.pack({"pid": pid}))
        except OSError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        conn.setblocking(False)
        self.sel.register(conn, selectors.EVENT_READ, ("caller", pid))
        self.sel.register(report_r, selectors.EVENT_READ, ("report", pid))

    def _own_fds(self, conn: socket.socket, fds: list[int], keep: int) -> list[int]:
        """The daemon's descriptors a child must close (it keeps its terminal and report pipe)."""
        own = [self.lsock.fileno(), self.wake_r, self.wake_w, conn.fileno(), self.sel.fileno()]
        for run in self.runs.values():
            own += [run.conn.fileno(), run.report_r]
        return [fd for fd in own if fd not in fds and fd != keep]

    def _reap(self) -> None:
        while self.runs:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            run = self.runs.pop(pid, None)
            if run is None:
                continue
            with contextlib.suppress(OSError):
                while chunk := os.read(run.report_r, 65536):
                    run.report += chunk
            for obj in (run.conn, run.report_r):
                with contextlib.suppress(KeyError, ValueError):
                    self.sel.unregister(obj)
            os.close(run.report_r)
            code = os.waitstatus_to_exitcode(status)
            if code < 0:  # ended by a signal: the shell's convention
                code = 128 - code
            cpu = usage.ru_utime + usage.ru_stime
            self.stats.last_run = {"pid": pid, "exit": code, "cpu_s": round(cpu, 4),
                                   "maxrss_mb": round(usage.ru_maxrss / 1024, 1),
                                   "wall_s": round(time.time() - run.started, 4)}
            with contextlib.suppress(OSError):
                run.conn.setblocking(True)
                run.conn.sendall(daemon_paths.pack({"exit": code, **self.stats.last_run}))
            run.conn.close()
            names = bytes(run.report).decode(errors="replace").split()
            if names and _warm(names, self.roots):
                self._settle()


def _recv_frame(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """One frame (and the descriptors sent with its first bytes)."""
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    if len(data) < 4:
        raise ValueError("short frame")
    size = daemon_paths.frame_length(data[:4])
    buf = bytearray(data[4:])
    while len(buf) < size:
        chunk = conn.recv(size - len(buf))
        if not chunk:
            raise ValueError("truncated frame")
        buf += chunk
    return json.loads(bytes(buf)), list(fds)


def _child(msg: dict[str, Any], fds: list[int], report_w: int, close: list[int]) -> int:
    """Become the caller's `nel eval run`: its terminal, environment, directory and
    arguments, default signal handling, then the CLI; returns the exit status."""
    loaded = set(sys.modules)  # the daemon's: only what the run adds is reported back
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for fd in close:
        with contextlib.suppress(OSError):
            os.close(fd)
    for target, fd in enumerate(fds):
        os.dup2(fd, target, inheritable=True)
        os.close(fd)
    os.environ.clear()
    os.environ.update(msg.get("env") or {})
    os.environ["NEL_DAEMON"] = "off"  # the run itself never hands off again
    os.chdir(msg["cwd"])
    os.umask(int(msg.get("umask", 0o022)))
    argv = [str(a) for a in msg.get("argv") or []]
    sys.argv = ["nel", *argv]
    # The caller's import path (its script's folder or working directory first): a module
    # the run imports (a user's benchmark) is found where the caller would find it.
    if msg.get("sys_path"):
        import importlib

        sys.path[:] = [str(p) for p in msg["sys_path"]]
        importlib.invalidate_caches()
    _reopen_stdio()
    # The daemon's objects stay frozen (gc.freeze): alive for good, never walked by the
    # run's collections, so their pages stay shared with the daemon.
    code = 1
    try:
        from dagster_project.cli.main import main

        code = int(main(argv) or 0)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, int) and exc.code is not None:
            print(exc.code, file=sys.stderr)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = 130
    except BaseException:  # a crash prints its traceback, as the process would
        import traceback

        traceback.print_exc()
        code = 1
    # Never blocks the run's exit: what does not fit in the pipe is left out (the daemon
    # may be busy importing an earlier report).
    os.set_blocking(report_w, False)
    report = "\n".join(sorted(set(sys.modules) - loaded)).encode()
    if len(report) > 65536:
        report = report[:report.rfind(b"\n", 0, 65536)]  # whole names only
    with contextlib.suppress(OSError):
        os.write(report_w, report)
    os.close(report_w)
    import atexit

    atexit._run_exitfuncs()  # what the run registered: temp dirs, child processes, logging
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    return code


def _reopen_stdio() -> None:
    """Python chose the daemon's stdio buffering at its start (no terminal): the run's
    streams are opened again over the caller's descriptors, line-buffered on a terminal."""
    import io

    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8", errors="replace")
    for fd, name in ((1, "stdout"), (2, "stderr")):
        tty = os.isatty(fd)
        raw = io.FileIO(fd, "w", closefd=False)
        stream = io.TextIOWrapper(io.BufferedWriter(raw), encoding="utf-8",
                                  errors="backslashreplace" if fd == 2 else "strict",
                                  line_buffering=tty or fd == 2, write_through=fd == 2)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def main(argv: list[str] | None = None) -> int:
    """`python -m dagster_project.daemon_server SOCKET IDLE_TIMEOUT [SETTING]` (what `nel
    daemon start` launches, detached; SETTING is the starter's `daemon_paths.setting_key()`)."""
    args = sys.argv[1:] if argv is None else argv
    Daemon(Path(args[0]), float(args[1]), args[2] if len(args) > 2 else None).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
