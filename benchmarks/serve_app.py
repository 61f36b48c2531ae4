"""The `nel serve` HTTP app: routes, request validation, and where scoring runs.

See `benchmarks.serve` for the protocol. Scoring runs where an overrun can be stopped:
- a local scorer (built-in, BYOB, sympy...) in a killable worker process
  (`benchmarks.serve_pool`): past `verify_timeout` the worker is SIGKILLed and replaced;
- a sandboxed scorer on the server's loop: its cost is the model's code, which runs in the
  sandbox and is stopped (with the sandbox) when the limit passes;
- a remote (gym://) verifier on the server's loop: it is network I/O on this loop's session.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from benchmarks._types import EvalEnvironment
from benchmarks.errors import NelError
from benchmarks.serve_environment import LimitedEnvironment, SandboxProvider, needs_sandbox
from benchmarks.serve_json import DEFAULT_BODY_TIMEOUT, dumps
from benchmarks.serve_pool import DEFAULT_SCORER_MEMORY_MB, ScoringPool, default_pool_size

if TYPE_CHECKING:
    from fastapi import FastAPI

    from benchmarks.serve_routes import HotRoutes, ServeRoutes

__all__ = ["generate_app"]

DEFAULT_MAX_BODY_BYTES = 1_000_000
AGGREGATE_MAX_BODY_BYTES = 64_000_000
# Scoring one response may take this long before the request is answered 422.
DEFAULT_VERIFY_TIMEOUT = 30.0
# The `protocol` strings NeMo Evaluator 0.3.0's `/health` reports, byte for byte.
PROTOCOL_EVALUATOR = "evaluator"
PROTOCOL_GYM = "gym"


def _scoring_pool(env: EvalEnvironment, sandbox: Any, size: int | None,
                  memory_mb: int | None) -> ScoringPool | None:
    """The worker pool local scorers run in; None where scoring stays on the loop."""
    from benchmarks.remote import GymEnvironment

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
    from benchmarks.serve_export import export_data

    name = benchmark_name or env.name
    if sandbox is None and needs_sandbox(env):
        # Refused here, once, rather than a 422 on every /verify.
        raise NelError(f"benchmark {name!r} runs model-written code and needs a sandbox: "
                       "serve it with `--sandbox local` (or `--sandbox docker --sandbox-image IMAGE`)")
    if data_export_dir is not None:
        export_data(env, Path(data_export_dir).expanduser() / f"{name}.jsonl", benchmark=name)
    app = _serve_app_class()(
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
    routes = _routes(env, name, gym_compat, max_body_bytes=max_body_bytes,
                     body_timeout=body_timeout, verify_timeout=verify_timeout, sandbox=sandbox,
                     pool=pool)
    _add_routes(app, routes)
    app.hot_routes = {"/verify": routes.post_verify, "/seed_session": routes.post_seed_session}
    # Answered by the server's protocol itself (benchmarks.serve_http) under `nel serve`.
    app.hot_answers = routes.hot()
    return app


def _routes(env: EvalEnvironment, name: str, gym_compat: bool, *, max_body_bytes: int,
            body_timeout: float, verify_timeout: float, sandbox: SandboxProvider | None,
            pool: ScoringPool | None) -> ServeRoutes:
    """The handlers of `env`, with the bodies of `/health` and `/dataset_size` built once."""
    from benchmarks.serve_routes import ServeRoutes

    size = len(env)
    health = dumps({
        "status": "ok",
        "benchmark": name,
        "dataset_size": size,
        "protocol": PROTOCOL_GYM if gym_compat else PROTOCOL_EVALUATOR,
        "version": env.version,
        "gym_compat": gym_compat,
    })
    return ServeRoutes(
        env=env, size=size, gym_compat=gym_compat, health_body=health,
        size_body=dumps({"size": size}), max_body_bytes=max_body_bytes,
        # /aggregate_metrics receives every rollout of a run at once (stripped of the model
        # responses), so it gets a larger allowance than one rollout's body.
        aggregate_body_bytes=max(max_body_bytes, AGGREGATE_MAX_BODY_BYTES),
        body_timeout=body_timeout, verify_timeout=verify_timeout, sandbox=sandbox, pool=pool,
    )


def _add_routes(app: FastAPI, routes: ServeRoutes) -> None:
    """Mount the handlers and the error replies (a structured 4xx, or a logged 500)."""
    from benchmarks.serve_json import ApiError
    from benchmarks.serve_routes import on_api_error, on_unexpected

    app.add_route("/health", routes.get_health, methods=["GET"])
    app.add_route("/aggregate_metrics", routes.post_aggregate_metrics, methods=["POST"])
    app.add_route("/dataset_size", routes.get_dataset_size, methods=["GET"])
    app.add_route("/seed_session", routes.post_seed_session, methods=["POST"])
    app.add_route("/verify", routes.post_verify, methods=["POST"])
    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(Exception, on_unexpected)


@functools.cache
def _serve_app_class() -> type[FastAPI]:
    """FastAPI with the two routes an RL loop calls per rollout dispatched directly.

    `POST /verify` and `POST /seed_session` skip FastAPI's middleware stack and router (most
    of a request's server time once scoring left the event loop): the handler is called and
    its errors are answered as the stack would (`ApiError` as its 4xx, anything else as a
    logged 500). Every other request, the lifespan, and every request once a caller has
    added middleware of its own (it must see them all), take the usual way.
    """
    from fastapi import FastAPI
    from starlette.requests import Request
    from starlette.responses import Response

    from benchmarks.serve_json import ApiError
    from benchmarks.serve_routes import on_api_error, on_unexpected

    class ServeApp(FastAPI):
        # Set per app by generate_app; none until then.
        hot_routes: Mapping[str, Callable[[Request], Awaitable[Response]]] = MappingProxyType({})
        hot_answers: HotRoutes | None = None

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http" and scope["method"] == "POST" and not self.user_middleware:
                handler = self.hot_routes.get(scope["path"])
                if handler is not None:
                    scope["app"] = self
                    request = Request(scope, receive, send)
                    try:
                        response = await handler(request)
                    except ApiError as exc:
                        response = await on_api_error(request, exc)
                    except Exception as exc:
                        response = await on_unexpected(request, exc)
                    await response(scope, receive, send)
                    return
            await super().__call__(scope, receive, send)

    return ServeApp
