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

import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks._registry import UnknownBenchmarkError, get_factory
from benchmarks._types import EvalEnvironment
from benchmarks.errors import NelError
from benchmarks.serve_app import (
    AGGREGATE_MAX_BODY_BYTES,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_VERIFY_TIMEOUT,
    PROTOCOL_EVALUATOR,
    PROTOCOL_GYM,
    generate_app,
)
from benchmarks.serve_environment import (
    LimitedEnvironment,
    SandboxProvider,
    build_environment,
    import_plugins,
    needs_sandbox,
)
from benchmarks.serve_export import export_data, export_rows
from benchmarks.serve_extract import extract_response_text
from benchmarks.serve_json import DEFAULT_BODY_TIMEOUT, ApiError, dumps
from benchmarks.serve_pool import DEFAULT_SCORER_MEMORY_MB, default_pool_size
from benchmarks.uri_schemes import is_uri

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = [
    "AGGREGATE_MAX_BODY_BYTES",
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_SCORER_MEMORY_MB",
    "DEFAULT_VERIFY_TIMEOUT",
    "PROTOCOL_EVALUATOR",
    "PROTOCOL_GYM",
    "ApiError",
    "LimitedEnvironment",
    "SandboxProvider",
    "build_environment",
    "dumps",
    "export_data",
    "export_rows",
    "extract_response_text",
    "generate_app",
    "import_plugins",
    "needs_sandbox",
    "serve",
    "server_settings",
]

log = logging.getLogger("nel.serve")

ENV_VERIFY_TIMEOUT = "NEL_SERVE_VERIFY_TIMEOUT"
ENV_READ_TIMEOUT = "NEL_SERVE_HEAD_TIMEOUT"  # also read by serve_limits' protocol

# Environment variables through which `serve(workers=N)` tells each uvicorn worker process
# what to build: workers are fresh interpreters and rebuild the environment by name.
ENV_BENCHMARK = "NEL_SERVE_BENCHMARK"
ENV_PARAMS = "NEL_SERVE_PARAMS"
ENV_GYM_COMPAT = "NEL_SERVE_GYM_COMPAT"
ENV_MAX_BODY = "NEL_SERVE_MAX_BODY_BYTES"
ENV_MAX_PROBLEMS = "NEL_SERVE_MAX_PROBLEMS"
ENV_IMPORTS = "NEL_SERVE_IMPORTS"
ENV_SCORING_WORKERS = "NEL_SERVE_SCORING_WORKERS"
ENV_SCORER_MEMORY = "NEL_SERVE_SCORER_MEMORY_MB"


# --------------------------------------------------------------------------- serving

def server_settings(host: str = "127.0.0.1", port: int = 9090,
                    log_level: str = "warning") -> dict[str, Any]:
    """The uvicorn settings `nel serve` runs with (`bench/bench_serve.py` uses them too, so
    its ceiling runs on the same parser and limits)."""
    return {
        "host": host,
        "port": port,
        "log_level": log_level,
        "access_log": False,
        # Gym agents keep connections open between rollouts.
        "timeout_keep_alive": 30,
        # httptools (C) parser plus a deadline on request heads (uvicorn has none), and nel's
        # per-rollout routes answered by the protocol itself (benchmarks.serve_http); body
        # limits, timeouts and 415s are decided by benchmarks.serve_json on either path.
        "http": "benchmarks.serve_http:ServeHttpProtocol",
        # SIGTERM: exit within 3 s even with requests in flight (they are answered 503;
        # scoring workers are killed with the app, and die with the process anyway).
        "timeout_graceful_shutdown": 2,
    }


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
    app = generate_app(
        env,
        gym_compat=os.environ.get(ENV_GYM_COMPAT) == "1",
        max_body_bytes=int(os.environ.get(ENV_MAX_BODY) or DEFAULT_MAX_BODY_BYTES),
        benchmark_name=name,
        body_timeout=float(os.environ.get(ENV_READ_TIMEOUT) or DEFAULT_BODY_TIMEOUT),
        verify_timeout=float(os.environ.get(ENV_VERIFY_TIMEOUT) or DEFAULT_VERIFY_TIMEOUT),
        scoring_workers=int(os.environ.get(ENV_SCORING_WORKERS) or 0) or None,
        scorer_memory_mb=_memory_from_env(),
    )
    _freeze_heap()
    return app


def _freeze_heap() -> None:
    """Exempt what is loaded by now (modules, the app, the dataset) from the cyclic garbage
    collector: it is kept for the server's life, and the collector's older generations
    walked all of it again and again while serving (a few % of a request's CPU)."""
    import gc

    gc.collect()
    gc.freeze()


def _memory_from_env() -> int | None:
    value = os.environ.get(ENV_SCORER_MEMORY)
    if not value:
        return DEFAULT_SCORER_MEMORY_MB
    return int(value) or None  # 0: no cap


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
    scoring_workers: int | None = None,
    scorer_memory_mb: int | None = DEFAULT_SCORER_MEMORY_MB,
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
        scoring_workers: Scoring worker processes per server process (default
            `default_pool_size(workers)`: the CPUs shared among the uvicorn workers, >= 2).
        scorer_memory_mb: Address space each scoring worker may grow by (MiB; None: no cap).

    Raises:
        NelError: for an unknown benchmark, `workers > 1` with an unregistered instance or
            with a sandbox, or a benchmark that needs a sandbox served without one.
    """
    import uvicorn

    # Environment variables reach every worker process (and the protocol class, which
    # uvicorn builds itself).
    os.environ[ENV_READ_TIMEOUT] = str(read_timeout)
    os.environ[ENV_VERIFY_TIMEOUT] = str(verify_timeout)
    settings = server_settings(host, port, log_level)
    scoring_workers = scoring_workers or default_pool_size(workers)
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
        if not is_uri(env, "gym"):
            try:
                get_factory(env)
            except UnknownBenchmarkError as exc:
                raise NelError(str(exc)) from None
        _tell_workers(env, params, gym_compat=gym_compat, max_body_bytes=max_body_bytes,
                      max_problems=max_problems, imports=imports,
                      scoring_workers=scoring_workers, scorer_memory_mb=scorer_memory_mb)
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
    app = generate_app(env, gym_compat=gym_compat, max_body_bytes=max_body_bytes,
                       benchmark_name=name, body_timeout=read_timeout,
                       verify_timeout=verify_timeout, sandbox=sandbox,
                       scoring_workers=scoring_workers, scorer_memory_mb=scorer_memory_mb)
    _freeze_heap()
    if endpoint_file is None and port != 0:
        uvicorn.run(app, **settings)
        return
    _run_announced(app, settings, endpoint_file, name or str(getattr(env, "name", "")))


def _tell_workers(env: str, params: Mapping[str, Any] | None, *, gym_compat: bool,
                  max_body_bytes: int, max_problems: int | None, imports: Sequence[str],
                  scoring_workers: int, scorer_memory_mb: int | None) -> None:
    """Put what each uvicorn worker rebuilds its app from into the environment (workers
    are fresh interpreters: `_worker_app` reads these back)."""
    os.environ[ENV_BENCHMARK] = env
    os.environ[ENV_PARAMS] = json.dumps(dict(params or {}))
    os.environ[ENV_GYM_COMPAT] = "1" if gym_compat else "0"
    os.environ[ENV_MAX_BODY] = str(max_body_bytes)
    os.environ[ENV_MAX_PROBLEMS] = "" if max_problems is None else str(max_problems)
    os.environ[ENV_IMPORTS] = os.pathsep.join(imports)
    os.environ[ENV_SCORING_WORKERS] = str(scoring_workers)
    os.environ[ENV_SCORER_MEMORY] = str(scorer_memory_mb or 0)


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


