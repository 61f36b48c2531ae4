"""Serve any benchmark over HTTP (seed/verify) for RL training: `nel serve`.

The wire protocol is NeMo Evaluator 0.3.0's, so NeMo Gym agents and `ng_collect_rollouts`
work unchanged:

- `GET /health` -> `{status, benchmark, dataset_size, protocol, version, gym_compat}`
- `GET /dataset_size` -> `{size}`
- `POST /seed_session {idx}` -> `SeedResult.to_dict()`; no idx (or no body at all, or the
  dataset row a NeMo Gym agent sends) means idx 0, as in NeMo Evaluator
- `POST /aggregate_metrics {verify_responses}` -> NeMo Gym's `AggregateMetrics`
  (`benchmarks.serve_metrics`), which `ng_collect_rollouts` calls after the rollouts
- `POST /verify` in two forms:
  * evaluator form `{response: str, expected, metadata}` -> `VerifyResult.to_dict()`;
  * Gym form, recognised by `responses_create_params` in the body, a `response` that is an
    object, or no `expected` key (NeMo Evaluator's rule): the response is a Responses-API object (`output[].content[].text`), an OpenAI
    chat completion (`choices[0].message.content`, plus `reasoning_content`) or a string;
    the expected answer comes from `expected_answer` / `expected`, the body's `metadata` or
    its `verifier_metadata`. The reply is the request body echoed back (as NeMo Gym's
    `BaseVerifyResponse` is) with `reward`, `extracted_answer`, `scoring_details`,
    `metadata` and `expected_answer` added at the top level.

With `gym_compat=True`, `/health` reports the `gym` protocol and a `/seed_session` body
without `idx` (NeMo Gym's session start: the dataset row) is answered `{}` like Gym's
`BaseSeedSessionResponse`.

Bad input never earns a reward: a malformed body is a 422 naming the field, an idx out of
range is a 400, an oversized body is a 413, and a scorer that raises gives a 422 with the
exception's type and message (never a traceback).

Bodies are parsed by hand with orjson rather than through pydantic models: it is faster on
the hot path (an RL loop calls this millions of times) and lets every error name its field.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from benchmarks._registry import UnknownBenchmarkError, get_benchmark, get_factory
from benchmarks._types import EvalEnvironment, SeedResult, VerifyResult
from benchmarks.errors import NelError
from benchmarks.plugins import load_module

if TYPE_CHECKING:
    from fastapi import FastAPI
    from starlette.requests import Request
    from starlette.responses import Response

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "PROTOCOL_EVALUATOR",
    "PROTOCOL_GYM",
    "LimitedEnvironment",
    "build_environment",
    "export_data",
    "export_rows",
    "extract_response_text",
    "generate_app",
    "serve",
]

log = logging.getLogger("nel.serve")

DEFAULT_MAX_BODY_BYTES = 1_000_000
AGGREGATE_MAX_BODY_BYTES = 64_000_000
# A body must arrive completely within this (a client sending it byte by byte is cut off).
DEFAULT_BODY_TIMEOUT = 30.0
# Scoring one response may take this long before the request is answered 422.
DEFAULT_VERIFY_TIMEOUT = 30.0
ENV_VERIFY_TIMEOUT = "NEL_SERVE_VERIFY_TIMEOUT"
ENV_READ_TIMEOUT = "NEL_SERVE_HEAD_TIMEOUT"  # also read by serve_limits' protocol
# Scoring threads alive at once (abandoned overruns included).
SCORING_THREADS = 8
# The `protocol` strings NeMo Evaluator 0.3.0's `/health` reports, byte for byte.
PROTOCOL_EVALUATOR = "evaluator"
PROTOCOL_GYM = "gym"

# Environment variables through which `serve(workers=N)` tells each uvicorn worker process
# what to build: workers are fresh interpreters and rebuild the environment by name.
ENV_BENCHMARK = "NEL_SERVE_BENCHMARK"
ENV_PARAMS = "NEL_SERVE_PARAMS"
ENV_GYM_COMPAT = "NEL_SERVE_GYM_COMPAT"
ENV_MAX_BODY = "NEL_SERVE_MAX_BODY_BYTES"
ENV_MAX_PROBLEMS = "NEL_SERVE_MAX_PROBLEMS"
ENV_IMPORTS = "NEL_SERVE_IMPORTS"

# Seed metadata keys that would collide with verify()'s own parameters if splatted.
# `sandbox` is the server's own (a client must never choose what the code runs in).
_RESERVED_KWARGS = frozenset({"response", "expected", "self", "sandbox"})
_JSON_HEADERS = {"content-type": "application/json"}


# --------------------------------------------------------------------------- errors


class ApiError(Exception):
    """A client error with an HTTP status, a stable code and the offending field."""

    def __init__(self, status: int, code: str, detail: str, field: str | None = None):
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.field = field

    def to_dict(self) -> dict[str, Any]:
        """The JSON error body: `{error, detail, field}`."""
        return {"error": self.code, "detail": self.detail, "field": self.field}


def _invalid(field: str, detail: str) -> ApiError:
    return ApiError(422, "invalid_request", f"{field}: {detail}", field)


# --------------------------------------------------------------------------- JSON


def _json_default(obj: Any) -> Any:
    # Scorers put numpy scalars, sets, paths... into metadata; never fail on them.
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    item = getattr(obj, "item", None)
    if callable(item):
        try:
            return item()
        except Exception:
            pass
    return str(obj)


def dumps(obj: Any) -> bytes:
    """Serialise to JSON bytes; falls back to the stdlib for ints orjson cannot hold."""
    try:
        return orjson.dumps(
            obj, default=_json_default, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
        )
    except TypeError:
        # orjson refuses integers beyond 64 bits (a client may echo one back to us).
        return json.dumps(obj, default=_json_default).encode()


def _loads(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        first_error = exc
    # orjson rejects valid JSON with integers beyond 64 bits; the stdlib accepts them. Deep
    # nesting makes the stdlib recurse, hence RecursionError.
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise ApiError(
            422, "invalid_json", f"body: not valid JSON ({first_error})", "body"
        ) from None


def _json_response(obj: Any, status: int = 200) -> Response:
    from starlette.responses import Response

    return Response(dumps(obj), status_code=status, headers=_JSON_HEADERS)


# --------------------------------------------------------------------------- body reading


def _require_json(request: Request) -> None:
    """Refuse a declared content type other than JSON (415); none at all is accepted."""
    ctype = request.headers.get("content-type")
    if ctype is None or not ctype.strip():  # an empty header declares nothing either
        return
    media = ctype.split(";", 1)[0].strip().lower()
    if media != "application/json" and not (
        media.startswith("application/") and media.endswith("+json")
    ):
        raise ApiError(
            415,
            "unsupported_media_type",
            f"content-type {media or ctype!r} is not JSON; send application/json",
            "content-type",
        )


async def _read_json_object(
    request: Request,
    limit: int,
    timeout: float = DEFAULT_BODY_TIMEOUT,
    *,
    allow_empty: bool = False,
) -> dict[str, Any]:
    """Read the body (at most `limit` bytes, within `timeout` s) and parse a JSON object.

    With `allow_empty`, a body-less request reads as `{}` (NeMo Evaluator's `/seed_session`
    takes one); otherwise an empty body is a 422.
    """
    _require_json(request)
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise ApiError(
                400, "bad_request", "Content-Length is not an integer", "content-length"
            ) from None
        if size > limit:
            raise ApiError(
                413,
                "body_too_large",
                f"body of {size} bytes exceeds the {limit}-byte limit",
                "body",
            )
    # Count while streaming too: chunked bodies carry no Content-Length and a client can lie.
    chunks: list[bytes] = []
    received = 0
    try:
        async with asyncio.timeout(timeout):
            async for chunk in request.stream():
                received += len(chunk)
                if received > limit:
                    raise ApiError(
                        413, "body_too_large", f"body exceeds the {limit}-byte limit", "body"
                    )
                chunks.append(chunk)
    except TimeoutError:
        raise ApiError(
            408, "body_timeout", f"body not received within {timeout:g} s", "body"
        ) from None
    raw = b"".join(chunks)
    if not raw.strip():
        if allow_empty:
            return {}
        raise ApiError(422, "invalid_request", "body: empty; a JSON object is required", "body")
    data = _loads(raw)
    if not isinstance(data, dict):
        raise ApiError(
            422,
            "invalid_request",
            f"body: expected a JSON object, got {type(data).__name__}",
            "body",
        )
    return data


# --------------------------------------------------------------------------- response parsing


def _text_parts(content: Any, field: str) -> str:
    """Concatenate the text parts of a message `content` (string or list of parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _invalid(field, f"expected a string or a list of parts, got {type(content).__name__}")
    out: list[str] = []
    for j, part in enumerate(content):
        if isinstance(part, str):
            out.append(part)
            continue
        if not isinstance(part, dict):
            raise _invalid(f"{field}[{j}]", f"expected an object, got {type(part).__name__}")
        # output_text (Responses API), text (chat parts), reasoning_text / summary_text
        # (reasoning items); refusals and images carry no answer text.
        if part.get("type", "text") in ("output_text", "text", "reasoning_text", "summary_text"):
            text = part.get("text")
            if text is None:
                continue
            if not isinstance(text, str):
                raise _invalid(
                    f"{field}[{j}].text", f"expected a string, got {type(text).__name__}"
                )
            out.append(text)
    return "".join(out)


def _responses_api_text(obj: Mapping[str, Any]) -> tuple[str, str | None]:
    output = obj.get("output")
    if not isinstance(output, list):
        raise _invalid("response.output", f"expected a list, got {type(output).__name__}")
    messages: list[str] = []
    reasoning: list[str] = []
    for i, item in enumerate(output):
        field = f"response.output[{i}]"
        if not isinstance(item, dict):
            raise _invalid(field, f"expected an object, got {type(item).__name__}")
        kind = item.get("type", "message")
        if kind == "message":
            if item.get("role", "assistant") != "assistant":
                continue
            messages.append(_text_parts(item.get("content"), f"{field}.content"))
        elif kind == "reasoning":
            # Prefer the raw reasoning text; fall back to the summary some servers return.
            text = _text_parts(item.get("content"), f"{field}.content")
            if not text:
                text = _text_parts(item.get("summary"), f"{field}.summary")
            if text:
                reasoning.append(text)
        # function_call / function_call_output items are tool traffic, not the answer.
    # Separate messages with a newline so numbers in consecutive messages cannot fuse.
    return "\n".join(m for m in messages if m), ("\n".join(reasoning) or None)


def _chat_completion_text(obj: Mapping[str, Any]) -> tuple[str, str | None]:
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices:
        raise _invalid("response.choices", "expected a non-empty list")
    choice = choices[0]
    if not isinstance(choice, dict):
        raise _invalid("response.choices[0]", f"expected an object, got {type(choice).__name__}")
    message = choice.get("message")
    if message is None and isinstance(choice.get("text"), str):
        return choice["text"], None  # legacy completions choice
    if not isinstance(message, dict):
        raise _invalid("response.choices[0].message", "expected an object")
    text = _text_parts(message.get("content"), "response.choices[0].message.content")
    reasoning = message.get("reasoning_content", message.get("reasoning"))
    if reasoning is not None and not isinstance(reasoning, str):
        raise _invalid("response.choices[0].message.reasoning_content", "expected a string")
    return text, reasoning or None


def extract_response_text(response: Any) -> tuple[str, str | None]:
    """The answer text and the reasoning text (if separate) of a model response.

    Accepts a plain string, a Responses-API object (NeMo Gym's `NeMoGymResponse`) or an
    OpenAI chat completion.

    Raises:
        ApiError: 422 naming the field when the response has none of those shapes.
    """
    if isinstance(response, str):
        return response, None
    if isinstance(response, dict):
        if "output" in response:
            return _responses_api_text(response)
        if "choices" in response:
            return _chat_completion_text(response)
        if isinstance(response.get("output_text"), str):
            return response["output_text"], None
        raise _invalid(
            "response",
            "an object must be a Responses API response (`output`) or a chat completion "
            "(`choices`)",
        )
    if response is None:
        raise _invalid("response", "required")
    raise _invalid("response", f"expected a string or an object, got {type(response).__name__}")


def _as_answer(value: Any, field: str) -> str:
    if isinstance(value, str):
        return value
    # Datasets store numeric answers as numbers; bool is an int subclass but no answer.
    if isinstance(value, int | float) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            raise _invalid(field, "must be finite")
        return str(value)
    raise _invalid(field, f"expected a string or a number, got {type(value).__name__}")


def _find_expected(body: Mapping[str, Any], metadata: Mapping[str, Any]) -> str:
    sources: list[tuple[Mapping[str, Any], str]] = [(body, ""), (metadata, "metadata.")]
    # NeMo Gym rows keep per-item verifier inputs in `verifier_metadata`.
    verifier = body.get("verifier_metadata")
    if isinstance(verifier, dict):
        sources.append((verifier, "verifier_metadata."))
    for source, where in sources:
        for key in ("expected", "expected_answer"):
            if source.get(key) is not None:
                return _as_answer(source[key], f"{where}{key}")
    raise _invalid(
        "expected",
        "required (send `expected` or `expected_answer`, or put it in `metadata` or "
        "`verifier_metadata`)",
    )


# --------------------------------------------------------------------------- environments


class LimitedEnvironment(EvalEnvironment):
    """The first `limit` problems of another environment (`--max-problems`)."""

    def __init__(self, inner: EvalEnvironment, limit: int):
        if limit < 0:
            raise NelError(f"--max-problems must be >= 0, got {limit}")
        self.inner = inner
        self.limit = min(limit, len(inner))
        self.name = inner.name
        self.version = inner.version

    async def seed(self, idx: int) -> SeedResult:
        """Problem `idx` of the inner environment (0 <= idx < limit)."""
        if not 0 <= idx < self.limit:
            raise IndexError(idx)
        return await self.inner.seed(idx)

    async def verify(self, response: str, expected: str, **metadata: Any) -> VerifyResult:
        """Delegate to the inner environment's scorer."""
        return await self.inner.verify(response, expected, **metadata)

    def __len__(self) -> int:
        return self.limit

    def fingerprint(self) -> str:
        """The inner fingerprint plus the cut-off."""
        return f"{self.inner.fingerprint()}:first{self.limit}"

    def data_fingerprint(self) -> str:
        """The inner data hash (the cut-off is in `fingerprint`)."""
        return self.inner.data_fingerprint()

    async def close(self) -> None:
        """Close the inner environment."""
        await self.inner.close()


def import_plugins(specs: Iterable[str]) -> None:
    """Import modules (dotted names or `.py` paths) so their benchmarks register.

    Raises:
        NelError: when a module cannot be found.
    """
    for spec in specs:
        if spec.strip():
            load_module(spec)


def build_environment(
    name: str,
    params: Mapping[str, Any] | None = None,
    *,
    max_problems: int | None = None,
    imports: Sequence[str] = (),
) -> EvalEnvironment:
    """Build a benchmark by registry name (or `gym://`), optionally cut to `max_problems`.

    Raises:
        NelError: for an unknown name (with the registry's suggestions) or a bad import.
    """
    import_plugins(imports)
    try:
        env = get_benchmark(name, **dict(params or {}))
    except UnknownBenchmarkError as exc:
        raise NelError(str(exc)) from None
    if max_problems is not None:
        env = LimitedEnvironment(env, max_problems)
    return env


# --------------------------------------------------------------------------- the app

#: What `generate_app(sandbox=...)` takes: each call opens one started sandbox for one
#: `/verify` (an async context manager; the sandbox is stopped when it exits). It must work
#: from any event loop: scoring runs in threads with their own loops. The CLI builds it
#: from `--sandbox` (this package never imports the sandbox types).
SandboxProvider = Callable[[], contextlib.AbstractAsyncContextManager[Any]]


def needs_sandbox(env: EvalEnvironment) -> bool:
    """Whether the served benchmark runs model-written code (its `verify` needs `sandbox=`)."""
    inner = env.inner if isinstance(env, LimitedEnvironment) else env
    return bool(getattr(inner, "needs_sandbox", False))


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
        verify_timeout: Seconds scoring one response may take (422 `scorer_timeout`
            after); scoring runs off the event loop, so other requests are served meanwhile.
        sandbox: Opens a started sandbox per `/verify`, passed to `verify(..., sandbox=)`
            (required by a benchmark that runs model code, e.g. humaneval).

    Returns:
        The app; run it with uvicorn (or `serve`).

    Raises:
        NelError: the benchmark runs model code and no `sandbox` was given.
    """
    from fastapi import FastAPI

    from benchmarks.remote import GymEnvironment
    from benchmarks.serve_limits import ScoringTimeout, run_scorer

    # A remote (gym://) verifier is network I/O on this loop's session; every local scorer
    # is CPU work that would stall the loop, so it runs in a scoring thread.
    inner = env.inner if isinstance(env, LimitedEnvironment) else env
    score_in_thread = not isinstance(inner, GymEnvironment)
    slots: asyncio.Semaphore | None = None

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

    from starlette.responses import Response

    # Plain Starlette routes (request in, response out) skip FastAPI's per-request
    # dependency solving: the bodies are validated by hand below anyway.
    async def get_health(request: Request) -> Response:
        return Response(health, headers=_JSON_HEADERS)

    async def get_dataset_size(request: Request) -> Response:
        return Response(size_body, headers=_JSON_HEADERS)

    async def post_seed_session(request: Request) -> Response:
        body = await _read_json_object(request, max_body_bytes, body_timeout, allow_empty=True)
        if "idx" not in body and gym_compat:
            # NeMo Gym agents post the dataset row to start a session; our sessions are
            # stateless, so there is nothing to set up: Gym's BaseSeedSessionResponse is {}.
            return Response(b"{}", headers=_JSON_HEADERS)
        # NeMo Evaluator's request model defaults idx to 0, so a body-less call (or the
        # dataset row a Gym agent sends, which has no idx) is answered with problem 0.
        idx = body.get("idx", 0)
        if isinstance(idx, float) and idx.is_integer() and abs(idx) >= 2**63:
            # orjson turns integers beyond 64 bits into floats; they are out of range.
            raise ApiError(
                400, "index_out_of_range", f"idx: {idx:.0f} is outside [0, {size})", "idx"
            )
        if isinstance(idx, bool) or not isinstance(idx, int):
            raise _invalid("idx", f"expected an integer, got {type(idx).__name__}")
        if not 0 <= idx < size:
            raise ApiError(400, "index_out_of_range", f"idx: {idx} is outside [0, {size})", "idx")
        try:
            seed = await env.seed(idx)
        except Exception as exc:
            log.warning("seed(%d) failed: %r", idx, exc)
            raise ApiError(
                422, "seed_error", f"seed({idx}) failed: {type(exc).__name__}: {exc}"[:500], "idx"
            ) from None
        return _json_response(seed.to_dict())

    async def post_verify(request: Request) -> Response:
        nonlocal slots
        body = await _read_json_object(request, max_body_bytes, body_timeout)
        if "response" not in body:
            raise _invalid("response", "required")
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
                raise _invalid(
                    "responses_create_params", f"expected an object, got {type(rcp).__name__}"
                )
        metadata = body.get("metadata")
        if metadata is None:
            metadata = {}
        elif not isinstance(metadata, dict):
            raise _invalid("metadata", f"expected an object, got {type(metadata).__name__}")
        text, reasoning = extract_response_text(response)
        expected = _find_expected(body, metadata)
        kwargs = {k: v for k, v in metadata.items() if k not in _RESERVED_KWARGS}
        if reasoning is not None and "reasoning" not in kwargs:
            kwargs["reasoning"] = reasoning

        async def scored() -> Any:
            if sandbox is None:
                return await env.verify(text, expected, **kwargs)
            # One sandbox per response, stopped however scoring ends; waiting for one of
            # the sandbox's `concurrency` slots counts against the verify timeout.
            async with sandbox() as sb:
                return await env.verify(text, expected, sandbox=sb, **kwargs)

        try:
            if score_in_thread:
                if slots is None:
                    slots = asyncio.Semaphore(SCORING_THREADS)  # bound to the serving loop
                result = await run_scorer(scored, verify_timeout, slots)
            else:
                result = await scored()
        except ScoringTimeout as exc:
            log.warning("verify timed out on a %d-character response", len(text))
            raise ApiError(422, "scorer_timeout", str(exc), "response") from None
        except Exception as exc:
            # A scorer that chokes on an input is the input's problem from the client's
            # side: a structured 4xx, never a reward and never a traceback.
            log.warning("verify failed: %r", exc)
            raise ApiError(
                422, "scorer_error", f"scorer failed: {type(exc).__name__}: {exc}"[:500], "response"
            ) from None
        if not isinstance(result, VerifyResult):
            raise ApiError(422, "scorer_error", "scorer returned no VerifyResult", "response")
        verdict = result.to_dict()
        if not gym_form:
            return _json_response(verdict)
        # NeMo Gym's BaseVerifyResponse is the request plus `reward`; agents validate the
        # reply against it, so the whole body goes back.
        echoed = dict(body)
        echoed.update(verdict)
        echoed["metadata"] = {**metadata, **result.metadata}
        # NeMo Evaluator's Gym-form reply always names the answer it scored against.
        echoed.setdefault("expected_answer", expected)
        return _json_response(echoed)

    async def post_aggregate_metrics(request: Request) -> Response:
        from benchmarks import serve_metrics

        body = await _read_json_object(request, aggregate_body_bytes, body_timeout)
        try:
            # numpy over every rollout of a run: off the event loop, like scoring. A thread
            # cannot be stopped, so the summary keeps to its own deadline.
            summary = await asyncio.to_thread(serve_metrics.aggregate_metrics, body)
        except serve_metrics.AggregateInputError as exc:
            raise _invalid(exc.field, str(exc).partition(": ")[2]) from None
        except serve_metrics.AggregateRefused as exc:  # too many rollouts (413), out of time (422)
            raise ApiError(exc.status, exc.code, str(exc), "verify_responses") from None
        return _json_response(summary)

    app.add_route("/health", get_health, methods=["GET"])
    app.add_route("/aggregate_metrics", post_aggregate_metrics, methods=["POST"])
    app.add_route("/dataset_size", get_dataset_size, methods=["GET"])
    app.add_route("/seed_session", post_seed_session, methods=["POST"])
    app.add_route("/verify", post_verify, methods=["POST"])

    async def on_api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return _json_response(exc.to_dict(), exc.status)

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        # Log the traceback server-side; the client only learns that it was our fault.
        log.error("unhandled error on %s", request.url.path, exc_info=exc)
        return _json_response(
            {"error": "internal_error", "detail": "internal server error", "field": None}, 500
        )

    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(Exception, on_unexpected)
    return app


def _worker_app() -> FastAPI:
    """Uvicorn factory for `serve(workers=N)`: rebuild the environment from env vars."""
    name = os.environ[ENV_BENCHMARK]
    params = json.loads(os.environ.get(ENV_PARAMS) or "{}")
    max_problems = os.environ.get(ENV_MAX_PROBLEMS)
    imports = [s for s in os.environ.get(ENV_IMPORTS, "").split(os.pathsep) if s]
    env = build_environment(
        name,
        params,
        max_problems=int(max_problems) if max_problems else None,
        imports=imports,
    )
    return generate_app(
        env,
        gym_compat=os.environ.get(ENV_GYM_COMPAT) == "1",
        max_body_bytes=int(os.environ.get(ENV_MAX_BODY) or DEFAULT_MAX_BODY_BYTES),
        benchmark_name=name,
        body_timeout=float(os.environ.get(ENV_READ_TIMEOUT) or DEFAULT_BODY_TIMEOUT),
        verify_timeout=float(os.environ.get(ENV_VERIFY_TIMEOUT) or DEFAULT_VERIFY_TIMEOUT),
    )


def serve(
    env: EvalEnvironment | str,
    host: str = "127.0.0.1",
    port: int = 9090,
    *,
    workers: int = 1,
    gym_compat: bool = False,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    params: Mapping[str, Any] | None = None,
    max_problems: int | None = None,
    imports: Sequence[str] = (),
    log_level: str = "warning",
    benchmark_name: str | None = None,
    read_timeout: float = 10.0,
    verify_timeout: float = DEFAULT_VERIFY_TIMEOUT,
    sandbox: SandboxProvider | None = None,
    endpoint_file: str | Path | None = None,
) -> None:
    """Serve a benchmark until interrupted.

    Args:
        env: An environment instance, or a registered benchmark name (required for
            `workers > 1`: each worker process rebuilds the environment by name).
        host: Interface to bind; 127.0.0.1 unless the caller explicitly wants more.
        port: TCP port.
        workers: Uvicorn worker processes.
        gym_compat: See `generate_app`.
        max_body_bytes: See `generate_app`.
        params: Factory parameters when `env` is a name.
        max_problems: Serve only the first N problems.
        imports: Modules or `.py` files to import first (BYOB benchmarks register there).
        log_level: Uvicorn log level.
        benchmark_name: Name `/health` reports (defaults to the name or `env.name`).
        read_timeout: Seconds a client may take to send its request head, and again its
            body; slower clients are cut off.
        verify_timeout: See `generate_app`.
        sandbox: See `generate_app` (one worker only: the sandboxes live in this process).
        endpoint_file: Once the server answers `/health`, write `host:port` there
            (benchmarks.serve_endpoint); removed when serving ends. With `port=0` the
            bound port is printed on stderr even without a file.

    Raises:
        NelError: for an unknown benchmark, `workers > 1` with an unregistered instance or
            with a sandbox, or a benchmark that needs a sandbox served without one.
    """
    import uvicorn

    # Environment variables reach every worker process (and the protocol class, which
    # uvicorn builds itself).
    os.environ[ENV_READ_TIMEOUT] = str(read_timeout)
    os.environ[ENV_VERIFY_TIMEOUT] = str(verify_timeout)
    settings: dict[str, Any] = {
        "host": host,
        "port": port,
        "log_level": log_level,
        "access_log": False,
        # Gym agents keep connections open between rollouts.
        "timeout_keep_alive": 30,
        # Request heads must arrive within a deadline (uvicorn has none).
        "http": "benchmarks.serve_limits:HeadDeadlineH11Protocol",
        # SIGTERM: stop within seconds even with requests in flight (scoring threads are
        # daemons, so nothing else holds the process).
        "timeout_graceful_shutdown": 3,
    }
    if workers > 1:
        if sandbox is not None:
            raise NelError("--sandbox serves with one worker (--workers 1): the sandboxes and "
                           "their `concurrency` bound live in the serving process")
        if isinstance(env, EvalEnvironment):
            raise NelError(
                "serve(workers>1) needs a registered benchmark name: each worker rebuilds it"
            )
        # Check the name here so a typo fails once with a suggestion, not in N workers.
        import_plugins(imports)
        if not env.startswith("gym://"):
            try:
                get_factory(env)
            except UnknownBenchmarkError as exc:
                raise NelError(str(exc)) from None
        os.environ[ENV_BENCHMARK] = env
        os.environ[ENV_PARAMS] = json.dumps(dict(params or {}))
        os.environ[ENV_GYM_COMPAT] = "1" if gym_compat else "0"
        os.environ[ENV_MAX_BODY] = str(max_body_bytes)
        os.environ[ENV_MAX_PROBLEMS] = "" if max_problems is None else str(max_problems)
        os.environ[ENV_IMPORTS] = os.pathsep.join(imports)
        if endpoint_file is None and port != 0:
            uvicorn.run("benchmarks.serve:_worker_app", factory=True, workers=workers, **settings)
            return
        _run_workers_announced(workers, settings, endpoint_file, env)
        return
    name = benchmark_name
    if isinstance(env, str):
        name = name or env
        env = build_environment(env, params, max_problems=max_problems, imports=imports)
    elif max_problems is not None:
        env = LimitedEnvironment(env, max_problems)
    app = generate_app(
        env,
        gym_compat=gym_compat,
        max_body_bytes=max_body_bytes,
        benchmark_name=name,
        body_timeout=read_timeout,
        verify_timeout=verify_timeout,
        sandbox=sandbox,
    )
    if endpoint_file is None and port != 0:
        uvicorn.run(app, **settings)
        return
    _run_announced(app, settings, endpoint_file, name or str(getattr(env, "name", "")))


def _announcer(settings: Mapping[str, Any], port_of: Callable[[], int | None],
               endpoint_file: str | Path | None, name: str) -> Any:
    from benchmarks.serve_endpoint import EndpointAnnouncer

    return EndpointAnnouncer(settings["host"], port_of,
                             Path(endpoint_file) if endpoint_file is not None else None,
                             benchmark=name)


def _run_announced(app: Any, settings: dict[str, Any], endpoint_file: str | Path | None,
                   name: str) -> None:
    """`uvicorn.run(app)` for one worker, plus the endpoint announcement: the port is read
    from the bound socket (with `port=0` nothing else knows it)."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, **settings))

    def port_of() -> int | None:
        if not server.started:
            return None
        for listener in getattr(server, "servers", []):
            for sock in listener.sockets:
                return int(sock.getsockname()[1])
        return None

    announcer = _announcer(settings, port_of, endpoint_file, name)
    announcer.start()
    try:
        server.run()
    except KeyboardInterrupt:
        pass  # as uvicorn.run: Ctrl-C is a normal way to stop
    finally:
        announcer.withdraw()
    if not server.started:
        raise SystemExit(3)  # uvicorn's STARTUP_FAILURE (e.g. the port is taken)


def _run_workers_announced(workers: int, settings: dict[str, Any],
                           endpoint_file: str | Path | None, name: str) -> None:
    """`uvicorn.run(..., workers=N)` with the announcement: the socket is bound here, before
    the workers fork (as uvicorn does), so its port is known even with `port=0`."""
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    config = uvicorn.Config("benchmarks.serve:_worker_app", factory=True, workers=workers, **settings)
    sock = config.bind_socket()
    port = int(sock.getsockname()[1])
    announcer = _announcer(settings, lambda: port, endpoint_file, name)
    announcer.start()
    try:
        Multiprocess(config, sockets=[sock]).run()
    except KeyboardInterrupt:
        pass
    finally:
        announcer.withdraw()


# --------------------------------------------------------------------------- export


def _row_uuid(benchmark: str, idx: int) -> str:
    # NeMo Evaluator's form (`<benchmark>-<idx>`): deterministic, so a re-export yields the
    # same ids, and rollouts join back to their item by it in either tool's pipelines.
    return f"{benchmark}-{idx}"


def _input_messages(seed: SeedResult) -> list[dict[str, Any]]:
    if seed.messages:
        messages = [dict(m) for m in seed.messages]
    else:
        messages = [{"role": "user", "content": seed.prompt}]
    if seed.system and not (messages and messages[0].get("role") in ("system", "developer")):
        messages.insert(0, {"role": "system", "content": seed.system})
    return messages


async def export_rows(env: EvalEnvironment, benchmark: str | None = None) -> list[dict[str, Any]]:
    """The dataset as NeMo Gym rows (what `ng_collect_rollouts` reads).

    Each row is `{responses_create_params: {input: [...]}, expected_answer, uuid, eval_type,
    metadata}`; `metadata` carries the seed metadata plus `idx`, so `/verify` gets it back.
    """
    name = benchmark or env.name
    rows = []
    for idx in range(len(env)):
        seed = await env.seed(idx)
        metadata = dict(seed.metadata)
        metadata.setdefault("idx", idx)
        rows.append(
            {
                "responses_create_params": {"input": _input_messages(seed)},
                "expected_answer": seed.expected_answer,
                "uuid": _row_uuid(name, idx),
                "eval_type": name,
                "metadata": metadata,
            }
        )
    return rows


def export_data(
    env: EvalEnvironment, path: str | Path, benchmark: str | None = None, *, close: bool = False
) -> int:
    """Write the JSONL export to `path` (atomically); returns the number of rows.

    Args:
        env: The environment to export.
        path: Target JSONL file.
        benchmark: Name for `eval_type` and the uuids (defaults to `env.name`).
        close: Close the environment afterwards, inside the same event loop (a remote
            environment's HTTP session belongs to that loop).
    """

    async def run() -> list[dict[str, Any]]:
        try:
            return await export_rows(env, benchmark)
        finally:
            if close:
                await env.close()

    rows = asyncio.run(run())
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_dir():
        raise NelError(f"--export-data: {target} is a directory; name a .jsonl file or a directory")
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        with tmp.open("wb") as fh:
            for row in rows:
                fh.write(dumps(row))
                fh.write(b"\n")
        tmp.replace(target)
    finally:
        # a failed write (disk full, permissions) must not leave the temp file behind
        tmp.unlink(missing_ok=True)
    return len(rows)
