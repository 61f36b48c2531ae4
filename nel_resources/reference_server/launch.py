"""`start_reference_server`: run the reference server as a child process (tests, bench/)."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from nel_resources.reference_server.config import ServerConfig

if TYPE_CHECKING:
    from nel_resources.runtime.processes import ManagedProcess


def cli_args(opts: Mapping[str, Any]) -> list[str]:
    """The command-line flags of `ServerConfig` options given as keyword arguments."""
    known = {f.name for f in fields(ServerConfig)} - {"host", "port", "port_file"}
    argv: list[str] = []
    for key, value in opts.items():
        if key not in known:
            raise TypeError(f"unknown reference server option {key!r}; known: {sorted(known)}")
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        else:
            argv += [flag, str(value)]
    return argv


def start_reference_server(
    *, timeout: float = 600.0, stall: float = 30.0,
    log_path: str | os.PathLike[str] | None = None, **opts: Any
) -> tuple[ManagedProcess, str]:
    """Launch the reference server as a child process and wait until it is healthy.

    Args:
        timeout: Ceiling, in seconds, on the wait for the port file and ``/health``.
        stall: Give up earlier when the server has used no CPU for this many seconds (hung);
            a start slowed by a loaded machine keeps progressing and is waited for.
        log_path: Where the server's output goes (a temp file by default).
        **opts: ``ServerConfig`` fields, e.g. ``fail_rate=0.2, reasoning_mode="think"``.
            ``answers`` and ``tool_script`` may also be lists of row dicts (written to
            temp JSONL files).

    Returns:
        The running :class:`ManagedProcess` (stop it!) and the base URL ending in ``/v1``.
    """
    from nel_resources.runtime.processes import ManagedProcess, wait_for_port_file

    workdir = Path(tempfile.mkdtemp(prefix="nel-refserver-"))
    for key in ("answers", "tool_script"):
        rows = opts.get(key)
        if rows is not None and not isinstance(rows, (str, os.PathLike)):
            path = workdir / f"{key}.jsonl"
            path.write_bytes(b"".join(orjson.dumps(dict(r)) + b"\n" for r in rows))
            opts[key] = str(path)
    port_file = workdir / "port"
    # -P: do not put this package's folder on sys.path (its modules could shadow the stdlib);
    # `__main__.py` puts this checkout's root first instead, so the child runs this code.
    argv = [
        sys.executable,
        "-P",
        str(Path(__file__).resolve().with_name("__main__.py")),
        "--port",
        "0",
        "--port-file",
        str(port_file),
        *cli_args(opts),
    ]
    proc = ManagedProcess(
        argv, name="reference-server", log_path=log_path or workdir / "server.log"
    ).start()
    try:
        port = wait_for_port_file(proc, port_file, what="the reference server", timeout=timeout,
                                  stall=stall)
    except BaseException:
        proc.stop()
        raise
    return proc, f"http://127.0.0.1:{port}/v1"
