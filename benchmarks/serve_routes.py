"""The `nel serve` routes: `/health`, `/dataset_size`, `/seed_session`, `/verify` and
`/aggregate_metrics` over one served environment (`ServeRoutes`), and the error replies.

Plain Starlette routes (request in, response out) skip FastAPI's per-request dependency
solving: the bodies are validated by hand here anyway. Imported when an app is built
(`serve_app.generate_app`), so importing `benchmarks.serve` does not import Starlette.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.responses import Response

from benchmarks._types import EvalEnvironment, VerifyResult
from benchmarks.serve_extract import extract_response_text, find_expected
from benchmarks.serve_json import (
    JSON_HEADERS,
    ApiError,
    dumps,
    invalid,
    json_response,
    loads,
    parse_json_object,
    read_body,
    read_json_object,
)
from benchmarks.serve_pool import ScoringFailed, ScoringPool, ScoringTimeout

if TYPE_CHECKING:
    from starlette.requests import Request

    from benchmarks.serve_environment import SandboxProvider

__all__ = ["Answer", "HotRoutes", "ServeRoutes", "error_answer", "on_api_error", "on_unexpected"]

#: A reply as the hot routes produce it: status and JSON body (`benchmarks.serve_http`
#: writes it straight to the connection; the ASGI path wraps it in a Response).
Answer = tuple[int, bytes]

log = logging.getLogger("nel.serve")

# Seed metadata keys that would collide with verify()'s own parameters if splatted.
# `sandbox` is the server's own (a client must never choose what the code runs in).
_RESERVED_KWARGS = frozenset({"response", "expected", "self", "sandbox"})


@dataclass(frozen=True, slots=True)
class HotRoutes:
    """What `benchmarks.serve_http` needs to answer the per-rollout routes itself.

    `answers` maps a raw request path to its handler (raw body in, `Answer` out); `taskless`
    names the paths whose handler may run outside a task (it touches only nel's own code,
    local data and the scoring pool's futures: nothing that asks for `current_task()`, as
    `asyncio.timeout` or an HTTP client does), which spares a task per request.
    """

    answers: dict[bytes, Callable[[bytes], Coroutine[Any, Any, Answer]]]
    max_body_bytes: int
    body_timeout: float
    taskless: frozenset[bytes]


@dataclass(frozen=True, slots=True)
class VerifyRequest:
    """A parsed `/verify` body: what to score, against what, and how to answer."""

    body: dict[str, Any]
    text: str
    expected: Any
    kwargs: dict[str, Any]
    metadata: dict[str, Any]
    gym_form: bool


@dataclass(slots=True)
class ServeRoutes:
    """The route handlers of one served environment, with the limits they enforce."""

    env: EvalEnvironment
    size: int
    gym_compat: bool
    health_body: bytes
    size_body: bytes
    max_body_bytes: int
    aggregate_body_bytes: int
    body_timeout: float
    verify_timeout: float
    sandbox: SandboxProvider | None
    pool: ScoringPool | None

    def hot(self) -> HotRoutes:
        """The routes `benchmarks.serve_http` answers below the ASGI app."""
        return HotRoutes(
            answers={b"/verify": self.verify_answer, b"/seed_session": self.seed_answer},
            max_body_bytes=self.max_body_bytes, body_timeout=self.body_timeout,
            taskless=self._taskless(),
        )

    def _taskless(self) -> frozenset[bytes]:
        """The hot paths that need no task: a verify scored by the pool (sandboxed and
        remote scoring need one for their timeouts and HTTP), and a seed of one of nel's own
        local environments (a user's `seed` may await anything)."""
        from benchmarks.serve_environment import LimitedEnvironment

        if self.pool is None:
            return frozenset()
        env = self.env.inner if isinstance(self.env, LimitedEnvironment) else self.env
        own_seed = type(env).seed.__module__.startswith("benchmarks.")
        return frozenset({b"/verify", b"/seed_session"} if own_seed else {b"/verify"})

    async def get_health(self, request: Request) -> Response:
        """`GET /health`: the benchmark, its size and the protocol (built once)."""
        return Response(self.health_body, headers=JSON_HEADERS)

    async def get_dataset_size(self, request: Request) -> Response:
        """`GET /dataset_size`."""
        return Response(self.size_body, headers=JSON_HEADERS)

    async def post_seed_session(self, request: Request) -> Response:
        """`POST /seed_session {idx}`: problem `idx` (NeMo Gym's session start with `--gym-compat`)."""
        raw = await read_body(request, self.max_body_bytes, self.body_timeout)
        status, body = await self.seed_answer(raw)
        return Response(body, status_code=status, headers=JSON_HEADERS)

    async def seed_answer(self, raw: bytes) -> Answer:
        """`/seed_session` for a body already read: every error is its answer, not raised."""
        try:
            return 200, await self._seed_json(parse_json_object(raw, allow_empty=True))
        except ApiError as exc:
            return error_answer(exc)
        except Exception as exc:
            return _unexpected_answer("/seed_session", exc)

    async def _seed_json(self, body: dict[str, Any]) -> bytes:
        if "idx" not in body and self.gym_compat:
            # NeMo Gym agents post the dataset row to start a session; our sessions are
            # stateless, so there is nothing to set up: Gym's BaseSeedSessionResponse is {}.
            return b"{}"
        idx = self._seed_index(body)
        try:
            seed = await self.env.seed(idx)
        except Exception as exc:
            log.warning("seed(%d) failed: %r", idx, exc)
            raise ApiError(
                422, "seed_error", f"seed({idx}) failed: {type(exc).__name__}: {exc}"[:500], "idx"
            ) from None
        return dumps(seed.to_dict())

    def _seed_index(self, body: dict[str, Any]) -> int:
        """The problem a `/seed_session` body asks for (400 naming `idx` if it is bad)."""
        size = self.size
        # NeMo Evaluator's request model defaults idx to 0, so a body-less call (or the
        # dataset row a Gym agent sends, which has no idx) is answered with problem 0.
        idx = body.get("idx", 0)
        if isinstance(idx, float) and idx.is_integer() and abs(idx) >= 2**63:
            # orjson turns integers beyond 64 bits into floats; they are out of range.
            raise ApiError(
                400, "index_out_of_range", f"idx: {idx:.0f} is outside [0, {size})", "idx"
            )
        if isinstance(idx, bool) or not isinstance(idx, int):
            raise invalid("idx", f"expected an integer, got {type(idx).__name__}")
        if not 0 <= idx < size:
            raise ApiError(400, "index_out_of_range", f"idx: {idx} is outside [0, {size})", "idx")
        return idx

    async def post_verify(self, request: Request) -> Response:
        """`POST /verify`: score one response (NeMo Evaluator's form, or Gym's)."""
        raw = await read_body(request, self.max_body_bytes, self.body_timeout)
        status, body = await self.verify_answer(raw)
        return Response(body, status_code=status, headers=JSON_HEADERS)

    async def verify_answer(self, raw: bytes) -> Answer:
        """`/verify` for a body already read: every error is its answer, not raised."""
        try:
            return 200, await self._verify_json(parse_json_object(raw))
        except ApiError as exc:
            return error_answer(exc)
        except Exception as exc:
            return _unexpected_answer("/verify", exc)

    async def _verify_json(self, body: dict[str, Any]) -> bytes:
        req = parse_verify(body)
        verdict = await self._verdict(req)
        if not req.gym_form:
            if isinstance(verdict, bytes):  # the scoring worker's JSON, as it wrote it
                return verdict
            return dumps(verdict)
        if isinstance(verdict, bytes):
            verdict = loads(verdict)
        # NeMo Gym's BaseVerifyResponse is the request plus `reward`; agents validate the
        # reply against it, so the whole body goes back.
        echoed = dict(body)
        echoed.update(verdict)
        echoed["metadata"] = {**req.metadata, **(verdict.get("metadata") or {})}
        # NeMo Evaluator's Gym-form reply always names the answer it scored against.
        echoed.setdefault("expected_answer", req.expected)
        return dumps(echoed)

    async def _scored(self, req: VerifyRequest) -> VerifyResult:
        """Score on this loop: the environment's own verify, in a sandbox if it has one."""
        if self.sandbox is None:
            return await self.env.verify(req.text, req.expected, **req.kwargs)
        # One sandbox per response, stopped however scoring ends (a timeout cancels
        # this, which stops the sandbox and the model's code in it); waiting for one of
        # the sandbox's `concurrency` slots counts against the verify timeout.
        async with self.sandbox() as sb:
            return await self.env.verify(req.text, req.expected, sandbox=sb, **req.kwargs)

    async def _verdict(self, req: VerifyRequest) -> dict[str, Any] | bytes:
        """The verdict: as JSON from a scoring worker, or as a dict scored on this loop
        within the timeout; every way scoring fails is a structured 4xx/503, never a reward."""
        verify_timeout = self.verify_timeout
        try:
            if self.pool is not None:
                return await self.pool.verify_json(req.text, req.expected, req.kwargs,
                                                   verify_timeout)
            try:
                async with asyncio.timeout(verify_timeout):
                    result = await self._scored(req)
            except TimeoutError:
                raise ScoringTimeout(f"scoring took longer than {verify_timeout:g} s") from None
            if not isinstance(result, VerifyResult):
                raise ScoringFailed("scorer returned no VerifyResult")
            return result.to_dict()
        except asyncio.CancelledError:
            # uvicorn cancels requests still in flight when its graceful-shutdown time is
            # up; say the server is stopping (503) rather than letting it answer 500.
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            raise ApiError(503, "server_stopping", "the server is stopping; retry the request",
                           None) from None
        except ScoringTimeout as exc:
            log.warning("verify timed out on a %d-character response", len(req.text))
            raise ApiError(422, "scorer_timeout", str(exc), "response") from None
        except ScoringFailed as exc:
            log.warning("verify failed: %s", exc)
            raise ApiError(422, "scorer_error", str(exc)[:500], "response") from None
        except Exception as exc:
            # A scorer that chokes on an input is the input's problem from the client's
            # side: a structured 4xx, never a reward and never a traceback.
            log.warning("verify failed: %r", exc)
            raise ApiError(
                422, "scorer_error", f"scorer failed: {type(exc).__name__}: {exc}"[:500], "response"
            ) from None

    async def post_aggregate_metrics(self, request: Request) -> Response:
        """`POST /aggregate_metrics`: NeMo Gym's summary of a run's rollouts."""
        from benchmarks import serve_metrics

        body = await read_json_object(request, self.aggregate_body_bytes, self.body_timeout)
        try:
            # numpy over every rollout of a run: off the event loop, like scoring. A thread
            # cannot be stopped, so the summary keeps to its own deadline.
            summary = await asyncio.to_thread(serve_metrics.aggregate_metrics, body)
        except serve_metrics.AggregateInputError as exc:
            raise invalid(exc.field, str(exc).partition(": ")[2]) from None
        except serve_metrics.AggregateRefused as exc:  # too many rollouts (413), out of time (422)
            raise ApiError(exc.status, exc.code, str(exc), "verify_responses") from None
        return json_response(summary)


def parse_verify(body: dict[str, Any]) -> VerifyRequest:
    """Validate a `/verify` body (400 naming the bad field) and find what to score."""
    if "response" not in body:
        raise invalid("response", "required")
    response = body["response"]
    # NeMo Evaluator's rule: a body without `expected` is the Gym form. A Responses-API
    # object or `responses_create_params` is the Gym form whatever else is there.
    gym_form = (
        "expected" not in body
        or "responses_create_params" in body
        or isinstance(response, dict)
    )
    if gym_form and "responses_create_params" in body:
        rcp = body["responses_create_params"]
        if not isinstance(rcp, dict):
            raise invalid(
                "responses_create_params", f"expected an object, got {type(rcp).__name__}"
            )
    metadata = body.get("metadata")
    if metadata is None:
        metadata = {}
    elif not isinstance(metadata, dict):
        raise invalid("metadata", f"expected an object, got {type(metadata).__name__}")
    text, reasoning = extract_response_text(response)
    expected = find_expected(body, metadata)
    kwargs = {k: v for k, v in metadata.items() if k not in _RESERVED_KWARGS}
    if reasoning is not None and "reasoning" not in kwargs:
        kwargs["reasoning"] = reasoning
    return VerifyRequest(body, text, expected, kwargs, metadata, gym_form)


def error_answer(exc: ApiError) -> Answer:
    """An `ApiError` as its structured JSON answer."""
    return exc.status, dumps(exc.to_dict())


def _unexpected_answer(path: str, exc: Exception) -> Answer:
    """Anything else: logged with its traceback here; the client only learns it was ours."""
    log.error("unhandled error on %s", path, exc_info=exc)
    return 500, _INTERNAL_ERROR


_INTERNAL_ERROR = dumps({"error": "internal_error", "detail": "internal server error",
                         "field": None})


async def on_api_error(request: Request, exc: Exception) -> Response:
    """An `ApiError` as its structured JSON reply."""
    assert isinstance(exc, ApiError)
    return json_response(exc.to_dict(), exc.status)


async def on_unexpected(request: Request, exc: Exception) -> Response:
    """Anything else: logged with its traceback here; the client only learns it was ours."""
    log.error("unhandled error on %s", request.url.path, exc_info=exc)
    return json_response(
        {"error": "internal_error", "detail": "internal server error", "field": None}, 500
    )
