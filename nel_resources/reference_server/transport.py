"""The reference server's transport: keep-alive HTTP/1.1 on an `asyncio.Protocol`
(`nel_resources.wire.http1`), deferred answers (delays, barrier, trickle) and connection faults
(drop, reset, hang, cut bodies), and `serve`, which listens until told to stop."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import struct
from pathlib import Path

from nel_resources.reference_server.app import ReferenceApp
from nel_resources.reference_server.config import ServerConfig
from nel_resources.reference_server.replies import Later, error_response
from nel_resources.wire.http1 import (
    LAST_CHUNK,
    Http1Connection,
    Reply,
    Request,
    chunk,
    chunked_head,
    render,
)


class _HttpProtocol(Http1Connection):
    """One keep-alive HTTP/1.1 connection (`nel_resources.wire.http1`): most answers are written
    at once; a deferred one (delay, barrier, fault) holds later pipelined requests back."""

    __slots__ = ("_app", "_pending")

    def __init__(self, app: ReferenceApp) -> None:
        super().__init__()
        self._app = app
        self._pending = False  # a deferred request of this connection is not answered yet

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._settle()

    def _settle(self) -> None:
        if self._pending:
            self._pending = False
            self._app.answered()

    def error_reply(self, status: int, message: str) -> Reply:
        return error_response(status, message)

    def respond(self, request: Request) -> bool:
        transport = self._transport
        assert transport is not None
        keep_alive = request.keep_alive
        result = self._app.dispatch(request.method, request.target, request.head, request.lower,
                                    request.body)
        if isinstance(result, Reply):
            transport.write(render(result, keep_alive))
            if not keep_alive:
                transport.close()
                self._closed = True
            return True
        self._pending = True
        if result.action == "hang":
            return False  # never answer; the client's timeout is what is under test
        if result.action in ("drop", "reset"):
            self._settle()
            if result.action == "reset":
                _linger_zero(transport)  # close with RST instead of FIN
            transport.abort()
            self._closed = True
            return True
        self._task = asyncio.get_running_loop().create_task(self._later(result, keep_alive))
        return False

    async def _later(self, later: Later, keep_alive: bool) -> None:
        if later.action == "barrier":
            await self._app.wait_barrier()
        if later.action == "trickle":
            await self._trickle(later, keep_alive)
            return
        await asyncio.sleep(later.delay)
        if self._closed or later.reply is None:
            return
        assert self._transport is not None
        self._settle()
        if later.action in ("eof", "chunked"):
            # Half the body, then the connection closes: the client must notice the cut.
            body = later.reply.body
            half = body[: len(body) // 2]
            if later.action == "eof":
                cut = render(later.reply)[: -len(body) or None] + half
            else:
                cut = chunked_head(200, later.reply.headers) + chunk(half)
            self._transport.write(cut)
            self._transport.close()
            self._closed = True
            return
        self._transport.write(render(later.reply, keep_alive))
        self.finish(keep_alive)


    async def _trickle(self, later: Later, keep_alive: bool) -> None:
        """The head at once, then the body in ten chunks spread over the delay."""
        assert self._transport is not None and later.reply is not None
        body, pieces = later.reply.body, 10
        self._transport.write(chunked_head(later.reply.status, later.reply.headers, keep_alive))
        step = max(1, -(-len(body) // pieces))
        for i in range(0, len(body), step):
            await asyncio.sleep(later.delay / pieces)
            if self._closed:
                return
            self._transport.write(chunk(body[i:i + step]))
        self._settle()
        self._transport.write(LAST_CHUNK)
        self.finish(keep_alive)


def _linger_zero(transport: asyncio.Transport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


async def serve(
    config: ServerConfig,
    *,
    ready: asyncio.Future[int] | None = None,
    stop: asyncio.Future[None] | None = None,
) -> None:
    """Serve until ``stop`` resolves (or SIGTERM/SIGINT when run as the main program).

    Args:
        config: Server options.
        ready: Resolved with the bound port once listening.
        stop: Resolve it to shut down; created (and wired to signals) when omitted.
    """
    loop = asyncio.get_running_loop()
    app = ReferenceApp(config)
    server = await loop.create_server(
        lambda: _HttpProtocol(app), config.host, config.port, reuse_address=True, backlog=2048
    )
    port = int(server.sockets[0].getsockname()[1])
    if config.port_file:
        # Atomic: a reader polling for the file never sees a partial number.
        target = Path(config.port_file)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(str(port))
        os.replace(tmp, target)
    print(f"listening on {config.host}:{port}", flush=True)
    if ready is not None and not ready.done():
        ready.set_result(port)
    if stop is None:
        stop = loop.create_future()
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(
                    signum, lambda: None if stop.done() else stop.set_result(None)
                )
    try:
        await stop
    finally:
        server.close()

