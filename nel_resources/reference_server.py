"""Reference OpenAI-compatible server: a fast, deterministic test double with fault injection.

The throughput benchmark and the reliability tests run against this server, so it must cost
far less per request than any client we measure. It therefore speaks HTTP/1.1 directly on
an ``asyncio.Protocol`` (uvloop when installed): keep-alive, Content-Length bodies, in-order
answers to pipelined requests, and orjson for every body. No web framework.

Run it::

    python -m nel_resources.reference_server --port 0 --port-file /tmp/port \
        --answers answers.jsonl --reasoning-mode field --fail-rate 0.2

or from Python with :func:`start_reference_server`, which launches it as a child process.

Everything is deterministic. Answers come from ``--answers`` rows (exact sha256 of the
prompt first, then the first ``match`` substring), else ``--echo`` or ``--default-content``.
Faults are picked by hashing the request's prompt (+ seed) and only hit the first
``--fail-attempts`` attempts of that prompt, so a retrying client always gets through.
With ``--fault-per-request`` each of those attempts draws its fault afresh (hash of prompt
and attempt number), so the rates are per request rather than per prompt: the mix a
flaky production endpoint shows (``--fail-rate 0.1 --status-429-rate 0.05 --hang-rate 0.02
--reset-rate 0.01 --truncate-rate 0.01``).
Only ``/v1/*`` requests are counted in ``/stats``; ``/health`` and ``/stats`` are not.
``/stats`` also reports the requests in flight now and at most (``in_flight``,
``max_in_flight``), which is how tests see a client's concurrency from the outside.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import hmac
import os
import random
import re
import signal
import socket
import struct
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from nel_resources.http1 import (
    JSON_HEADERS,
    LAST_CHUNK,
    MAX_BODY,
    MAX_HEAD,
    SSE_HEADERS,
    Http1Connection,
    Reply,
    Request,
    chunk,
    chunked_head,
    header,
    render,
)

if TYPE_CHECKING:
    from nel_resources.processes import ManagedProcess

__all__ = [
    "Answer",
    "AnswerBook",
    "ReferenceApp",
    "ServerConfig",
    "ToolScript",
    "main",
    "serve",
    "start_reference_server",
]

MAX_HEAD_BYTES = MAX_HEAD
MAX_BODY_BYTES = MAX_BODY
REASONING_MODES = ("none", "field", "think")
# How a truncated 200 looks: a well-framed body that is cut JSON, a Content-Length body
# cut short by the connection closing, or a chunked body whose last chunk never comes.
TRUNCATE_STYLES = ("json", "eof", "chunked")
_RATES = ("fail_rate", "status_429_rate", "hang_rate", "drop_rate", "reset_rate", "truncate_rate")

_JSON_HEADERS = JSON_HEADERS
_SSE_HEADERS = SSE_HEADERS
_TOKEN_RE = re.compile(r"\S+")
_TOOL_ITEMS = ("function_call", "function_call_output")
_header = header


# ---------------------------------------------------------------------------- configuration
@dataclass
class ServerConfig:
    """Options of the reference server; each field is also a ``--kebab-case`` CLI flag."""

    host: str = "127.0.0.1"
    port: int = 0
    port_file: str | None = None
    model_name: str = "nel-reference"
    answers: str | None = None
    default_content: str = "The answer is 42."
    default_reasoning: str = "Let me think step by step."
    echo: bool = False
    reasoning_mode: str = "none"
    fail_rate: float = 0.0
    fail_status: int = 500
    fail_attempts: int = 1
    status_429_rate: float = 0.0
    retry_after: float = 1.0
    delay_ms: float = 0.0
    # A slow model's spread: each answer waits uniformly between delay_ms and this.
    delay_ms_max: float = 0.0
    # Send a delayed answer in chunks spread over its delay, as a response streaming in.
    trickle: bool = False
    # Delay only the requests whose body contains this text (a model slow on some prompts).
    delay_match: str | None = None
    hang_rate: float = 0.0
    drop_rate: float = 0.0
    reset_rate: float = 0.0
    truncate_rate: float = 0.0
    truncate_style: str = "json"
    fault_per_request: bool = False
    fault_match: str | None = None
    status_429_first: int = 0
    barrier: int = 0
    barrier_timeout: float = 60.0
    require_api_key: str | None = field(default=None, repr=False)
    fail_always_status: int | None = None
    # Every request fails with this status, its error body echoing the request's headers
    # (as some gateways do): tests check that nel redacts the echoed secrets.
    echo_headers_status: int | None = None
    # Keep the last N request bodies (parsed) in /stats as `bodies`: tests check what an
    # interceptor chain really sent.
    record_bodies: int = 0
    # A JSONL script of tool-calling turns per prompt (see `ToolScript`): the model then
    # answers with tool calls, turn by turn, as an agent would.
    tool_script: str | None = None
    # Match answers, tool scripts and `fault_match` against all the user messages of a chat
    # (joined), and number script turns over the whole chat: agents such as OpenClaw add a
    # runtime-context user message after the task, which would otherwise be "the prompt".
    match_conversation: bool = False
    # Answer `"stream": true` with a whole JSON answer, as servers that cannot stream do.
    ignore_stream: bool = False

    def __post_init__(self) -> None:
        if self.reasoning_mode not in REASONING_MODES:
            raise ValueError(f"reasoning_mode must be one of {REASONING_MODES}")
        if self.truncate_style not in TRUNCATE_STYLES:
            raise ValueError(f"truncate_style must be one of {TRUNCATE_STYLES}")
        for name in _RATES:
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {value}")

    @property
    def injects_faults(self) -> bool:
        """Whether any per-prompt fault can fire (so attempts must be counted)."""
        return sum(getattr(self, name) for name in _RATES) > 0


class Answer(NamedTuple):
    """What the model says: visible content and optional reasoning."""

    content: str
    reasoning: str | None = None


class AnswerBook:
    """Deterministic answer lookup: exact sha256 of the prompt first, then substrings in order."""

    def __init__(self, rows: Iterable[Mapping[str, Any]] = ()) -> None:
        self.by_sha: dict[str, Answer] = {}
        self.by_match: list[tuple[str, Answer]] = []
        for i, row in enumerate(rows):
            if "content" not in row:
                raise ValueError(f"answers row {i + 1} has no 'content': {dict(row)!r}")
            answer = Answer(str(row["content"]), row.get("reasoning"))
            if row.get("sha256"):
                self.by_sha.setdefault(str(row["sha256"]).lower(), answer)
            elif "match" in row:
                self.by_match.append((str(row["match"]), answer))
            else:
                raise ValueError(f"answers row {i + 1} needs 'match' or 'sha256'")

    @classmethod
    def from_jsonl(cls, path: str | os.PathLike[str]) -> AnswerBook:
        """Load rows from a JSON-lines file (blank lines ignored)."""
        rows = []
        with open(path, "rb") as fh:
            for lineno, line in enumerate(fh, 1):
                if line.strip():
                    try:
                        rows.append(orjson.loads(line))
                    except orjson.JSONDecodeError as exc:
                        raise ValueError(f"{path}:{lineno}: invalid JSON: {exc}") from exc
        return cls(rows)

    def lookup(self, prompt: str) -> Answer | None:
        """The answer for ``prompt``, or None."""
        if self.by_sha:
            hit = self.by_sha.get(hashlib.sha256(prompt.encode()).hexdigest())
            if hit is not None:
                return hit
        for needle, answer in self.by_match:
            if needle in prompt:
                return answer
        return None


class ToolScript:
    """Scripted tool-calling turns: how a test makes the reference server act as an agent.

    Each JSONL row is ``{"match": <substring of the user prompt>, "turns": [...],
    "repeat_last": false}``. A conversation's turn number is the count of assistant turns
    after its last user message; turn k answers with ``turns[k]``:

    - ``{"tool_calls": [{"name": "bash", "arguments": {...}}, ...], "content": "..."}``
      (several calls = parallel calls in one turn; ``"arguments_raw": "<text>"`` sends the
      arguments verbatim, e.g. malformed JSON);
    - ``{"content": "..."}``: a final answer. ``{last_tool}`` in it is replaced by the
      last tool result the conversation carries (so the answer depends on what the tool
      really returned).

    Past the last turn the server repeats it when ``repeat_last`` (a model that never stops
    calling tools), else it answers with the server's default content.
    """

    def __init__(self, rows: Iterable[Mapping[str, Any]] = ()) -> None:
        self.rows: list[tuple[str, list[dict[str, Any]], bool]] = []
        for i, row in enumerate(rows):
            turns = row.get("turns")
            if not isinstance(row.get("match"), str) or not isinstance(turns, list) or not turns:
                raise ValueError(f"tool script row {i + 1} needs a string 'match' and a "
                                 f"non-empty 'turns' list")
            self.rows.append((row["match"], [dict(t) for t in turns], bool(row.get("repeat_last"))))

    @classmethod
    def from_jsonl(cls, path: str | os.PathLike[str]) -> ToolScript:
        """Load rows from a JSON-lines file (blank lines ignored)."""
        with open(path, "rb") as fh:
            return cls(orjson.loads(line) for line in fh if line.strip())

    def turn(self, prompt: str, done_turns: int) -> dict[str, Any] | None:
        """The scripted turn for ``prompt`` after ``done_turns`` assistant turns, or None."""
        for needle, turns, repeat in self.rows:
            if needle in prompt:
                if done_turns < len(turns):
                    return turns[done_turns]
                return turns[-1] if repeat else None
        return None


def _script_calls(turn: Mapping[str, Any], turn_no: int) -> list[tuple[str, str, str]]:
    """(call id, tool name, arguments text) of a scripted turn's tool calls."""
    out = []
    for i, call in enumerate(turn.get("tool_calls") or []):
        raw = call.get("arguments_raw")
        args = raw if isinstance(raw, str) else orjson.dumps(call.get("arguments") or {}).decode()
        out.append((f"call_{turn_no}_{i}", str(call.get("name", "")), args))
    return out


def _chat_state(messages: list[Any], whole: bool = False) -> tuple[int, str]:
    """(assistant turns after the last user message, or in the whole chat when `whole`;
    the last tool result's text)."""
    turns, last_tool = 0, ""
    for msg in messages:
        if not isinstance(msg, dict):
            continue
        role = msg.get("role")
        if role == "user":
            if not whole:
                turns = 0
        elif role == "assistant":
            turns += 1
        elif role == "tool":
            last_tool = _text_of(msg.get("content"))
    return turns, last_tool


def _responses_state(items: list[Any]) -> tuple[int, str]:
    """As `_chat_state` for Responses-API input items: a run of `function_call` items (and
    the assistant message before them) is one turn."""
    turns, last_tool, in_turn = 0, "", False
    for item in items:
        if not isinstance(item, dict):
            continue
        kind, role = item.get("type"), item.get("role")
        if role == "user":
            turns, in_turn = 0, False
        elif kind == "function_call" or role == "assistant":
            if not in_turn:
                turns += 1
            in_turn = True
            continue
        elif kind == "function_call_output":
            last_tool = str(item.get("output", ""))
        in_turn = False
    return turns, last_tool


# ---------------------------------------------------------------------------- helpers
class _BadRequest(Exception):
    """Raised inside handlers to answer 400 with this message."""


def _text_of(content: Any) -> str:
    """Text of an OpenAI message ``content``: a string or a list of typed parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        )
    raise _BadRequest("message content must be a string or a list of content parts")


def _truncate(text: str, n_tokens: int) -> tuple[str, bool]:
    """Keep the first ``n_tokens`` whitespace tokens of ``text`` (original spacing kept)."""
    if n_tokens <= 0:
        return "", bool(text.strip())
    for i, match in enumerate(_TOKEN_RE.finditer(text), 1):
        if i == n_tokens:
            end = match.end()
            return text[:end], bool(text[end:].strip())
    return text, False


def _cut_at_stop(text: str, stops: Sequence[str]) -> tuple[str, bool]:
    best = -1
    for stop in stops:
        idx = text.find(stop) if stop else -1
        if idx >= 0 and (best < 0 or idx < best):
            best = idx
    return (text, False) if best < 0 else (text[:best], True)


def _error_body(message: str, type_: str, code: str | int | None = None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": type_, "param": None, "code": code}})


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_denied",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_exceeded",
}


def _error(status: int, message: str, extra: bytes = b"") -> Reply:
    type_ = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return Reply(status, _error_body(message, type_, status), _JSON_HEADERS + extra)


class Later(NamedTuple):
    """A deferred outcome: answer after ``delay`` seconds, drop or reset the connection,
    hang, send ``reply`` cut short (``eof``/``chunked``), or hold ``reply`` at the barrier."""

    action: str  # "reply" | "drop" | "reset" | "hang" | "eof" | "chunked" | "barrier" | "trickle"
    delay: float = 0.0
    reply: Reply | None = None


# ---------------------------------------------------------------------------- the application
_CHAT_PATHS = frozenset({"/v1/chat/completions", "/chat/completions"})
_COMPLETION_PATHS = frozenset({"/v1/completions", "/completions"})
_MODELS_PATHS = frozenset({"/v1/models", "/models"})
_RESPONSES_PATHS = frozenset({"/v1/responses", "/responses"})


class ReferenceApp:
    """Request handling and statistics, independent of the transport (testable in-process)."""

    def __init__(self, config: ServerConfig, answers: AnswerBook | None = None) -> None:
        self.config = config
        if answers is None:
            answers = AnswerBook.from_jsonl(config.answers) if config.answers else AnswerBook()
        self.answers = answers
        self._api_key = config.require_api_key.encode() if config.require_api_key else None
        self._seq = 0
        self._truncate = False  # set by _fault for the request being dispatched
        self._barrier_open: asyncio.Event | None = None
        self.script = ToolScript.from_jsonl(config.tool_script) if config.tool_script else None
        self.reset()

    def reset(self) -> None:
        """Forget all statistics and per-prompt attempt counters."""
        # The delays' spread, re-seeded: runs after a reset draw the same delays.
        self._rng = random.Random(0)
        self.total = 0
        self.by_endpoint: dict[str, int] = {}
        # Wall-clock time (time.time()) of each endpoint's first request since the reset:
        # bench/bench_startup.py measures a client's start-up to its first request here.
        self.first_at: dict[str, float] = {}
        # ... and of its latest: last - first is a client's loop phase, without its start-up
        # and its writing of results (bench/bench_eval_throughput.py).
        self.last_at: dict[str, float] = {}
        self.by_status: dict[str, int] = {}
        self.prompts: dict[str, int] = {}
        self.faults: dict[str, int] = {}
        self.fault_log: dict[str, list[str]] = {}  # prompt (+ seed) -> its faults in order
        self.models: dict[str, int] = {}
        self.system_count = 0
        self.last_system: str | None = None
        self.last_request: Any = None
        self.bodies: list[Any] = []
        self.attempts: dict[str, int] = {}
        self.rate_limited_first = 0
        # Requests in flight when each of the --status-429-first refusals arrived: shows
        # whether a client really sends less while it is being refused.
        self.first_429_in_flight: list[int] = []
        # In flight = received and not yet answered (a hung request until its client hangs up).
        self.in_flight = 0
        self.max_in_flight = 0
        self.barrier_state = "closed" if self.config.barrier > 0 else "off"
        if self._barrier_open is not None:
            self._barrier_open.set()  # release anything held under the old counters
        self._barrier_open = None

    def stats(self) -> dict[str, Any]:
        """JSON-able snapshot served by ``GET /stats``."""
        return {
            "total_requests": self.total,
            "by_endpoint": self.by_endpoint,
            "first_at": self.first_at,
            "last_at": self.last_at,
            "by_status": self.by_status,
            "prompts": self.prompts,
            "distinct_prompts": len(self.prompts),
            "faults": self.faults,
            "fault_log": self.fault_log,
            "models": self.models,
            "system_messages": {"count": self.system_count, "last": self.last_system},
            "last_request": self.last_request,
            "bodies": self.bodies,
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "barrier": self.barrier_state,
            "first_429_in_flight": self.first_429_in_flight,
        }

    # -- in-flight accounting and the barrier ---------------------------------------------
    def answered(self) -> None:
        """A deferred request got its outcome (reply written, dropped, or client gone)."""
        self.in_flight -= 1

    def _arrived(self) -> None:
        self.in_flight += 1
        if self.in_flight > self.max_in_flight:
            self.max_in_flight = self.in_flight
        if self.barrier_state == "closed" and self.in_flight >= self.config.barrier:
            self.barrier_state = "opened"
            if self._barrier_open is not None:
                self._barrier_open.set()

    async def wait_barrier(self) -> None:
        """Hold a successful reply until ``barrier`` requests were in flight at once (or
        ``barrier_timeout`` passed, recorded as ``timed_out`` in the stats)."""
        if self.barrier_state != "closed":
            return
        if self._barrier_open is None:
            self._barrier_open = asyncio.Event()
        event = self._barrier_open
        try:
            async with asyncio.timeout(self.config.barrier_timeout):
                await event.wait()
        except TimeoutError:
            if self.barrier_state == "closed":
                self.barrier_state = "timed_out"
            event.set()

    # -- entry point ---------------------------------------------------------------------
    def dispatch(
        self, method: bytes, target: bytes, head: bytes, lower: bytes, body: bytes
    ) -> Reply | Later:
        """Handle one parsed request."""
        q = target.find(b"?")
        path = (target if q < 0 else target[:q]).decode("latin-1")
        if len(path) > 1 and path.endswith("/"):
            path = path[:-1]
        if path == "/health":
            return Reply(200, b'{"status":"ok"}')
        if path == "/stats":
            return Reply(200, orjson.dumps(self.stats(), option=orjson.OPT_NON_STR_KEYS))
        if path == "/stats/reset":
            if method != b"POST":
                return _error(405, "use POST /stats/reset")
            self.reset()
            return Reply(200, b'{"status":"reset"}')

        self.total += 1
        known = (path in _CHAT_PATHS or path in _COMPLETION_PATHS or path in _MODELS_PATHS
                 or path in _RESPONSES_PATHS)
        endpoint = path if known else "other"
        self.by_endpoint[endpoint] = self.by_endpoint.get(endpoint, 0) + 1
        now = time.time()
        self.last_at[endpoint] = now
        if endpoint not in self.first_at:
            self.first_at[endpoint] = now
        self._arrived()
        self._truncate = False
        result = self._route(method, path, head, lower, body)
        if path in _CHAT_PATHS or path in _COMPLETION_PATHS or path in _RESPONSES_PATHS:
            result = self._mangle(result)
        if isinstance(result, Reply):
            self.answered()  # written at once; a Later is answered by the transport
        status = (
            result.status
            if isinstance(result, Reply)
            else (result.reply.status if result.reply is not None else None)
        )
        if status is not None:
            key = str(status)
            self.by_status[key] = self.by_status.get(key, 0) + 1
        return result

    def _route(
        self, method: bytes, path: str, head: bytes, lower: bytes, body: bytes
    ) -> Reply | Later:
        if self._api_key is not None:
            auth = _header(head, lower, b"authorization") or b""
            token = auth[7:].strip() if auth[:7].lower() == b"bearer " else b""
            if not hmac.compare_digest(token, self._api_key):
                return _error(401, "Incorrect API key provided.")
        if self.config.echo_headers_status is not None:
            echoed = head.decode("latin-1").replace("\r\n", " | ")
            return _error(self.config.echo_headers_status, f"rejected request: {echoed}")
        if path in _MODELS_PATHS:
            if method != b"GET":
                return _error(405, f"use GET {path}")
            return Reply(
                200,
                orjson.dumps(
                    {
                        "object": "list",
                        "data": [
                            {
                                "id": self.config.model_name,
                                "object": "model",
                                "created": 0,
                                "owned_by": "nel",
                            }
                        ],
                    }
                ),
            )
        chat = path in _CHAT_PATHS
        responses = path in _RESPONSES_PATHS
        if not chat and not responses and path not in _COMPLETION_PATHS:
            return _error(404, f"unknown path {path}")
        if method != b"POST":
            return _error(405, f"use POST {path}")
        try:
            req = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return _error(400, f"request body is not valid JSON: {exc}")
        if not isinstance(req, dict):
            return _error(400, "request body must be a JSON object")
        self.last_request = req
        if self.config.record_bodies > 0:
            self.bodies.append(req)
            del self.bodies[:-self.config.record_bodies]
        if self.config.ignore_stream:  # a server that cannot stream answers whole
            req.pop("stream", None)
        try:
            if responses:
                result = self._responses(req)
            else:
                result = self._chat(req) if chat else self._completion(req)
        except _BadRequest as exc:
            return _error(400, str(exc))
        lo, hi = self.config.delay_ms, max(self.config.delay_ms, self.config.delay_ms_max)
        if hi > 0 and isinstance(result, Reply) and (
                self.config.delay_match is None or self.config.delay_match.encode() in body):
            delay = (lo if hi == lo else self._rng.uniform(lo, hi)) / 1000.0
            return Later("trickle" if self.config.trickle else "reply", delay, result)
        return result

    def _mangle(self, result: Reply | Later) -> Reply | Later:
        """Apply the truncation fault and the barrier to a would-be successful reply."""
        later = isinstance(result, Later)
        reply = result.reply if isinstance(result, Later) else result
        if reply is None or reply.status != 200:
            return result
        delay = result.delay if isinstance(result, Later) else 0.0
        if self._truncate:
            style = self.config.truncate_style
            if style == "json":
                cut = Reply(200, reply.body[: len(reply.body) // 2], reply.headers)
                return Later("reply", delay, cut) if later else cut
            return Later(style, delay, reply)
        if self.barrier_state == "closed":
            return Later("barrier", delay, reply)
        return result

    # -- faults --------------------------------------------------------------------------
    def _fault(self, prompt: str, seed: Any) -> Reply | Later | None:
        """Pick this attempt's fault, deterministically from (prompt, seed, attempt number)."""
        cfg = self.config
        if cfg.fail_always_status is not None:
            self._count_fault("always")
            return _error(cfg.fail_always_status, f"forced status {cfg.fail_always_status}")
        if self.rate_limited_first < cfg.status_429_first:
            self.rate_limited_first += 1
            self.first_429_in_flight.append(self.in_flight)
            self._count_fault("429_first")
            return self._rate_limited()
        if not cfg.injects_faults or (cfg.fault_match is not None and cfg.fault_match not in prompt):
            return None
        key = prompt if seed is None else f"{prompt}\x00{seed}"
        attempt = self.attempts.get(key, 0) + 1
        self.attempts[key] = attempt
        if attempt > cfg.fail_attempts:
            return None
        drawn = f"{key}\x00#{attempt}" if cfg.fault_per_request else key
        digest = hashlib.sha256(drawn.encode()).digest()
        extra = hashlib.sha256(drawn.encode() + b"\x01").digest()
        # Independent uniform draws per fault kind from disjoint 8-byte slices of the
        # digests (the first four kinds keep the draws they always had).
        u = [int.from_bytes(d[i : i + 8], "big") / 2.0**64
             for d, i in ((digest, 0), (digest, 8), (digest, 16), (digest, 24), (extra, 0),
                          (extra, 8))]
        if u[0] < cfg.hang_rate:
            self._count_fault("hang", key)
            return Later("hang")
        if u[1] < cfg.drop_rate:
            self._count_fault("drop", key)
            return Later("drop")
        if u[4] < cfg.reset_rate:
            self._count_fault("reset", key)
            return Later("reset")
        if u[2] < cfg.status_429_rate:
            self._count_fault("429", key)
            return self._rate_limited()
        if u[3] < cfg.fail_rate:
            self._count_fault("fail", key)
            return _error(cfg.fail_status, "injected failure")
        if u[5] < cfg.truncate_rate:
            self._count_fault("truncate", key)
            self._truncate = True  # the reply is generated, then cut (see _mangle)
        return None

    def _rate_limited(self) -> Reply:
        retry = self.config.retry_after
        value = str(int(retry)) if float(retry).is_integer() else f"{retry:g}"
        return _error(
            429, "Rate limit reached; retry later.", b"Retry-After: %s\r\n" % value.encode()
        )

    def _count_fault(self, kind: str, key: str | None = None) -> None:
        self.faults[kind] = self.faults.get(kind, 0) + 1
        if key is not None:
            self.fault_log.setdefault(key, []).append(kind)

    # -- generation ----------------------------------------------------------------------
    def _answer_for(self, prompt: str) -> Answer:
        hit = (
            self.answers.lookup(prompt) if (self.answers.by_sha or self.answers.by_match) else None
        )
        if hit is not None:
            return hit
        if self.config.echo:
            return Answer(prompt)
        return Answer(self.config.default_content)

    def _generate(
        self, prompt: str, req: Mapping[str, Any], completion: bool
    ) -> tuple[str, str | None, str, int, int]:
        """Produce ``(content, reasoning_field, finish_reason, completion_tokens, reasoning_tokens)``."""
        answer = self._answer_for(prompt)
        mode = self.config.reasoning_mode
        reasoning = None
        # /v1/completions has no reasoning field, so "field" mode emits no reasoning there.
        if mode == "think" or (mode == "field" and not completion):
            reasoning = (
                answer.reasoning if answer.reasoning is not None else self.config.default_reasoning
            )
        content = answer.content
        max_tokens = req.get("max_completion_tokens")
        if max_tokens is None:
            max_tokens = req.get("max_tokens")
        if max_tokens is not None and (
            not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1
        ):
            raise _BadRequest("max_tokens must be a positive integer")
        stops = req.get("stop")
        if isinstance(stops, str):
            stops = [stops]
        elif stops is not None and not (
            isinstance(stops, list) and all(isinstance(s, str) for s in stops)
        ):
            raise _BadRequest("stop must be a string or a list of strings")

        if reasoning is not None and mode == "think":
            content = f"<think>\n{reasoning}\n</think>\n\n{content}"
            r_total = len(reasoning.split())
            reasoning = None
            think = True
        else:
            think = False
        finish = "stop"
        if stops:
            content, _ = _cut_at_stop(content, stops)
        r_tokens = 0
        if reasoning is not None:
            r_tokens = len(reasoning.split())
            if max_tokens is not None and r_tokens > max_tokens:
                reasoning, _ = _truncate(reasoning, max_tokens)
                r_tokens = max_tokens
        if max_tokens is not None:
            content, cut = _truncate(content, max_tokens - r_tokens)
            if cut:
                finish = "length"
        c_tokens = len(content.split())
        if think:
            # Tags count as tokens; reasoning is what precedes the closing tag.
            r_tokens = r_total if "</think>" in content else max(0, c_tokens - 1)
            return content, None, finish, c_tokens, r_tokens
        return content, reasoning, finish, c_tokens + r_tokens, r_tokens

    def _next_id(self, prefix: str) -> str:
        self._seq += 1
        return f"{prefix}-ref{self._seq:08x}"

    def _observe_messages(self, req: Mapping[str, Any], messages: list[Any]) -> tuple[Any, str, int]:
        """Count the request (model, last user prompt, system message); return
        ``(model, prompt, prompt_tokens)``."""
        prompt, system, prompt_tokens = "", None, 0
        users: list[str] = []
        for msg in messages:
            if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
                raise _BadRequest("each message must be an object with a string 'role'")
            text = _text_of(msg.get("content"))
            prompt_tokens += len(text.split())
            if msg["role"] == "user":
                prompt = text
                users.append(text)
            elif msg["role"] in ("system", "developer"):
                system = text
        if self.config.match_conversation:
            prompt = "\n".join(users)
        model = req.get("model") or self.config.model_name
        self.models[str(model)] = self.models.get(str(model), 0) + 1
        self._observe_prompt(prompt)
        if system is not None:
            self.system_count += 1
            self.last_system = system
        return model, prompt, prompt_tokens

    def _observe_prompt(self, prompt: str) -> None:
        self.prompts[prompt] = self.prompts.get(prompt, 0) + 1

    def _chat(self, req: dict[str, Any]) -> Reply | Later:
        messages = req.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _BadRequest("'messages' must be a non-empty list")
        model, prompt, prompt_tokens = self._observe_messages(req, messages)
        fault = self._fault(prompt, req.get("seed"))
        if fault is not None:
            return fault
        if self.script is not None:
            done, last_tool = _chat_state(messages, self.config.match_conversation)
            turn = self.script.turn(prompt, done)
            if turn is not None:
                return self._scripted_chat(model, turn, done, last_tool, prompt_tokens,
                                           req)
        n = self._n_choices(req)
        content, reasoning, finish, c_tokens, r_tokens = self._generate(prompt, req, False)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if reasoning is not None:
            message["reasoning_content"] = reasoning
        usage = _usage(prompt_tokens, c_tokens * n, r_tokens * n)
        rid, created = self._next_id("chatcmpl"), int(time.time())
        if req.get("stream"):
            return self._chat_stream(req, rid, created, model, n, content, reasoning, finish, usage)
        choices = [
            {"index": i, "message": message, "logprobs": None, "finish_reason": finish}
            for i in range(n)
        ]
        return Reply(
            200,
            orjson.dumps(
                {
                    "id": rid,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": choices,
                    "usage": usage,
                    "system_fingerprint": None,
                }
            ),
        )

    def _responses(self, req: dict[str, Any]) -> Reply | Later:
        """The OpenAI Responses API (`input` as a string or messages; `instructions`)."""
        raw = req.get("input")
        if isinstance(raw, str):
            messages: list[Any] = [{"role": "user", "content": raw}]
        elif isinstance(raw, list) and raw:
            messages = raw
        else:
            raise _BadRequest("'input' must be a string or a non-empty list of messages")
        if isinstance(req.get("instructions"), str):
            messages = [{"role": "system", "content": req["instructions"]}, *messages]
        # Tool-call items (`function_call`, `function_call_output`) carry no role.
        said = [m for m in messages if not (isinstance(m, dict) and m.get("type") in _TOOL_ITEMS)]
        model, prompt, prompt_tokens = self._observe_messages(req, said)
        fault = self._fault(prompt, req.get("seed"))
        if fault is not None:
            return fault
        if self.script is not None:
            done, last_tool = _responses_state(messages)
            turn = self.script.turn(prompt, done)
            if turn is not None:
                return self._scripted_responses(model, turn, done, last_tool, prompt_tokens)
        gen_req = dict(req)
        if "max_output_tokens" in req:
            gen_req["max_tokens"] = req["max_output_tokens"]
        content, reasoning, finish, c_tokens, r_tokens = self._generate(prompt, gen_req, False)
        output: list[dict[str, Any]] = []
        if reasoning is not None:
            output.append({"type": "reasoning", "id": self._next_id("rs"),
                           "summary": [{"type": "summary_text", "text": reasoning}]})
        output.append({"type": "message", "id": self._next_id("msg"), "role": "assistant",
                       "status": "completed",
                       "content": [{"type": "output_text", "text": content, "annotations": []}]})
        return Reply(200, orjson.dumps({
            "id": self._next_id("resp"), "object": "response", "created_at": int(time.time()),
            "model": model, "status": "completed" if finish == "stop" else "incomplete",
            "output": output,
            # Fields OpenAI's Response type requires (NeMo Gym validates replies against it).
            "tools": [], "tool_choice": "auto", "parallel_tool_calls": True,
            "usage": {"input_tokens": prompt_tokens, "output_tokens": c_tokens,
                      "total_tokens": prompt_tokens + c_tokens,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": r_tokens}},
        }))

    def _scripted_chat(self, model: Any, turn: Mapping[str, Any], turn_no: int, last_tool: str,
                       prompt_tokens: int, req: Mapping[str, Any] | None = None) -> Reply:
        content = str(turn.get("content") or "").replace("{last_tool}", last_tool)
        calls = _script_calls(turn, turn_no)
        message: dict[str, Any] = {"role": "assistant", "content": content or None}
        if calls:
            message["tool_calls"] = [{"id": cid, "type": "function",
                                      "function": {"name": name, "arguments": args}}
                                     for cid, name, args in calls]
        c_tokens = len(content.split()) + sum(len(a.split()) for _, _, a in calls)
        rid, created, finish = self._next_id("chatcmpl"), int(time.time()), (
            "tool_calls" if calls else "stop")
        usage = _usage(prompt_tokens, c_tokens, 0)
        if req is not None and req.get("stream"):
            # One delta with the text and every call (each with its `index`), as a
            # streaming server sends a turn it has finished.
            base = {"id": rid, "object": "chat.completion.chunk", "created": created,
                    "model": model}
            delta: dict[str, Any] = {"role": "assistant", "content": content or None}
            if calls:
                delta["tool_calls"] = [{"index": i, **tc}
                                       for i, tc in enumerate(message["tool_calls"])]
            events = [{**base, "choices": [{"index": 0, "delta": d, "logprobs": None,
                                            "finish_reason": f}]}
                      for d, f in ((delta, None), ({}, finish))]
            return _sse(events, usage if _include_usage(req) else None, {**base, "choices": []})
        return Reply(200, orjson.dumps({
            "id": rid, "object": "chat.completion",
            "created": created, "model": model,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": finish}],
            "usage": usage, "system_fingerprint": None,
        }))

    def _scripted_responses(self, model: Any, turn: Mapping[str, Any], turn_no: int,
                            last_tool: str, prompt_tokens: int) -> Reply:
        content = str(turn.get("content") or "").replace("{last_tool}", last_tool)
        calls = _script_calls(turn, turn_no)
        output: list[dict[str, Any]] = []
        if content:
            output.append({"type": "message", "id": self._next_id("msg"), "role": "assistant",
                           "status": "completed",
                           "content": [{"type": "output_text", "text": content, "annotations": []}]})
        output.extend({"type": "function_call", "id": self._next_id("fc"), "call_id": cid,
                       "name": name, "arguments": args, "status": "completed"}
                      for cid, name, args in calls)
        c_tokens = len(content.split()) + sum(len(a.split()) for _, _, a in calls)
        return Reply(200, orjson.dumps({
            "id": self._next_id("resp"), "object": "response", "created_at": int(time.time()),
            "model": model, "status": "completed", "output": output,
            "tools": [], "tool_choice": "auto", "parallel_tool_calls": True,
            "usage": {"input_tokens": prompt_tokens, "output_tokens": c_tokens,
                      "total_tokens": prompt_tokens + c_tokens,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}},
        }))

    def _completion(self, req: dict[str, Any]) -> Reply | Later:
        raw = req.get("prompt")
        if isinstance(raw, str):
            prompts = [raw]
        elif isinstance(raw, list) and raw and all(isinstance(p, str) for p in raw):
            prompts = raw
        else:
            raise _BadRequest("'prompt' must be a string or a non-empty list of strings")
        model = req.get("model") or self.config.model_name
        self.models[str(model)] = self.models.get(str(model), 0) + 1
        for p in prompts:
            self._observe_prompt(p)
        fault = self._fault("\x1e".join(prompts), req.get("seed"))
        if fault is not None:
            return fault
        n = self._n_choices(req)
        choices = []
        p_tokens = c_total = r_total = 0
        for i, prompt in enumerate(prompts):
            text, _, finish, c_tokens, r_tokens = self._generate(prompt, req, True)
            if req.get("echo"):
                text = prompt + text
            p_tokens += len(prompt.split())
            c_total += c_tokens * n
            r_total += r_tokens * n
            for j in range(n):
                choices.append(
                    {"index": i * n + j, "text": text, "logprobs": None, "finish_reason": finish}
                )
        usage = _usage(p_tokens, c_total, r_total)
        rid, created = self._next_id("cmpl"), int(time.time())
        if req.get("stream"):
            events = [
                {
                    "id": rid,
                    "object": "text_completion",
                    "created": created,
                    "model": model,
                    "choices": [c],
                }
                for c in choices
            ]
            return _sse(
                events,
                usage if _include_usage(req) else None,
                {
                    "id": rid,
                    "object": "text_completion",
                    "created": created,
                    "model": model,
                    "choices": [],
                },
            )
        return Reply(
            200,
            orjson.dumps(
                {
                    "id": rid,
                    "object": "text_completion",
                    "created": created,
                    "model": model,
                    "choices": choices,
                    "usage": usage,
                }
            ),
        )

    @staticmethod
    def _n_choices(req: Mapping[str, Any]) -> int:
        n = req.get("n", 1)
        if n is None:
            return 1
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 128:
            raise _BadRequest("'n' must be an integer between 1 and 128")
        return n

    @staticmethod
    def _chat_stream(
        req: Mapping[str, Any],
        rid: str,
        created: int,
        model: Any,
        n: int,
        content: str,
        reasoning: str | None,
        finish: str,
        usage: dict[str, Any],
    ) -> Reply:
        base = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model}
        events: list[dict[str, Any]] = []
        for i in range(n):
            deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
            if reasoning:
                deltas.append({"reasoning_content": reasoning})
            if content:
                deltas.append({"content": content})
            events.extend(
                {
                    **base,
                    "choices": [{"index": i, "delta": d, "logprobs": None, "finish_reason": None}],
                }
                for d in deltas
            )
            events.append(
                {
                    **base,
                    "choices": [
                        {"index": i, "delta": {}, "logprobs": None, "finish_reason": finish}
                    ],
                }
            )
        return _sse(events, usage if _include_usage(req) else None, {**base, "choices": []})


def _include_usage(req: Mapping[str, Any]) -> bool:
    opts = req.get("stream_options")
    return isinstance(opts, dict) and bool(opts.get("include_usage"))


def _sse(
    events: list[dict[str, Any]], usage: dict[str, Any] | None, usage_base: dict[str, Any]
) -> Reply:
    # The whole stream is known up front, so it goes out with a Content-Length: valid HTTP,
    # and keeps the connection reusable without chunked encoding.
    parts = [b"data: " + orjson.dumps(e) + b"\n\n" for e in events]
    if usage is not None:
        parts.append(b"data: " + orjson.dumps({**usage_base, "usage": usage}) + b"\n\n")
    parts.append(b"data: [DONE]\n\n")
    return Reply(200, b"".join(parts), _SSE_HEADERS)


def _usage(prompt_tokens: int, completion_tokens: int, reasoning_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
    }


# ---------------------------------------------------------------------------- HTTP transport
class _HttpProtocol(Http1Connection):
    """One keep-alive HTTP/1.1 connection (`nel_resources.http1`): most answers are written
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
        return _error(status, message)

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


# ---------------------------------------------------------------------------- CLI
def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m nel_resources.reference_server", description=__doc__.split("\n\n")[0]
    )
    d = ServerConfig()
    p.add_argument("--host", default=d.host, help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=d.port, help="0 = pick a free port")
    p.add_argument("--port-file", help="write the bound port here when ready")
    p.add_argument("--model-name", default=d.model_name, help="listed by /v1/models")
    p.add_argument("--answers", help='JSONL rows {"match"|"sha256": ..., "content", "reasoning"}')
    p.add_argument("--default-content", default=d.default_content)
    p.add_argument("--default-reasoning", default=d.default_reasoning)
    p.add_argument("--echo", action="store_true", help="reply with the prompt")
    p.add_argument("--reasoning-mode", choices=REASONING_MODES, default=d.reasoning_mode)
    p.add_argument(
        "--fail-rate",
        type=float,
        default=d.fail_rate,
        help="fraction of distinct prompts that fail their first attempts",
    )
    p.add_argument("--fail-status", type=int, default=d.fail_status)
    p.add_argument(
        "--fail-attempts",
        type=int,
        default=d.fail_attempts,
        help="faults hit only a prompt's first N attempts",
    )
    p.add_argument("--status-429-rate", type=float, default=d.status_429_rate)
    p.add_argument(
        "--retry-after", type=float, default=d.retry_after, help="Retry-After seconds sent with 429"
    )
    p.add_argument("--delay-ms", type=float, default=d.delay_ms)
    p.add_argument("--delay-ms-max", type=float, default=d.delay_ms_max,
                   help="answers wait uniformly between --delay-ms and this")
    p.add_argument("--trickle", action="store_true",
                   help="send delayed answers in chunks spread over the delay")
    p.add_argument("--delay-match", default=d.delay_match,
                   help="delay only requests whose body contains this text")
    p.add_argument("--hang-rate", type=float, default=d.hang_rate)
    p.add_argument("--drop-rate", type=float, default=d.drop_rate,
                   help="close the connection without answering (FIN)")
    p.add_argument("--reset-rate", type=float, default=d.reset_rate,
                   help="reset the connection without answering (RST)")
    p.add_argument("--truncate-rate", type=float, default=d.truncate_rate,
                   help="answer 200 with half the body (see --truncate-style)")
    p.add_argument("--truncate-style", choices=TRUNCATE_STYLES, default=d.truncate_style,
                   help="json: a well-framed body of cut JSON; eof: the connection closes "
                   "mid-body; chunked: a chunked body whose last chunk never comes")
    p.add_argument("--fault-per-request", action="store_true",
                   help="draw every attempt's fault afresh (rates per request, not per prompt)")
    p.add_argument("--fault-match", help="inject the rate-drawn faults only into prompts "
                   "containing this text (the others are always answered)")
    p.add_argument("--status-429-first", type=int, default=d.status_429_first,
                   help="answer 429 to the first N completion requests, whatever their prompt")
    p.add_argument("--barrier", type=int, default=d.barrier,
                   help="hold successful replies until N requests are in flight at once")
    p.add_argument("--barrier-timeout", type=float, default=d.barrier_timeout,
                   help="release the barrier after this many seconds (stats say timed_out)")
    p.add_argument("--require-api-key", help="answer 401 unless 'Authorization: Bearer KEY'")
    p.add_argument("--fail-always-status", type=int, help="every completion returns this status")
    p.add_argument("--echo-headers-status", type=int,
                   help="every request fails with this status, echoing its headers in the body")
    p.add_argument("--record-bodies", type=int, default=d.record_bodies,
                   help="keep the last N request bodies in /stats (`bodies`)")
    p.add_argument("--tool-script", help='JSONL rows {"match", "turns": [{"tool_calls": '
                   '[{"name", "arguments"}]} | {"content"}], "repeat_last"}: answer with '
                   "scripted tool calls (see ToolScript)")
    p.add_argument("--match-conversation", action="store_true",
                   help="match answers, scripts and --fault-match against all user messages "
                   "of a chat (agents that add context messages after the task)")
    p.add_argument("--ignore-stream", action="store_true",
                   help='answer "stream": true with a whole JSON answer (a server that cannot stream)')
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point."""
    args = _build_parser().parse_args(argv)
    config = ServerConfig(**{f.name: getattr(args, f.name) for f in fields(ServerConfig)})
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is optional
        asyncio.run(serve(config))
    else:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(serve(config))
    return 0


# ---------------------------------------------------------------------------- Python API
def _cli_args(opts: Mapping[str, Any]) -> list[str]:
    known = {f.name for f in fields(ServerConfig)} - {"host", "port", "port_file"}
    argv: list[str] = []
    for key, value in opts.items():
        if key not in known:
            raise TypeError(f"unknown reference server option {key!r}; known: {sorted(known)}")
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        else:
            argv += [flag, str(value)]
    return argv


def start_reference_server(
    *, timeout: float = 600.0, stall: float = 30.0,
    log_path: str | os.PathLike[str] | None = None, **opts: Any
) -> tuple[ManagedProcess, str]:
    """Launch the reference server as a child process and wait until it is healthy.

    Args:
        timeout: Ceiling, in seconds, on the wait for the port file and ``/health``.
        stall: Give up earlier when the server has used no CPU for this many seconds (hung);
            a start slowed by a loaded machine keeps progressing and is waited for.
        log_path: Where the server's output goes (a temp file by default).
        **opts: ``ServerConfig`` fields, e.g. ``fail_rate=0.2, reasoning_mode="think"``.
            ``answers`` and ``tool_script`` may also be lists of row dicts (written to
            temp JSONL files).

    Returns:
        The running :class:`ManagedProcess` (stop it!) and the base URL ending in ``/v1``.
    """
    from nel_resources.processes import ManagedProcess, wait_for_port_file

    workdir = Path(tempfile.mkdtemp(prefix="nel-refserver-"))
    for key in ("answers", "tool_script"):
        rows = opts.get(key)
        if rows is not None and not isinstance(rows, (str, os.PathLike)):
            path = workdir / f"{key}.jsonl"
            path.write_bytes(b"".join(orjson.dumps(dict(r)) + b"\n" for r in rows))
            opts[key] = str(path)
    port_file = workdir / "port"
    # -P: do not put nel_resources/ itself on sys.path (its modules could shadow the stdlib),
    # and running the file directly skips the package __init__ (no heavy imports at startup).
    argv = [
        sys.executable,
        "-P",
        str(Path(__file__).resolve()),
        "--port",
        "0",
        "--port-file",
        str(port_file),
        *_cli_args(opts),
    ]
    proc = ManagedProcess(
        argv, name="reference-server", log_path=log_path or workdir / "server.log"
    ).start()
    try:
        port = wait_for_port_file(proc, port_file, what="the reference server", timeout=timeout,
                                  stall=stall)
    except BaseException:
        proc.stop()
        raise
    return proc, f"http://127.0.0.1:{port}/v1"


if __name__ == "__main__":
    sys.exit(main())
