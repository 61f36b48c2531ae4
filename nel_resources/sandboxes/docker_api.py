"""`docker exec` through the Engine's HTTP API on its unix socket, without the CLI.

Each `docker exec` through the CLI starts a Go binary that then makes the same API calls;
on a 2-core machine that start costs about as much as the exec itself. Here an exec is
three requests on the engine's socket (create, start with the output streamed back,
inspect for the exit code), and the running command looks like an asyncio subprocess to
`capture.capture` (stdout/stderr readers, `wait()`, `returncode`).

Only what the sandbox needs: no stdin (a command with stdin goes through the CLI), no TTY.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import struct
from urllib.parse import quote

import aiohttp

#: Engine API version spoken (Docker 20.10 speaks 1.41; newer engines accept older ones).
API = "v1.41"
_HEADER = struct.Struct(">BxxxL")


def engine_socket() -> str | None:
    """The engine's unix socket from DOCKER_HOST (the default socket if unset), or None
    when the engine is reached another way (then callers use the CLI)."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if host.startswith("unix://"):
        path = host[len("unix://"):]
        return path if os.path.exists(path) else None
    return None


class EngineError(Exception):
    """The engine refused a request (container gone, bad argument)."""


class ApiExec:
    """One command started with the exec API: a stand-in for `asyncio.subprocess.Process`."""

    stdin = None

    def __init__(self) -> None:
        self.stdout = asyncio.StreamReader()
        self.stderr = asyncio.StreamReader()
        self.returncode: int | None = None
        self._pump: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None
        self._exec_id = ""

    @classmethod
    async def start(cls, socket_path: str, cid: str, argv: list[str], *, user: str,
                    workdir: str, env: dict[str, str]) -> ApiExec:
        """Create and start the exec; output streams into `stdout`/`stderr`."""
        self = cls()
        self._session = aiohttp.ClientSession(
            connector=aiohttp.UnixConnector(path=socket_path),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=60))
        try:
            body = {"AttachStdout": True, "AttachStderr": True, "Tty": False, "Cmd": argv,
                    "User": user, "WorkingDir": workdir,
                    "Env": [f"{k}={v}" for k, v in env.items()]}
            async with self._session.post(f"http://docker/{API}/containers/{quote(cid)}/exec",
                                          json=body) as r:
                if r.status != 201:
                    raise EngineError(f"docker exec failed: {(await r.text()).strip()}")
                self._exec_id = (await r.json())["Id"]
            resp = await self._session.post(f"http://docker/{API}/exec/{self._exec_id}/start",
                                            json={"Detach": False, "Tty": False})
            if resp.status != 200:
                text = await resp.text()
                resp.release()
                raise EngineError(f"docker exec failed: {text.strip()}")
        except BaseException:
            await self._session.close()
            raise
        self._pump = asyncio.ensure_future(self._demux(resp))
        return self

    async def _demux(self, resp: aiohttp.ClientResponse) -> None:
        """Split the engine's multiplexed stream (8-byte frame headers) into the readers."""
        try:
            while True:
                try:
                    head = await resp.content.readexactly(_HEADER.size)
                except asyncio.IncompleteReadError:
                    break
                kind, size = _HEADER.unpack(head)
                data = await resp.content.readexactly(size)
                (self.stderr if kind == 2 else self.stdout).feed_data(data)
        except (aiohttp.ClientError, asyncio.IncompleteReadError, ConnectionError):
            pass  # the stream was cut (a kill): what came is what there is
        finally:
            resp.release()
            self.stdout.feed_eof()
            self.stderr.feed_eof()

    async def wait(self) -> int:
        """The command's exit status, once its output has ended."""
        assert self._pump is not None and self._session is not None
        await asyncio.wait({self._pump})  # ends at the stream's end or at a kill
        if self.returncode is None:
            with contextlib.suppress(aiohttp.ClientError, KeyError, ValueError):
                async with self._session.get(f"http://docker/{API}/exec/{self._exec_id}/json") as r:
                    info = await r.json()
                    code = info.get("ExitCode")
                    if not info.get("Running") and code is not None:
                        self.returncode = int(code)
            if self.returncode is None:
                self.returncode = -1
            await self._session.close()
        return self.returncode

    def kill(self) -> None:
        """Stop reading (the caller kills the command inside the container)."""
        if self._pump is not None:
            self._pump.cancel()

    async def aclose(self) -> None:
        """Release the connection."""
        if self._pump is not None:
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._pump
        if self._session is not None:
            await self._session.close()
