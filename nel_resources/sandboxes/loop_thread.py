"""A sandbox factory on its own event-loop thread, usable from any event loop.

`nel serve` scores each response in a scoring thread with its own short-lived event loop,
so the server's loop is never blocked. A factory's state (the docker type's warm
containers, its child processes) must stay on one long-lived loop, though: this class
runs the factory on a dedicated daemon thread and hands callers, on whatever loop they
run, a proxy whose coroutines execute there. One sandbox per `open()`, bounded by the
factory's `concurrency`, and always stopped, even when the caller is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from nel_resources.sandboxes.base import ExecResult, Sandbox, SandboxFactory, SandboxSpec

T = TypeVar("T")


class _Proxy:
    """A started sandbox seen from another loop: each call runs on the factory's loop."""

    def __init__(self, owner: LoopThreadSandboxes, inner: Sandbox) -> None:
        self._owner = owner
        self._inner = inner

    @property
    def spec(self) -> SandboxSpec:
        return self._inner.spec

    async def exec(self, command: str | list[str], timeout_sec: float = 180, *,
                   cwd: str | None = None, env: dict[str, str] | None = None,
                   stdin: bytes | None = None, output_limit: int = 1 << 20) -> ExecResult:
        """`Sandbox.exec`, run on the factory's loop."""
        return await self._owner.call(self._inner.exec(command, timeout_sec, cwd=cwd, env=env,
                                                       stdin=stdin, output_limit=output_limit))

    async def upload(self, local_path: Path, remote_path: str) -> None:
        """`Sandbox.upload`, run on the factory's loop."""
        await self._owner.call(self._inner.upload(local_path, remote_path))

    async def download(self, remote_path: str, local_path: Path) -> None:
        """`Sandbox.download`, run on the factory's loop."""
        await self._owner.call(self._inner.download(remote_path, local_path))


class LoopThreadSandboxes:
    """Owns `factory` and the thread whose event loop all its sandboxes run on.

    Args:
        factory: a configured factory (`make_factory`); closed by `close()`.
    """

    def __init__(self, factory: SandboxFactory) -> None:
        self.factory = factory
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="nel-sandboxes",
                                        daemon=True)
        self._thread.start()
        self._closed = False

    def _submit(self, coro: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
        return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    async def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await `coro` on the factory's loop from the caller's loop."""
        return await self._submit(coro)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the factory's loop from plain (non-async) code, waiting for it."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    @contextlib.asynccontextmanager
    async def open(self, spec: SandboxSpec | None = None) -> AsyncIterator[_Proxy]:
        """One started sandbox (a `concurrency` slot held while it lives), stopped on exit."""
        sb = self.factory.create(spec or SandboxSpec())
        try:
            await self.call(sb.start())
            yield _Proxy(self, sb)
        finally:
            # Shielded: a cancelled caller (a client gone, a scorer timeout) must not
            # interrupt the stop, which frees the slot and ends what the code left running.
            stop = self._submit(sb.stop())
            await asyncio.shield(stop)

    def check(self, timeout: float = 300) -> None:
        """Start and stop one sandbox now, so one that cannot run fails before serving.

        Raises:
            SandboxError: the sandbox cannot start (no bwrap, no such image, no engine).
        """
        async def once() -> None:
            sb = self.factory.create(SandboxSpec())
            try:
                await sb.start()
            finally:
                await sb.stop()

        self.run(once(), timeout)

    def close(self, timeout: float = 60) -> None:
        """Close the factory (removes warm containers) and end the thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self.run(self.factory.aclose(), timeout)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)
            if not self._thread.is_alive():
                self._loop.close()
