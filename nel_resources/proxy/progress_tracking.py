"""`progress_tracking`: count finished requests; every `every` of them, log the count and
POST `{"completed": n, "service": ...}` to `webhook_url` when one is set.

Posts go out in order on one background task, so a slow receiver never holds an answer
back; `close()` sends what is still queued. A failed post is logged, never fatal.
"""

from __future__ import annotations

import asyncio
from typing import Any

from nel_resources.proxy.env import ChainEnv, proxy_logger
from nel_resources.proxy.fields import FieldSpec
from nel_resources.proxy.types import ProxyResponse

FIELDS = {"webhook_url": FieldSpec("str", None, nullable=True),
          "every": FieldSpec("int", 10, minimum=1)}
AFFECTS_ANSWERS = False


class ProgressTracking:
    """Counts answers and reports progress."""

    # Reads answers only: the proxy may forward the upstream's bytes (`types.py`).
    reports_changes = ("on_response",)

    def __init__(self, webhook_url: str | None, every: int, service: str) -> None:
        if webhook_url is not None and not webhook_url.startswith(("http://", "https://")):
            raise ValueError("webhook_url must start with http:// or https://")
        self.url = webhook_url
        self.every = every
        self.service = service
        self.completed = 0
        self.posted = 0
        self.failed_posts = 0
        self._queue: asyncio.Queue[int | None] | None = None
        self._task: asyncio.Task[None] | None = None

    def on_response(self, resp: ProxyResponse) -> ProxyResponse:
        self.seen(resp.status, resp.body, resp.latency_ms)
        return resp

    def seen(self, status: int, body: Any, latency_ms: float,
             extra: dict[str, Any] | None = None, cached: bool = False) -> None:
        """The response stage on the answer's parts (`compiled.py`): counts it."""
        self.completed = n = self.completed + 1
        if n % self.every == 0:
            self._report(n)

    def inline_seen(self, p: str) -> tuple[list[str], dict[str, Any]]:
        """`seen` as source lines for a compiled response function (`compiled.py`), and
        the names they use (each starting with `p`)."""
        return [f"{p}s.completed = {p}n = {p}s.completed + 1",
                f"if {p}n % {p}every == 0:",
                f"    {p}s._report({p}n)"], {f"{p}s": self, f"{p}every": self.every}

    def _report(self, n: int) -> None:
        """Every `every` answers: log the count, and queue a webhook post when one is set."""
        proxy_logger().info("progress completed=%d", n)
        if self.url:
            if self._queue is None:
                self._queue = asyncio.Queue()
                self._task = asyncio.get_running_loop().create_task(self._poster())
            self._queue.put_nowait(n)

    async def _poster(self) -> None:
        import aiohttp

        assert self._queue is not None and self.url is not None
        async with aiohttp.ClientSession() as session:
            while (n := await self._queue.get()) is not None:
                try:
                    async with session.post(self.url, json={"completed": n, "service": self.service},
                                            timeout=aiohttp.ClientTimeout(total=30)) as r:
                        r.raise_for_status()
                    self.posted += 1
                except Exception as exc:  # the receiver's trouble is not the run's
                    self.failed_posts += 1
                    proxy_logger().warning("progress webhook failed: %s: %s",
                                           type(exc).__name__, exc)

    async def close(self) -> None:
        """Send what is queued, then stop the poster."""
        if self._queue is not None and self._task is not None:
            self._queue.put_nowait(None)
            await self._task
            self._queue = self._task = None

    def stats(self) -> dict[str, Any]:
        """Completed requests and webhook posts."""
        return {"progress_completed": self.completed, "webhook_posts": self.posted,
                "webhook_failures": self.failed_posts}


def build(cfg: dict[str, Any], env: ChainEnv) -> ProgressTracking:
    """The interceptor from its checked config."""
    return ProgressTracking(cfg["webhook_url"], cfg["every"], env.service)
