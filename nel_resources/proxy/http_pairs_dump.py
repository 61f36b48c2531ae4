"""`http_pairs_dump`: the first request/response pairs, every failed one, and a count of
answers per status, in one JSON file.

The file at `dump_path` holds `{"metrics": {"200": 137, "504": 2, ...}, "pairs": [...]}`;
a pair is kept when it is among the first `first_n` answers seen or its status is not 200
(each pair once). A pair is `{"request_id", "request": {"headers", "body"}, "response":
{"status", "headers", "body", "latency_ms"}}`, plus `"session_id"` when the request had
one. NeMo Evaluator 0.3.0's layout and keys. A request the upstream failed after the
retries (nel's client raises instead of answering) is recorded too (`on_failure`), with
the upstream's last status (504 for a timeout, 502 when there was none), the error text
as the body and a `null` latency.

The request is recorded as it went upstream: its request stage runs after every other
one (`sees_final_request`, as `caching`), with the endpoint's `extra_body` in it; a
request answered without reaching the upstream (a cache hit) has `null` headers and body,
as in 0.3.0. Differences from 0.3.0, on purpose: the headers recorded are the ones nel
sent (nel does not forward the agent's own headers), with every secret header left out
(0.3.0 leaves out `Authorization` only) and the run's secrets masked in bodies too; nel
does not keep the upstream's response headers, so `response.headers` is `null`.

The file is rewritten whole (to a temp name, then renamed) by one background thread that
writes the newest state each time it wakes, so no request waits on the disk and an older
state never overwrites a newer one; `close()` (the end of the run or of `nel proxy`)
writes the last state.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from nel_resources.proxy.env import ChainEnv, proxy_logger
from nel_resources.proxy.fields import FieldSpec
from nel_resources.proxy.types import ProxyRequest, ProxyResponse, RequestContext
from nel_resources.wire.redact import Redactor, is_secret_header

FIELDS = {"dump_path": FieldSpec("str"), "first_n": FieldSpec("int", 50, minimum=0)}
AFFECTS_ANSWERS = False  # it only records
_SENT = "http_pairs_dump_sent"  # ctx.extra key: the request as it goes upstream


def _default(obj: Any) -> Any:
    if isinstance(obj, bytes):
        return obj.decode("utf-8", "replace")
    return repr(obj)


def _frozen(value: Any) -> Any:
    """A deep copy of a JSON value: later hooks edit the answer in place (`reasoning`),
    and the writer thread reads the pair while the event loop goes on."""
    return orjson.loads(orjson.dumps(value, default=_default))


class HttpPairsDump:
    """Records request/response pairs and status counts; a thread writes them out."""

    sees_final_request = True
    reports_changes = ("on_request", "on_response")

    def __init__(self, dump_path: str, first_n: int, redactor: Redactor) -> None:
        self.path = Path(dump_path)
        self.first_n = first_n
        self.redact = redactor
        self.seen = 0
        self.counts: Counter[str] = Counter()
        self.pairs: list[dict[str, Any]] = []
        self._sent_headers: dict[str, str] = {}
        self._extra_body: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closing = False
        self._thread: threading.Thread | None = None

    def bind_endpoint(self, endpoint: Any) -> None:
        """Learn what the endpoint adds to every request (its headers and extra body)."""
        client = getattr(endpoint, "client", None)
        self._sent_headers = {**(getattr(client, "base_headers", None) or {}),
                              **(getattr(endpoint, "extra_headers", None) or {})}
        self._extra_body = dict(getattr(endpoint, "extra_body", None) or {})

    def on_request(self, req: ProxyRequest) -> ProxyRequest:
        # The body itself, not a copy: the endpoint completes it in place (`stream`,
        # `stream_options`), and it is copied only if the pair is kept.
        req.ctx.extra[_SENT] = (req.body, req.headers)
        return req

    def on_response(self, resp: ProxyResponse) -> ProxyResponse:
        self._record(resp.ctx, resp.status, resp.body, resp.latency_ms)
        return resp

    def on_failure(self, ctx: RequestContext, status: int, message: str) -> None:
        """An exchange with no answer (the upstream failed after the retries): recorded
        with the upstream's last status and the error as its body (latency not known)."""
        self._record(ctx, status, message, None)

    def _record(self, ctx: RequestContext, status: int, answer: Any, latency_ms: float | None) -> None:
        with self._lock:
            self.seen += 1
            self.counts[str(status)] += 1
            if self.seen <= self.first_n or status != 200:
                self.pairs.append(self._pair(ctx, status, answer, latency_ms))
        self._changed()

    def _pair(self, ctx: RequestContext, status: int, answer: Any, latency_ms: float | None
              ) -> dict[str, Any]:
        red = self.redact
        headers = body = None
        sent = ctx.extra.get(_SENT)
        if sent is not None:
            headers = {k: red.text(v) for k, v in {**self._sent_headers, **sent[1]}.items()
                       if not is_secret_header(k)}
            body = _frozen(red.data({**sent[0], **self._extra_body}))
        answer = _frozen(red.data(answer)) if isinstance(answer, dict) else red.text(
            answer.decode("utf-8", "replace") if isinstance(answer, bytes) else str(answer))
        pair: dict[str, Any] = {
            "request_id": uuid.uuid4().hex[:12],
            "request": {"headers": headers, "body": body},
            "response": {"status": status, "headers": None, "body": answer,
                         "latency_ms": latency_ms}}
        if ctx.session_id is not None:
            pair["session_id"] = ctx.session_id
        return pair

    def _changed(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._writer, name="http_pairs_dump", daemon=True)
            self._thread.start()
        self._wake.set()

    def _writer(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            self._write()
            if self._closing:
                return

    def _write(self) -> None:
        with self._lock:
            state = {"metrics": dict(self.counts), "pairs": list(self.pairs)}
        try:
            data = orjson.dumps(state, default=_default)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_bytes(data)
            os.replace(tmp, self.path)
        except (OSError, TypeError) as exc:  # recording must never fail a request
            proxy_logger().warning("http_pairs_dump: cannot write %s: %s", self.path, exc)

    def close(self) -> None:
        """Write the last state and stop the writer."""
        if self._thread is None:
            return
        self._closing = True
        self._wake.set()
        self._thread.join(timeout=60)
        # The writer may have taken its last snapshot before the final records came in (it
        # stops once `_closing` is set after a write): the last state is written here, whole.
        self._write()

    def stats(self) -> dict[str, Any]:
        """Answers seen and pairs kept."""
        return {"http_pairs_seen": self.seen, "http_pairs_kept": len(self.pairs)}


def build(cfg: dict[str, Any], env: ChainEnv) -> HttpPairsDump:
    """The interceptor from its checked config."""
    return HttpPairsDump(cfg["dump_path"], cfg["first_n"], env.redactor)
