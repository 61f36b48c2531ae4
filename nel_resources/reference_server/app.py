"""`ReferenceApp`: routing, statistics, the barrier and fault injection of the reference
server, independent of the transport (so tests can drive it in-process)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import random
import time
from typing import Any

import orjson

from nel_resources.reference_server.answers import AnswerBook, ToolScript
from nel_resources.reference_server.completions import Completions
from nel_resources.reference_server.config import ServerConfig
from nel_resources.reference_server.replies import BadRequest, Later, error_response
from nel_resources.wire.http1 import Reply, header

_CHAT_PATHS = frozenset({"/v1/chat/completions", "/chat/completions"})
_COMPLETION_PATHS = frozenset({"/v1/completions", "/completions"})
_MODELS_PATHS = frozenset({"/v1/models", "/models"})
_VERSION = "1"  # the reference server's protocol version, reported by GET /version
_RESPONSES_PATHS = frozenset({"/v1/responses", "/responses"})


class ReferenceApp(Completions):
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
        self.image_details: dict[str, int] = {}
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
            "images": self.image_details,  # image parts received, by detail
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
        if path == "/version":  # as vLLM's; like /health, not model traffic (not counted)
            return Reply(200, orjson.dumps({"version": _VERSION, "name": "nel-reference-server"}))
        if path == "/props":  # llama.cpp's template endpoint: not this server's (not counted)
            return error_response(404, "no /props: this is nel's reference server, not llama.cpp")
        if path == "/stats/reset":
            if method != b"POST":
                return error_response(405, "use POST /stats/reset")
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
            auth = header(head, lower, b"authorization") or b""
            token = auth[7:].strip() if auth[:7].lower() == b"bearer " else b""
            if not hmac.compare_digest(token, self._api_key):
                return error_response(401, "Incorrect API key provided.")
        if self.config.echo_headers_status is not None:
            echoed = head.decode("latin-1").replace("\r\n", " | ")
            return error_response(self.config.echo_headers_status, f"rejected request: {echoed}")
        if path in _MODELS_PATHS:
            if method != b"GET":
                return error_response(405, f"use GET {path}")
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
            return error_response(404, f"unknown path {path}")
        if method != b"POST":
            return error_response(405, f"use POST {path}")
        try:
            req = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return error_response(400, f"request body is not valid JSON: {exc}")
        if not isinstance(req, dict):
            return error_response(400, "request body must be a JSON object")
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
        except BadRequest as exc:
            return error_response(400, str(exc))
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
            return error_response(cfg.fail_always_status, f"forced status {cfg.fail_always_status}")
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
            return error_response(cfg.fail_status, "injected failure")
        if u[5] < cfg.truncate_rate:
            self._count_fault("truncate", key)
            self._truncate = True  # the reply is generated, then cut (see _mangle)
        return None

    def _rate_limited(self) -> Reply:
        retry = self.config.retry_after
        value = str(int(retry)) if float(retry).is_integer() else f"{retry:g}"
        return error_response(
            429, "Rate limit reached; retry later.", b"Retry-After: %s\r\n" % value.encode()
        )

    def _count_fault(self, kind: str, key: str | None = None) -> None:
        self.faults[kind] = self.faults.get(kind, 0) + 1
        if key is not None:
            self.fault_log.setdefault(key, []).append(kind)

