"""Child processes we start and must be able to stop: model servers, test doubles.

Background processes on these machines inherit an *ignored* SIGTERM, and ignored
signals survive ``exec``. A server started naively therefore cannot be stopped politely,
and anything it forks outlives it. ``ManagedProcess`` fixes both: every child gets its own
session (so the whole tree shares one process group we can signal), default SIGTERM/SIGINT
dispositions are restored before ``exec``, and ``stop()`` escalates from SIGTERM to SIGKILL
on the *group*, not just the leader. An ``atexit`` hook kills whatever is still running.

No Dagster here: this module is imported by tests, benchmarks and the reference server.
"""

from __future__ import annotations

import atexit
import contextlib
import http.client
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from urllib.parse import urlsplit

__all__ = [
    "ALLOWED_HOSTS",
    "HealthCheckError",
    "ManagedProcess",
    "ProcessExitedError",
    "ProgressDeadline",
    "free_port",
    "group_cpu_seconds",
    "pid_alive",
    "process_group_members",
    "start_on_free_port",
    "wait_for_port_file",
]

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
#: A progress deadline reads CPU at most this often: listing /proc on every 50 ms health poll
#: costs more than the check is worth, and clock ticks are 10 ms anyway.
_CPU_READ_EVERY_S = 0.5

#: Health checks only ever target the loopback interface.
ALLOWED_HOSTS = frozenset({"127.0.0.1", "localhost"})

_LIVE: set[ManagedProcess] = set()
_LIVE_LOCK = threading.Lock()


class HealthCheckError(TimeoutError):
    """The process did not become healthy in time; the message carries its log tail."""


class ProcessExitedError(RuntimeError):
    """The process exited while we were waiting for it; the message carries its log tail."""


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that was free a moment ago, chosen by the kernel (bind to port 0).

    Another process may grab it before you use it; prefer letting the server bind port 0
    itself and report its port when it can.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _stat_fields(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the command (field 3, the state, first), or None
    when the process does not exist."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    return raw[raw.rfind(b")") + 2 :].split()


def _read_proc_stat(pid: int) -> tuple[str, int] | None:
    """Return ``(state, pgrp)`` of a Linux process, or None when it does not exist."""
    fields = _stat_fields(pid)
    return None if fields is None else (fields[0].decode(), int(fields[2]))


def _group_stats(pgid: int) -> list[list[bytes]] | None:
    """The stat fields (as `_stat_fields`) of every process in group ``pgid``, zombies
    included; None where /proc cannot be listed."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    found = []
    for entry in entries:
        if entry.isdigit() and (fields := _stat_fields(int(entry))) is not None \
                and int(fields[2]) == pgid:
            found.append(fields)
    return found


def group_cpu_seconds(pgid: int) -> float | None:
    """CPU seconds (user + system, own and reaped children's) used by the processes of group
    ``pgid``; None where /proc cannot be read."""
    stats = _group_stats(pgid)
    if stats is None:
        return None
    # utime, stime, cutime, cstime: fields 14-17 of the whole line, 11-14 after the command.
    return sum(int(f) for fields in stats for f in fields[11:15]) / _TICKS


def pid_alive(pid: int) -> bool:
    """True when ``pid`` is a live (non-zombie) process.

    A killed grandchild lingers as a zombie until its new parent reaps it; it no longer
    runs, so it counts as gone.
    """
    stat = _read_proc_stat(pid)
    if stat is not None:
        return stat[0] not in ("Z", "X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not Path("/proc").is_dir()


def process_group_members(pgid: int) -> list[int]:
    """PIDs of the live (non-zombie) processes in process group ``pgid`` (Linux /proc)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    members = []
    for entry in entries:
        stat = _read_proc_stat(int(entry)) if entry.isdigit() else None
        if stat is not None and stat[1] == pgid and stat[0] not in ("Z", "X"):
            members.append(int(entry))
    return members


def _restore_default_signals() -> None:
    """Run in the child between fork and exec: undo inherited SIG_IGN and blocked masks."""
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def _check_local_url(url: str) -> None:
    host = urlsplit(url).hostname
    if host not in ALLOWED_HOSTS:
        raise ValueError(f"refusing to probe {url!r}: only 127.0.0.1 is ever a target")


# A start-up deadline that a busy machine does not break. A fixed deadline on a process
# starting is a hang detector, and a poor one: on a loaded machine an interpreter importing
# its dependencies can take many times its idle start-up time while making steady progress.
# ProgressDeadline tells the two apart: it expires when the process group has used no CPU for
# `stall` seconds (hung: blocked on a lock, a pipe, a dead peer), or at the generous
# `ceiling`, whichever comes first. Linux only (/proc); elsewhere the ceiling alone counts.
class ProgressDeadline:
    """Expires after ``stall`` seconds without CPU progress of group ``pgid``, or at ``ceiling``.

    Args:
        pgid: The process group to watch (a ``ManagedProcess``'s pid).
        stall: Seconds without any CPU use after which the start counts as hung.
        ceiling: Seconds after which the wait ends however busy the group is.
        watch: False for a plain wall-clock deadline at ``ceiling`` (``stall`` unused).
    """

    def __init__(self, pgid: int, *, stall: float, ceiling: float, watch: bool = True) -> None:
        now = time.monotonic()
        self.pgid = pgid
        self.stall = stall if watch else ceiling
        self.ceiling = ceiling
        self.watch = watch
        self._start = now
        self._last_progress = now
        self._last_read = now
        self._cpu = group_cpu_seconds(pgid) if watch else None

    def _observe(self, now: float) -> None:
        if not self.watch or now - self._last_read < _CPU_READ_EVERY_S:
            return
        self._last_read = now
        cpu = group_cpu_seconds(self.pgid)
        if cpu is not None and (self._cpu is None or cpu > self._cpu):
            self._cpu = cpu
            self._last_progress = now

    def remaining(self) -> float:
        """Seconds left (0 when expired); reads the group's CPU now and then."""
        now = time.monotonic()
        self._observe(now)
        left_stall = self._last_progress + self.stall - now
        left_ceiling = self._start + self.ceiling - now
        return max(min(left_stall, left_ceiling), 0.0)

    def expired(self) -> bool:
        """True once the group stalled for ``stall`` seconds or ``ceiling`` has passed."""
        return self.remaining() <= 0.0

    def describe(self) -> str:
        """Why it expired, for an error message."""
        now = time.monotonic()
        waited = now - self._start
        if not self.watch or now - self._start >= self.ceiling:
            return f"not ready after {waited:.1f}s"
        return (f"no CPU progress for {now - self._last_progress:.1f}s "
                f"(waited {waited:.1f}s in all)")


class ManagedProcess:
    """A child process in its own session, logging to a kept file, stoppable as a group.

    Example:
        >>> with ManagedProcess([sys.executable, "-m", "http.server", "0"]) as proc:
        ...     proc.wait_healthy("http://127.0.0.1:8000/", timeout=10)

    Args:
        argv: The command and its arguments (no shell).
        log_path: Where stdout and stderr go; a fresh temp file when omitted. Kept after stop.
        env: Extra environment variables layered over ``os.environ``.
        cwd: Working directory of the child.
        name: Label used in the temp log file name and in error messages.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        log_path: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        name: str | None = None,
    ) -> None:
        if not argv:
            raise ValueError("argv must not be empty")
        self.argv: list[str] = [str(a) for a in argv]
        self.name: str = name or Path(self.argv[0]).name
        if log_path is None:
            fd, tmp = tempfile.mkstemp(prefix=f"nel-{self.name}-", suffix=".log")
            os.close(fd)
            log_path = tmp
        self.log_path: Path = Path(log_path)
        self._env = dict(env) if env else None
        self._cwd = cwd
        self._popen: subprocess.Popen[bytes] | None = None
        self._stopped = False
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> ManagedProcess:
        """Start the child; returns ``self`` so ``ManagedProcess(...).start()`` chains."""
        if self._popen is not None:
            raise RuntimeError(f"{self.name} was already started")
        env = {**os.environ, **self._env} if self._env is not None else None
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self._cwd,
                # Own session => own process group, so stop() can signal the whole tree.
                start_new_session=True,
                preexec_fn=_restore_default_signals,
                close_fds=True,
            )
        with _LIVE_LOCK:
            _LIVE.add(self)
        return self

    @property
    def pid(self) -> int:
        """PID of the child (also its process-group id)."""
        if self._popen is None:
            raise RuntimeError(f"{self.name} is not started")
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        """Exit status once stopped/reaped (negative = killed by that signal), else None."""
        return None if self._popen is None else self._popen.returncode

    def _leader_exited(self) -> bool:
        """Whether the leader exited, *without reaping it*.

        While the leader is an unreaped zombie its PID (= our PGID) cannot be reused, so
        signalling the group stays safe until we reap it ourselves at the very end of stop().
        """
        assert self._popen is not None
        if self._popen.returncode is not None:
            return True
        try:
            info = os.waitid(os.P_PID, self._popen.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None

    def is_running(self) -> bool:
        """True while the leader process has not exited."""
        return self._popen is not None and not self._leader_exited()

    def stop(self, grace: float = 5.0) -> int | None:
        """SIGTERM the process group, SIGKILL it after ``grace`` seconds; idempotent.

        Waits for the leader *and* any other group member (forked workers, grandchildren) so
        nothing started here outlives the call.

        Returns:
            The leader's exit status (negative for a signal), or None if never started.
        """
        with self._lock:
            if self._popen is None:
                return None
            if self._stopped:
                return self._popen.returncode
            self._stopped = True
            pgid = self._popen.pid
            deadline = time.monotonic() + max(grace, 0.0)
            self._signal_group(pgid, signal.SIGTERM)
            delay = 0.005
            while time.monotonic() < deadline:
                if self._leader_exited() and not process_group_members(pgid):
                    break
                time.sleep(delay)
                delay = min(delay * 2, 0.1)
            else:
                self._signal_group(pgid, signal.SIGKILL)
            # Stragglers that survived the leader's graceful exit (SIGTERM ignored) die here.
            if process_group_members(pgid):
                self._signal_group(pgid, signal.SIGKILL)
            try:
                self._popen.wait(timeout=max(grace, 5.0))
            except subprocess.TimeoutExpired:
                # Only possible if SIGKILL could not be delivered (e.g. uninterruptible I/O).
                self._popen.kill()
                self._popen.wait()
            with _LIVE_LOCK:
                _LIVE.discard(self)
            return self._popen.returncode

    @staticmethod
    def _signal_group(pgid: int, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signum)

    def __enter__(self) -> ManagedProcess:
        if self._popen is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ observation
    def log_tail(self, max_bytes: int = 4000) -> str:
        """The last ``max_bytes`` of the log file, decoded leniently."""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - max_bytes))
                return fh.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def wait_healthy(self, url: str, timeout: float = 30.0, interval: float = 0.05, *,
                     stall: float | None = None,
                     deadline: ProgressDeadline | None = None) -> None:
        """Poll ``url`` with GET until it answers 200.

        Args:
            url: A 127.0.0.1/localhost URL.
            timeout: Seconds to wait in all (with ``stall``: the ceiling).
            interval: Seconds between polls.
            stall: When given, give up earlier only if the process group has used no CPU for
                this many seconds: a start slowed by a loaded machine is waited for up to
                ``timeout``, a hung one is not (see :class:`ProgressDeadline`).
            deadline: A deadline already running (a wait that began before the health
                poll, e.g. for a port file); overrides ``timeout`` and ``stall``.

        Raises:
            ProcessExitedError: The process exited first (message has the log tail).
            HealthCheckError: the deadline passed (a TimeoutError; message has the log tail).
            ValueError: ``url`` is not on 127.0.0.1/localhost.
        """
        _check_local_url(url)
        if self._popen is None:
            raise RuntimeError(f"{self.name} is not started")
        parts = urlsplit(url)
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        if deadline is None:
            deadline = ProgressDeadline(self._popen.pid, stall=timeout if stall is None else stall,
                                        ceiling=timeout, watch=stall is not None)
        last_error = "no attempt made"
        while True:
            if self._leader_exited():
                self._popen.poll()
                raise ProcessExitedError(
                    f"{self.name} (pid {self.pid}) exited with status {self._popen.returncode} "
                    f"before {url} became healthy; log {self.log_path} ends with:\n"
                    f"{self.log_tail()}"
                )
            remaining = deadline.remaining()
            if remaining <= 0:
                raise HealthCheckError(
                    f"{self.name} (pid {self.pid}) not healthy at {url}: {deadline.describe()} "
                    f"(last: {last_error}); log {self.log_path} ends with:\n{self.log_tail()}"
                )
            try:
                status = _http_get_status(
                    parts.hostname or "127.0.0.1",
                    parts.port or 80,
                    path,
                    timeout=min(max(remaining, 0.05), 5.0),
                )
                if status == 200:
                    return
                last_error = f"HTTP {status}"
            except (OSError, http.client.HTTPException) as exc:
                last_error = f"{type(exc).__name__}: {exc}"
            time.sleep(min(interval, deadline.remaining()))

    def __repr__(self) -> str:
        pid = self._popen.pid if self._popen else None
        return f"ManagedProcess(name={self.name!r}, pid={pid}, log={str(self.log_path)!r})"


def wait_http_ok(url: str, timeout: float, alive: Callable[[], bool] | None = None,
                 interval: float = 0.2) -> None:
    """Poll `url` (127.0.0.1/localhost) with GET until it answers 200, for a server that is
    not a process of ours (a container): `alive()` is asked about once a second.

    Raises:
        HealthCheckError: `timeout` passed, or `alive()` said the server is gone.
    """
    _check_local_url(url)
    parts = urlsplit(url)
    deadline = time.monotonic() + timeout
    last_error, next_alive = "no attempt made", 0.0
    while True:
        now = time.monotonic()
        if alive is not None and now >= next_alive:
            next_alive = now + 1.0
            if not alive():
                raise HealthCheckError(f"the server exited before {url} became healthy "
                                       f"(last: {last_error})")
        if now >= deadline:
            raise HealthCheckError(f"not healthy at {url} after {timeout:g} s (last: {last_error})")
        try:
            status = _http_get_status(parts.hostname or "127.0.0.1", parts.port or 80,
                                      parts.path or "/", timeout=min(max(deadline - now, 0.05), 5.0))
            if status == 200:
                return
            last_error = f"HTTP {status}"
        except (OSError, http.client.HTTPException) as exc:
            last_error = f"{type(exc).__name__}: {exc}"
        time.sleep(min(interval, max(deadline - time.monotonic(), 0.0)))


def _http_get_status(host: str, port: int, path: str, timeout: float) -> int:
    """One GET without any proxy (http.client never reads *_proxy variables)."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"Connection": "close"})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


@atexit.register
def _kill_leftovers() -> None:
    """Safety net: never leave a server we started running after the interpreter exits."""
    with _LIVE_LOCK:
        leftovers = list(_LIVE)
    for proc in leftovers:
        with contextlib.suppress(Exception):
            proc.stop(grace=1.0)


def start_on_free_port(
    make: Callable[[int], ManagedProcess],
    health_url: Callable[[int], str],
    *,
    timeout: float = 30.0,
    attempts: int = 3,
    stall: float | None = None,
) -> tuple[ManagedProcess, int]:
    """Start a server that must be told its port, retrying on a fresh port if it loses one.

    Servers such as llama_cpp.server or dagster-webserver cannot bind port 0 and report
    it, so a free port is picked first; if another process grabs it in between, the
    server exits at once and a new port is tried.

    Args:
        make: Builds the (not yet started) process for a port.
        health_url: The URL that answers 200 once the server on that port is ready.
        timeout: Seconds to wait for health on each attempt (with ``stall``: the ceiling).
        attempts: Ports to try.
        stall: Fail an attempt early only after this many seconds without CPU progress
            (see :meth:`ManagedProcess.wait_healthy`).

    Returns:
        The healthy process and its port.

    Raises:
        HealthCheckError: no attempt became healthy (the last failure is chained).
    """
    last: BaseException | None = None
    for _ in range(attempts):
        port = free_port()
        proc = make(port).start()
        try:
            proc.wait_healthy(health_url(port), timeout=timeout, stall=stall)
        except ProcessExitedError as exc:
            proc.stop()
            last = exc
            continue
        except BaseException:
            proc.stop()
            raise
        return proc, port
    raise HealthCheckError(f"no healthy server after {attempts} ports: {last}") from last


def wait_for_port_file(proc: ManagedProcess, port_file: Path, *, what: str,
                       timeout: float = 600.0, stall: float = 30.0) -> int:
    """Wait until a server that binds port 0 writes its port to `port_file` and answers
    `/health` on it; returns the port.

    The wait ends early only when the server's process group has used no CPU for `stall`
    seconds (hung), else at the `timeout` ceiling: a start slowed by a loaded machine keeps
    progressing and is waited for (see :class:`ProgressDeadline`).

    Raises:
        ProcessExitedError: the server exited first (the message has its log tail).
        HealthCheckError: it stalled, or was not ready by the ceiling.
    """
    deadline = ProgressDeadline(proc.pid, stall=stall, ceiling=timeout)
    while True:
        if not proc.is_running():
            raise ProcessExitedError(f"{what} exited before listening; log:\n{proc.log_tail()}")
        try:
            port = int(port_file.read_text())
            break
        except (FileNotFoundError, ValueError):  # not written yet, or half written
            pass
        if deadline.expired():
            raise HealthCheckError(f"{what} wrote no port file: {deadline.describe()}; "
                                   f"log:\n{proc.log_tail()}")
        time.sleep(0.01)
    proc.wait_healthy(f"http://127.0.0.1:{port}/health", deadline=deadline)
    return port
