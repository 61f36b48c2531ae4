"""Loaded at start-up by any Python process with this folder on PYTHONPATH: no network.

Every name lookup or connection to anything but the loopback interface (or a Unix socket)
is refused with OSError and recorded, one line each, in the file named by
`NEL_NETGUARD_LOG`, so a test can assert that a whole process (a `dagster` command, say)
never tried to reach the network, not merely that it coped with failing to.
"""

from __future__ import annotations

import os
import socket
import traceback

_LOG = os.environ.get("NEL_NETGUARD_LOG")
_LOCAL = {"127.0.0.1", "::1", "localhost", "0.0.0.0", "", None}
_getaddrinfo = socket.getaddrinfo
_connect = socket.socket.connect
_connect_ex = socket.socket.connect_ex


def _refuse(what: str) -> OSError:
    if _LOG:
        where = "".join(traceback.format_stack(limit=12)[:-2]).replace("\n", " | ")
        with open(_LOG, "a", encoding="utf-8") as fh:
            fh.write(f"{what} from pid {os.getpid()}: {where}\n")
    return OSError(f"network access refused by the test guard: {what}")


def _guarded_getaddrinfo(host, *args, **kwargs):  # type: ignore[no-untyped-def]
    name = host.decode() if isinstance(host, bytes) else host
    if name not in _LOCAL:
        raise _refuse(f"getaddrinfo({name!r})")
    return _getaddrinfo(host, *args, **kwargs)


def _remote(sock: socket.socket, address: object) -> bool:
    if sock.family == socket.AF_UNIX or not isinstance(address, tuple):
        return False
    return address[0] not in _LOCAL


def _guarded_connect(self, address):  # type: ignore[no-untyped-def]
    if _remote(self, address):
        raise _refuse(f"connect({address!r})")
    return _connect(self, address)


def _guarded_connect_ex(self, address):  # type: ignore[no-untyped-def]
    if _remote(self, address):
        raise _refuse(f"connect_ex({address!r})")
    return _connect_ex(self, address)


socket.getaddrinfo = _guarded_getaddrinfo
socket.socket.connect = _guarded_connect  # type: ignore[method-assign]
socket.socket.connect_ex = _guarded_connect_ex  # type: ignore[method-assign]
