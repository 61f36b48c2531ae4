"""Host endpoints a no-network sandbox may reach: Unix sockets relayed to 127.0.0.1 ports.

A `docker` sandbox has no network (`--network none`): its only interface is its own
loopback. To let an agent inside reach exactly the host services it needs (nel's capture
proxy, the search relay) and nothing else, nel serves one Unix socket per allowed port in
a directory that is bind-mounted into the container; every connection to `<dir>/<port>.sock`
is piped to `127.0.0.1:<port>` on the host. Inside, a small bridge listens on the container's
own `127.0.0.1:<port>` and connects to the socket, so URLs stay the same on both sides.
A socket is a file, not a route: no other host port and no outside address is reachable.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["UnixRelay"]

_CHUNK = 1 << 16


class UnixRelay:
    """Serves `<dir>/<port>.sock` -> `127.0.0.1:<port>` for each allowed port.

    Args:
        ports: the host ports on 127.0.0.1 a sandbox may reach.
    """

    def __init__(self, ports: list[int]) -> None:
        self.ports = list(ports)
        self.dir: Path | None = None
        self._servers: list[asyncio.AbstractServer] = []
        self._conns: set[asyncio.Task[None]] = set()

    async def start(self) -> Path:
        """Create the socket directory and listen; returns the directory (mount it)."""
        # Short path: a Unix socket path holds ~107 bytes.
        self.dir = Path(tempfile.mkdtemp(prefix="nel-uds-", dir="/tmp"))
        self.dir.chmod(0o755)  # the sandbox's unprivileged uid must reach the sockets
        for port in self.ports:
            path = self.dir / f"{port}.sock"
            server = await asyncio.start_unix_server(
                lambda r, w, p=port: self._track(self._pipe(r, w, p)), path=str(path))
            os.chmod(path, 0o777)  # connect() needs write permission on the socket file
            self._servers.append(server)
        return self.dir

    def _track(self, coro: object) -> None:
        task = asyncio.ensure_future(coro)  # type: ignore[arg-type]
        self._conns.add(task)
        task.add_done_callback(self._conns.discard)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    port: int) -> None:
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(_copy(reader, up_w), _copy(up_r, writer))
        finally:
            for w in (up_w, writer):
                w.close()

    async def stop(self) -> None:
        """Close the listeners and open connections, remove the directory. Safe twice."""
        for server in self._servers:
            server.close()
        self._servers.clear()
        for task in list(self._conns):
            task.cancel()
        for task in list(self._conns):
            with contextlib.suppress(BaseException):
                await task
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


async def _copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while data := await src.read(_CHUNK):
            dst.write(data)
            await dst.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if dst.can_write_eof():
                dst.write_eof()
            else:
                dst.close()
