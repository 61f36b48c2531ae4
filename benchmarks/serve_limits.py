"""Limits that keep `nel serve` responsive against slow or hostile clients.

`HeadDeadlineHttpToolsProtocol`: uvicorn's httptools (C parser) protocol with a deadline on
the request head. Uvicorn's only timer is the keep-alive one, which every received byte
resets, so a client that sends its headers a byte at a time holds a connection forever.
The other protections do not depend on the parser: body size and time limits, 415 on
non-JSON content types and 4xx for malformed bodies are the app's (`benchmarks.serve_json`),
and a malformed request head is the parser's 400.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["ENV_HEAD_TIMEOUT", "HeadDeadlineHttpToolsProtocol"]

# Read by each server process (workers too), so the CLI sets it before uvicorn starts.
ENV_HEAD_TIMEOUT = "NEL_SERVE_HEAD_TIMEOUT"
DEFAULT_HEAD_TIMEOUT = 10.0


class HeadDeadlineHttpToolsProtocol(HttpToolsProtocol):
    """Close a connection whose request line and headers do not all arrive in time.

    The deadline starts when a connection opens or a new request's first byte arrives on
    a kept-alive one, and is not reset by further bytes: only a complete head stops it.
    """

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        self._head_timer: asyncio.TimerHandle | None = None
        # Read once per connection, not per request (an environ lookup showed in profiles).
        self._head_limit = float(os.environ.get(ENV_HEAD_TIMEOUT) or DEFAULT_HEAD_TIMEOUT)
        super().connection_made(transport)
        self._arm_head_timer()

    def _arm_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self._head_limit, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        # Still armed, so the head of the current request is incomplete.
        self._head_timer = None
        if not self.transport.is_closing():
            self.transport.close()

    def on_message_begin(self) -> None:
        self._arm_head_timer()  # a new request's first byte on a kept-alive connection
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._disarm_head_timer()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)
