"""The scoring side of `nel serve`'s worker pool: the zygote, the workers, and their framing.

`benchmarks.serve_pool` (the server side) forks a zygote holding the loaded benchmark; the
zygote forks one worker per socket the server sends it. A worker reads requests in batches
(whatever has arrived), scores them in order on one persistent event loop and answers the
batch in one write: a server that sends a burst of requests at once wakes the worker once
and is woken once, rather than once per request (the wake-ups were most of the pool's cost).

Frames are a 4-byte big-endian length and a payload. A request payload is JSON
`{text, expected, kwargs}`; a reply payload is one flag byte and then either the verdict as
JSON (`K`: scored; the server can answer with these bytes as they are) or an error message
(`E`: the scorer failed; `R`: it failed and the worker retires, e.g. after a `MemoryError`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import resource
import signal
import socket
import struct
import time
from typing import Any

from benchmarks.serve_json import dumps, loads

__all__ = ["HEADER", "REPLY_OK", "REPLY_RETIRE", "die_with_parent", "frame", "recv_exact",
           "split_frames", "zygote_main"]

HEADER = struct.Struct("!I")
#: Flag byte of a reply carrying a verdict.
REPLY_OK = ord("K")
#: Flag byte of an error reply after which the worker exits.
REPLY_RETIRE = ord("R")
_PR_SET_PDEATHSIG = 1
# A batch of slow scorers answers what it has so far after this long, so a fast verdict
# does not wait for the slow ones queued behind it.
_FLUSH_AFTER_S = 0.002


def die_with_parent() -> None:
    """Get SIGKILL when the parent exits (Linux); exit now if it already has."""
    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(0)


def recv_exact(sock: socket.socket, n: int) -> bytes | None:
    """Exactly `n` bytes from a blocking socket; None if it closes first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def split_frames(buf: bytearray) -> list[bytes]:
    """Remove every complete frame from the front of `buf`; return their payloads."""
    frames: list[bytes] = []
    pos, total, size = 0, len(buf), HEADER.size
    while total - pos >= size:
        (n,) = HEADER.unpack_from(buf, pos)
        end = pos + size + n
        if end > total:
            break
        frames.append(bytes(buf[pos + size : end]))
        pos = end
    if pos:
        del buf[:pos]
    return frames


def frame(payload: bytes) -> bytes:
    """`payload` with its length header."""
    return HEADER.pack(len(payload)) + payload


# --------------------------------------------------------------------------- worker


def _limit_memory(extra_bytes: int | None) -> None:
    """Cap the address space at what the worker holds now plus `extra_bytes`."""
    if extra_bytes is None:
        return
    try:
        with open("/proc/self/statm") as fh:
            current = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return
    limit = current + extra_bytes
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


async def _score(env: Any, request: bytes) -> bytes:
    """One reply payload (flag byte included) for one request."""
    from benchmarks._types import VerifyResult

    flag, message = b"E", ""
    try:
        req = loads(request)
        result = await env.verify(req["text"], req["expected"], **req["kwargs"])
        if not isinstance(result, VerifyResult):
            message = "scorer returned no VerifyResult"
        else:
            try:
                return b"K" + dumps(result.to_dict())
            except Exception as exc:
                message = f"verdict not serialisable: {exc}"
    except MemoryError:
        # Fragmented and near its cap: answer, then make way for a fresh worker.
        flag = b"R"
        message = "scorer failed: MemoryError: the scorer exceeded its memory limit"
    except BaseException as exc:  # the request gets the error; the worker carries on
        message = f"scorer failed: {type(exc).__name__}: {exc}"
    return flag + message[:500].encode("utf-8", "replace")


async def _score_batch(sock: socket.socket, env: Any, requests: list[bytes]) -> bool:
    """Score `requests` in order, answering in as few writes as latency allows.

    Returns:
        False when the worker must retire (its last reply says so).
    """
    out: list[bytes] = []
    flushed = time.monotonic()
    for request in requests:
        reply = await _score(env, request)
        out.append(frame(reply))
        if reply[0] == REPLY_RETIRE:
            sock.sendall(b"".join(out))
            return False
        now = time.monotonic()
        if now - flushed > _FLUSH_AFTER_S:
            sock.sendall(b"".join(out))
            out.clear()
            flushed = now
    if out:
        sock.sendall(b"".join(out))
    return True


def _worker_main(sock: socket.socket, env: Any, memory_bytes: int | None) -> None:
    """Score requests from `sock` until it closes (or the worker retires)."""
    _limit_memory(memory_bytes)
    # One loop for the worker's life (async `verify` needs one; a loop per request was the
    # old design's main cost), and one task per batch rather than per request.
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    buf = bytearray()
    while True:
        requests = split_frames(buf)
        if not requests:
            chunk = sock.recv(1 << 16)
            if not chunk:
                return
            buf += chunk
            continue
        if not loop.run_until_complete(_score_batch(sock, env, requests)):
            return


def zygote_main(control: socket.socket, env: Any, memory_bytes: int | None) -> None:
    """Fork a worker for each socket the server sends; answer with the worker's PID."""
    # Children are reaped by the kernel: a killed worker vanishes at once.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    while True:
        try:
            _, fds, _, _ = socket.recv_fds(control, 16, 1)
        except OSError:
            return
        if not fds:
            return  # the server closed the control socket
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                control.close()
                die_with_parent()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                with socket.socket(fileno=fds[0]) as sock:
                    _worker_main(sock, env, memory_bytes)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(fds[0])
        control.sendall(HEADER.pack(pid))
