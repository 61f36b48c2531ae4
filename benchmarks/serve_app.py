"""The `nel serve` HTTP app: routes, request validation, and where scoring runs.

See `benchmarks.serve` for the protocol. Scoring runs where an overrun can be stopped:
- a local scorer (built-in, BYOB, sympy...) in a killable worker process
  (`benchmarks.serve_pool`): past `verify_timeout` the worker is SIGKILLed and replaced;
- a sandboxed scorer on the server's loop: its cost is the model's code, which runs in the
  sandbox and is stopped (with the sandbox) when the limit passes;
- a remote (gym://) verifier on the server's loop: it is network I/O on this loop's session.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks._types import EvalEnvironment, VerifyResult
from benchmarks.errors import NelError
from benchmarks.serve_extract import extract_response_text, find_expected
from benchmarks.serve_json import (
    DEFAULT_BODY_TIMEOUT,
    JSON_HEADERS,
    ApiError,
    dumps,
    invalid,
    json_response,
    read_json_object,
)
from benchmarks.serve_pool import (
    DEFAULT_SCORER_MEMORY_MB,
    ScoringFailed,
    ScoringPool,
    ScoringTimeout,
    default_pool_size,
)

if TYPE_CHECKING:
    from fastapi import FastAPI
    from starlette.requests import Request
    from starlette.responses import Response

    from benchmarks.serve import SandboxProvider

__all__ = ["generate_app"]

log = logging.getLogger("nel.serve")

DEFAULT_MAX_BODY_BYTES = 1_000_000
AGGREGATE_MAX_BODY_BYTES = 64_000_000
# Scoring one response may take this long before the request is answered 422.
DEFAULT_VERIFY_TIMEOUT = 30.0
# The `protocol` strings NeMo Evaluator 0.3.0's `/health` reports, byte for byte.
PROTOCOL_EVALUATOR = "evaluator"
PROTOCOL_GYM = "gym"
# Seed metadata keys that would collide with verify()'s own parameters if splatted.
# `sandbox` is the server's own (a client must never choose what the code runs in).
_RESERVED_KWARGS = frozenset({"response", "expected", "self", "sandbox"})


def _scoring_pool(env: EvalEnvironment, sandbox: Any, size: int | None,
                  memory_mb: int | None) -> ScoringPool | None:
    """The worker pool local scorers run in; None where scoring stays on the loop."""
    from benchmarks.remote import GymEnvironment
    from benchmarks.serve import LimitedEnvironment

    inner = env.inner if isinstance(env, LimitedEnvironment) else env
    if sandbox is not None or isinstance(inner, GymEnvironment):
        return None
    return ScoringPool(env, size or default_pool_size(), memory_mb)


def generate_app(
    env: EvalEnvironment,
    gym_compat: bool = False,
    data_export_dir: str | Path | None = None,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    benchmark_name: str | None = None,
    body_timeout: float = DEFAULT_BODY_TIMEOUT,
    verify_timeout: float = DEFAULT_VERIFY_TIMEOUT,
    sandbox: SandboxProvider | None = None,
    scoring_workers: int | None = None,
    scorer_memory_mb: int | None = DEFAULT_SCORER_MEMORY_MB,
) -> FastAPI:
    """A FastAPI app serving `env` with the NeMo Evaluator 0.3.0 / NeMo Gym protocol.

    Args:
        env: The environment to serve.
        gym_compat: Answer a `/seed_session` body without `idx` (NeMo Gym's session start)
            with `{}` instead of problem 0, and report the `gym` protocol in `/health`.
        data_export_dir: Also write the dataset as Gym JSONL to `<dir>/<name>.jsonl`
            first (NeMo Evaluator's argument; `nel serve --export-data` is the CLI's).
        max_body_bytes: Bodies larger than this are refused with 413.
        benchmark_name: Name reported by `/health` (defaults to `env.name`).
        body_timeout: Seconds a request body may take to arrive (408 after).
        verify_timeout: Seconds scoring one response may take, waiting for a scoring
            worker included (422 `scorer_timeout` after; the worker is killed, so an
            overrunning scorer stops using CPU and memory). Scoring runs in worker
            processes (`benchmarks.serve_pool`), so other requests are served meanwhile.
        sandbox: Opens a started sandbox per `/verify`, passed to `verify(..., sandbox=)`
            (required by a benchmark that runs model code, e.g. humaneval). Sandboxed
            scoring runs on the server's loop: the model's code runs in the sandbox, which
            is stopped when the limit passes.
        scoring_workers: Scoring worker processes (default `default_pool_size()`).
        scorer_memory_mb: Address space each scoring worker may grow by (MiB; None: no cap).

    Returns:
        The app; run it with uvicorn (or `serve`).

    Raises:
        NelError: the benchmark runs model code and no `sandbox` was given.
    """
    from fastapi import FastAPI

    from benchmarks.serve import export_data, needs_sandbox

    name = benchmark_name or env.name
    if sandbox is None and needs_sandbox(env):
        # Refused here, once, rather than a 422 on every /verify.
        raise NelError(f"benchmark {name!r} runs model-written code and needs a sandbox: "
                       "serve it with `--sandbox local` (or `--sandbox docker --sandbox-image IMAGE`)")
    size = len(env)
    if data_export_dir is not None:
        export_data(env, Path(data_export_dir).expanduser() / f"{name}.jsonl", benchmark=name)
    protocol = PROTOCOL_GYM if gym_compat else PROTOCOL_EVALUATOR
    # /aggregate_metrics receives every rollout of a run at once (stripped of the model
    # responses), so it gets a larger allowance than one rollout's body.
    aggregate_body_bytes = max(max_body_bytes, AGGREGATE_MAX_BODY_BYTES)
    health = dumps(
        {
            "status": "ok",
            "benchmark": name,
            "dataset_size": size,
            "protocol": protocol,
            "version": env.version,
            "gym_compat": gym_compat,
        }
    )
    size_body = dumps({"size": size})

    app = FastAPI(
        title=f"nel serve: {name}",
        description="Seed/verify protocol of NeMo Evaluator 0.3.0 (NeMo Gym compatible).",
        docs_url=None,
        redoc_url=None,
    )
    app.state.env = env
    # Forked now, from the thread that builds the app (the server's main thread), before
    # the server's event loop runs; stopped with the app, and with the process at the latest.
    pool = _scoring_pool(env, sandbox, scoring_workers, scorer_memory_mb)
    app.state.scoring_pool = pool
    if pool is not None:
        app.router.on_shutdown.append(pool.close)
        weakref.finalize(app, pool.close)

    from starlette.responses import Response

    # Plain Starlette routes (request in, response out) skip FastAPI's per-request
    # dependency solving: the bodies are validated by hand below anyway.
    async def get_health(request: Request) -> Response:
        return Response(health, headers=JSON_HEADERS)

    async def get_dataset_size(request: Request) -> Response:
        return Response(size_body, headers=JSON_HEADERS)

    async def post_seed_session(request: Request) -> Response:
        body = await read_json_object(request, max_body_bytes, body_timeout, allow_empty=True)
        if "idx" not in body and gym_compat:
            # NeMo Gym agents post the dataset row to start a session; our sessions are
            # stateless, so there is nothing to set up: Gym's BaseSeedSessionResponse is {}.
            return Response(b"{}", headers=JSON_HEADERS)
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
        try:
            seed = await env.seed(idx)
        except Exception as exc:
            log.warning("seed(%d) failed: %r", idx, exc)
            raise ApiError(
                422, "seed_error", f"seed({idx}) failed: {type(exc).__name__}: {exc}"[:500], "idx"
            ) from None
        return json_response(seed.to_dict())

    async def post_verify(request: Request) -> Response:
        body = await read_json_object(request, max_body_bytes, body_timeout)
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

        async def scored() -> VerifyResult:
            if sandbox is None:
                return await env.verify(text, expected, **kwargs)
            # One sandbox per response, stopped however scoring ends (a timeout cancels
            # this, which stops the sandbox and the model's code in it); waiting for one of
            # the sandbox's `concurrency` slots counts against the verify timeout.
            async with sandbox() as sb:
                return await env.verify(text, expected, sandbox=sb, **kwargs)

        try:
            if pool is not None:
                verdict = await pool.verify(text, expected, kwargs, verify_timeout)
            else:
                try:
                    async with asyncio.timeout(verify_timeout):
                        result = await scored()
                except TimeoutError:
                    raise ScoringTimeout(f"scoring took longer than {verify_timeout:g} s") from None
                if not isinstance(result, VerifyResult):
                    raise ScoringFailed("scorer returned no VerifyResult")
                verdict = result.to_dict()
        except asyncio.CancelledError:
            # uvicorn cancels requests still in flight when its graceful-shutdown time is
            # up; say the server is stopping (503) rather than letting it answer 500.
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            raise ApiError(503, "server_stopping", "the server is stopping; retry the request",
                           None) from None
        except ScoringTimeout as exc:
            log.warning("verify timed out on a %d-character response", len(text))
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
        if not gym_form:
            return json_response(verdict)
        # NeMo Gym's BaseVerifyResponse is the request plus `reward`; agents validate the
        # reply against it, so the whole body goes back.
        echoed = dict(body)
        echoed.update(verdict)
        echoed["metadata"] = {**metadata, **(verdict.get("metadata") or {})}
        # NeMo Evaluator's Gym-form reply always names the answer it scored against.
        echoed.setdefault("expected_answer", expected)
        return json_response(echoed)

    async def post_aggregate_metrics(request: Request) -> Response:
        from benchmarks import serve_metrics

        body = await read_json_object(request, aggregate_body_bytes, body_timeout)
        try:
            # numpy over every rollout of a run: off the event loop, like scoring. A thread
            # cannot be stopped, so the summary keeps to its own deadline.
            summary = await asyncio.to_thread(serve_metrics.aggregate_metrics, body)
        except serve_metrics.AggregateInputError as exc:
            raise invalid(exc.field, str(exc).partition(": ")[2]) from None
        except serve_metrics.AggregateRefused as exc:  # too many rollouts (413), out of time (422)
            raise ApiError(exc.status, exc.code, str(exc), "verify_responses") from None
        return json_response(summary)

    app.add_route("/health", get_health, methods=["GET"])
    app.add_route("/aggregate_metrics", post_aggregate_metrics, methods=["POST"])
    app.add_route("/dataset_size", get_dataset_size, methods=["GET"])
    app.add_route("/seed_session", post_seed_session, methods=["POST"])
    app.add_route("/verify", post_verify, methods=["POST"])

    async def on_api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return json_response(exc.to_dict(), exc.status)

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        # Log the traceback server-side; the client only learns that it was our fault.
        log.error("unhandled error on %s", request.url.path, exc_info=exc)
        return json_response(
            {"error": "internal_error", "detail": "internal server error", "field": None}, 500
        )

    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(Exception, on_unexpected)
    return app
