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

    One timer per connection, re-armed when it fires, rather than a timer set and cancelled
    per request: a request only records when its head began (`_head_since`), and the timer
    closes the connection if a head is still incomplete at its deadline.
    """

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        # Read once per connection, not per request (an environ lookup showed in profiles).
        self._head_limit = float(os.environ.get(ENV_HEAD_TIMEOUT) or DEFAULT_HEAD_TIMEOUT)
        super().connection_made(transport)
        self._head_since: float | None = self.loop.time()
        self._head_timer: asyncio.TimerHandle | None = self.loop.call_later(
            self._head_limit, self._check_head)

    def _check_head(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        now = self.loop.time()
        since = self._head_since
        if since is not None and now - since >= self._head_limit:
            self.transport.close()  # this head is incomplete past its deadline
            return
        # No head in progress: look again one limit from now (a head starting meanwhile has
        # its deadline after that); one in progress: at its deadline.
        delay = self._head_limit if since is None else since + self._head_limit - now
        self._head_timer = self.loop.call_later(delay, self._check_head)

    def on_message_begin(self) -> None:
        if self._head_since is None:  # a new request's first byte on a kept-alive connection
            self._head_since = self.loop.time()
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._head_since = None
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)
