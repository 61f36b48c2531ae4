"""`nel serve`'s HTTP protocol: `/verify` and `/seed_session` answered below the ASGI app.

An RL loop calls these two routes for every rollout, and once scoring left the event loop
most of a request's server time was the HTTP stack around it: an ASGI scope, a Request, a
Response, two transport writes (status line and headers, then the body: two syscalls and
two wake-ups of the client) and a task per request. `ServeHttpProtocol` answers a
`POST /verify` or `POST /seed_session` itself, from the raw body, in one write, and runs
the handler without a task where it can (`HotRoutes.taskless`): a seed of nel's own
environments never waits; a verify waits on its scoring worker's future, whose callback
carries it on (`_Pending`). Other handlers (sandboxed or remote scoring, a user's seed)
run in a task as before.

The protections are the same as on the ASGI path (`benchmarks.serve_json` decides them): 415
for a declared non-JSON content type and 413 for a declared oversized body from the head
alone, 413 while streaming, 408 for a body that does not arrive within its limit, 4xx for
a malformed body, the request-head deadline (`HeadDeadlineHttpToolsProtocol`). Anything
else (another route or method, `Expect: 100-continue`, an upgrade, a percent-encoded path,
a pipelined request behind one in flight, a full write buffer, an app with middleware of
its own) takes uvicorn's usual way to the app. On shutdown uvicorn cancels what is still
scoring once its grace time is up (`_Pending.cancel` as a task's), which answers 503.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from functools import partial
from typing import TYPE_CHECKING, Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE

from benchmarks.serve_json import ApiError, body_timed_out, check_body_head, too_large
from benchmarks.serve_limits import HeadDeadlineHttpToolsProtocol
from benchmarks.serve_routes import error_answer

if TYPE_CHECKING:
    from benchmarks.serve_routes import Answer, HotRoutes

__all__ = ["ServeHttpProtocol"]

log = logging.getLogger("nel.serve")

_STOPPING = ApiError(503, "server_stopping", "the server is stopping; retry the request", None)


class _NoEvent:
    """Stands in for a cycle's `message_event` (uvicorn sets it when a connection drops)."""

    __slots__ = ()

    def set(self) -> None:
        pass


_NO_EVENT = _NoEvent()


class _HotCycle:
    """One hot request on its way, with the attributes uvicorn's connection code reads
    (`response_complete`, `disconnected`, `keep_alive`, `message_event`)."""

    __slots__ = ("body", "body_timer", "disconnected", "handler", "keep_alive", "received",
                 "received_all", "response_complete", "taskless")
    message_event = _NO_EVENT

    def __init__(self, handler: Callable[[bytes], Coroutine[Any, Any, Answer]],
                 keep_alive: bool, taskless: bool) -> None:
        self.handler = handler
        self.keep_alive = keep_alive
        self.taskless = taskless
        self.body: list[bytes] = []
        self.received = 0
        self.received_all = False
        self.body_timer: asyncio.TimerHandle | None = None
        self.disconnected = False
        self.response_complete = False


class _Pending:
    """A hot request's handler waiting on a future (a scoring worker's verdict), driven by
    the future's callbacks rather than by a task: a task cost as much as the rest of the
    request's Python. It sits in uvicorn's task set like a task, so a graceful shutdown
    waits for it and then cancels it (the handler answers 503 `server_stopping`)."""

    __slots__ = ("coro", "cycle", "protocol", "waiting")

    def __init__(self, protocol: ServeHttpProtocol, cycle: _HotCycle,
                 coro: Coroutine[Any, Any, Answer]) -> None:
        self.protocol = protocol
        self.cycle = cycle
        self.coro = coro
        self.waiting: asyncio.Future[Any] | None = None

    def wake(self, future: asyncio.Future[Any]) -> None:
        if future is self.waiting:  # not one given up on by `cancel`
            self.waiting = None
            self.protocol._drive(self)

    def cancel(self, msg: Any = None) -> bool:
        """As `Task.cancel`: the handler gets `CancelledError` where it waits."""
        future = self.waiting
        if future is None:
            return False
        self.waiting = None
        future.remove_done_callback(self.wake)
        # From the loop, not inline: the caller is a task (uvicorn's shutdown), and the
        # handler must not see it as its own `current_task()`.
        self.protocol.loop.call_soon(self.protocol._drive, self, asyncio.CancelledError(msg))
        return True


def _internal(exc: BaseException) -> Answer:
    """A handler that raised rather than answering (they answer their own errors): ours."""
    log.error("unhandled error in a hot route", exc_info=exc)
    return 500, b'{"error":"internal_error","detail":"internal server error","field":null}'


def _hot_routes(app: Any) -> HotRoutes | None:
    """The hot routes of nel's app inside uvicorn's wrappers (proxy headers, logging); None
    for another app, or one with middleware of its own (it must see every request)."""
    for _ in range(8):
        if app is None:
            return None
        hot = getattr(app, "hot_answers", None)
        if hot is not None:
            return None if getattr(app, "user_middleware", None) else hot
        app = getattr(app, "app", None)
    return None


class ServeHttpProtocol(HeadDeadlineHttpToolsProtocol):
    """Uvicorn's httptools protocol, with the head deadline, answering nel's hot routes."""

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._hot = None if self.root_path or self.limit_concurrency else _hot_routes(self.app)

    # ---------------------------------------------------------------- parser callbacks

    def on_headers_complete(self) -> None:
        hot = self._hot
        if hot is not None:
            path = self._hot_path(hot)
            if path is not None:
                self._head_since = None  # the head deadline's end (see serve_limits)
                self._start(hot, path)
                return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if type(cycle) is not _HotCycle:
            super().on_body(body)
            return
        if cycle.response_complete:
            return  # answered already (413, 408): the rest of the body is dropped
        cycle.received += len(body)
        limit = self._hot.max_body_bytes  # type: ignore[union-attr]
        if cycle.received > limit:  # counted: a chunked body declares no length
            self._answer(cycle, error_answer(too_large(limit)))
            return
        cycle.body.append(body)

    def on_message_complete(self) -> None:
        cycle = self.cycle
        if type(cycle) is not _HotCycle:
            super().on_message_complete()
            return
        cycle.received_all = True
        if cycle.body_timer is not None:
            cycle.body_timer.cancel()
            cycle.body_timer = None
        if cycle.response_complete:
            return
        parts = cycle.body
        cycle.body = []
        self._run(cycle, parts[0] if len(parts) == 1 else b"".join(parts))

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        cycle = self.cycle
        if (type(cycle) is _HotCycle and not cycle.received_all and not cycle.response_complete
                and cycle.body_timer is None):
            # Armed only for a body still incomplete once its bytes so far are parsed (most
            # arrive with their head), so a request usually costs no timer at all.
            timeout = self._hot.body_timeout  # type: ignore[union-attr]
            cycle.body_timer = self.loop.call_later(timeout, self._body_expired, cycle, timeout)

    # ---------------------------------------------------------------- hot requests

    def _hot_path(self, hot: HotRoutes) -> bytes | None:
        """The path if this request is one to answer here, else None (uvicorn's way)."""
        parser = self.parser
        if parser.get_method() != b"POST":
            return None
        previous = self.cycle
        if previous is not None and not previous.response_complete:
            return None  # pipelined behind one in flight: uvicorn queues it
        if self.expect_100_continue or self.flow.write_paused or parser.should_upgrade():
            return None
        path = self.url.partition(b"?")[0]
        return path if path in hot.answers else None

    def _start(self, hot: HotRoutes, path: bytes) -> None:
        parser = self.parser
        keep_alive = parser.get_http_version() != "1.0" and parser.should_keep_alive()
        cycle = self.cycle = _HotCycle(  # type: ignore[assignment]
            hot.answers[path], keep_alive, path in hot.taskless)
        ctype = declared = None
        for name, value in self.headers:
            if ctype is None and name == b"content-type":
                ctype = value.decode("latin-1")
            elif declared is None and name == b"content-length":
                declared = value.decode("latin-1")
        try:
            check_body_head(ctype, declared, hot.max_body_bytes)
        except ApiError as exc:
            self._answer(cycle, error_answer(exc))  # before any of the body is read

    def _body_expired(self, cycle: _HotCycle, timeout: float) -> None:
        cycle.body_timer = None
        if not cycle.received_all:
            self._answer(cycle, error_answer(body_timed_out(timeout)))

    def _run(self, cycle: _HotCycle, raw: bytes) -> None:
        """Run the handler: to its end right here if it never waits, else on from the
        callbacks of what it waits on (`_Pending`); in a task where it needs one."""
        coro = cycle.handler(raw)
        if cycle.taskless:
            self._drive(_Pending(self, cycle, coro))
            return
        task = self.loop.create_task(coro)
        # In uvicorn's task set: a graceful shutdown waits for it, then cancels it (503).
        self.tasks.add(task)
        task.add_done_callback(partial(self._task_done, cycle))

    def _drive(self, pending: _Pending, throw: BaseException | None = None) -> None:
        """Step `pending`'s handler until it waits on a future or answers (what a task does)."""
        try:
            waiting = pending.coro.send(None) if throw is None else pending.coro.throw(throw)
        except StopIteration as done:
            answer = done.value
        except BaseException as exc:
            answer = _internal(exc)
        else:
            if getattr(waiting, "_asyncio_future_blocking", False):  # an asyncio future
                waiting._asyncio_future_blocking = False
                pending.waiting = waiting
                waiting.add_done_callback(pending.wake)
            else:  # a bare `yield` (asyncio.sleep(0)): go on at the next loop iteration
                self.loop.call_soon(self._drive, pending)
            self.tasks.add(pending)  # type: ignore[arg-type]
            return
        self.tasks.discard(pending)  # type: ignore[arg-type]
        self._answer(pending.cycle, answer)

    def _task_done(self, cycle: _HotCycle, task: asyncio.Task[Answer]) -> None:
        self.tasks.discard(task)
        if task.cancelled():
            answer = error_answer(_STOPPING)
        elif (exc := task.exception()) is not None:
            answer = _internal(exc)
        else:
            answer = task.result()
        self._answer(cycle, answer)

    def _answer(self, cycle: _HotCycle, answer: Answer) -> None:
        """Write the response in one piece, then let uvicorn go on with the connection."""
        if cycle.response_complete:
            return
        cycle.response_complete = True
        if cycle.body_timer is not None:
            cycle.body_timer.cancel()
            cycle.body_timer = None
        transport = self.transport
        if cycle.disconnected or transport.is_closing():
            return
        status, body = answer
        parts = [STATUS_LINE[status], b"content-type: application/json\r\ncontent-length: ",
                 b"%d" % len(body), b"\r\n"]
        for name, value in self.server_state.default_headers:  # date, server
            parts += (name, b": ", value, b"\r\n")
        parts.append(b"\r\n" if cycle.keep_alive else b"connection: close\r\n\r\n")
        parts.append(body)
        transport.write(b"".join(parts))
        if not cycle.keep_alive:
            transport.close()
        self.on_response_complete()
