"""A one-route aiohttp server on a free 127.0.0.1 port, for tests that need to see exactly
what reached an upstream (bodies, headers, webhook posts) in the test's own event loop."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from aiohttp import web


@asynccontextmanager
async def serving(path: str, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                  ) -> AsyncIterator[int]:
    """Serve POST `path` with `handler` while the block runs; yields the port."""
    app = web.Application()
    app.router.add_post(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        yield int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
    finally:
        await runner.cleanup()
