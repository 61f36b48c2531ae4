"""`gym://` client (GymEnvironment) against served apps: round trip, retries, errors."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from benchmarks import EvalEnvironment, get_benchmark, list_benchmarks
from benchmarks.remote import GymEnvironment, RemoteEnvironmentError, parse_gym_url
from benchmarks.serve import generate_app
from tests.benchmarks.test_serve import (
    TOY_NAME,
    TOY_SIZE,
    ToyArithmetic,
    start_server,
    stop_server,
    wait_healthy,
)
from tests.support.waiting import PROCESS_START_S, wait_for


@contextmanager
def thread_server(app: Any) -> Iterator[int]:
    """Run an ASGI app with uvicorn in a background thread on a free 127.0.0.1 port."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="error", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_for(lambda: server.started, timeout=PROCESS_START_S, what="the in-thread uvicorn server to start",
             interval=0.01)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture(scope="module")
def toy_port() -> Iterator[int]:
    with thread_server(generate_app(ToyArithmetic())) as port:
        yield port


RESPONSES = ["{a}", "The answer is {a}.", "{w}", "", "no digits here", "#### {a}", "{a} or {w}"]


async def _verdicts(env: EvalEnvironment, n: int) -> list[tuple[Any, ...]]:
    """Seed every item, verify a spread of right and wrong responses, collect verdicts."""
    out = []
    for idx in range(n):
        seed = await env.seed(idx)
        for template in RESPONSES:
            response = template.format(a=seed.expected_answer, w="-1")
            verdict = await env.verify(response, seed.expected_answer, **seed.metadata)
            out.append((idx, template, seed.to_dict(), verdict.to_dict()))
    return out


def test_parse_gym_url() -> None:
    assert parse_gym_url("gym://127.0.0.1:8000") == ("http://127.0.0.1:8000", "127.0.0.1", 8000)
    assert parse_gym_url("gym://localhost")[2] == 9090
    assert parse_gym_url("gyms://h:1/api/")[0] == "https://h:1/api"
    assert GymEnvironment("gym://127.0.0.1:8000").name == "gym_127_0_0_1_8000"
    for bad in ("127.0.0.1:80", "ftp://h:1", "gym://:80", "gym://h:99999"):
        with pytest.raises(RemoteEnvironmentError.__mro__[1]):  # NelError
            parse_gym_url(bad)


def test_registry_builds_gym_environment(toy_port: int) -> None:
    env = get_benchmark(f"gym://127.0.0.1:{toy_port}", retries=1)
    assert isinstance(env, GymEnvironment)
    # len() works before prepare(), through one blocking request.
    assert len(env) == TOY_SIZE
    assert env.remote_benchmark == TOY_NAME
    assert TOY_NAME in env.fingerprint() and str(TOY_SIZE) in env.fingerprint()


def test_round_trip_equals_direct(toy_port: int) -> None:
    async def run() -> tuple[list[Any], list[Any]]:
        remote = GymEnvironment(f"gym://127.0.0.1:{toy_port}")
        try:
            await remote.prepare()
            assert len(remote) == TOY_SIZE
            session = remote._session
            got = await _verdicts(remote, TOY_SIZE)
            assert remote._session is session  # one keep-alive session for the whole run
        finally:
            await remote.close()
        return got, await _verdicts(ToyArithmetic(), TOY_SIZE)

    remote_verdicts, direct_verdicts = asyncio.run(run())
    assert remote_verdicts == direct_verdicts


def test_verify_sends_expected_and_metadata(toy_port: int) -> None:
    async def run() -> None:
        env = GymEnvironment(f"gym://127.0.0.1:{toy_port}")
        try:
            v = await env.verify("", "4", reasoning="2+2=4", parity=0)
            # Right only if the server saw expected, the reasoning and the metadata.
            assert v.reward == 1.0 and v.scoring_details["source"] == "reasoning"
            assert v.metadata == {"parity_seen": 0}
            # Metadata orjson cannot encode (a >64-bit int, a set) still goes through.
            v = await env.verify("8", "8", big=10**30, tags={"a"})
            assert v.reward == 1.0
        finally:
            await env.close()

    asyncio.run(run())


def test_concurrent_requests_share_session(toy_port: int) -> None:
    async def run() -> list[float]:
        env = GymEnvironment(f"gym://127.0.0.1:{toy_port}", max_connections=8)
        try:
            seeds = await asyncio.gather(*(env.seed(i % TOY_SIZE) for i in range(64)))
            results = await asyncio.gather(
                *(env.verify(s.expected_answer, s.expected_answer) for s in seeds)
            )
            return [r.reward for r in results]
        finally:
            await env.close()

    assert asyncio.run(run()) == [1.0] * 64


# ----------------------------------------------------------------------------- failures


def _flaky_app(fail_times: int, status: int = 503, retry_after: str | None = None) -> Any:
    """An app whose /seed_session fails `fail_times` times, then works; counts calls."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    calls = {"seed": 0, "verify": 0}

    async def seed(request: Any) -> JSONResponse:
        calls["seed"] += 1
        if calls["seed"] <= fail_times:
            headers = {"Retry-After": retry_after} if retry_after else None
            return JSONResponse({"detail": "busy"}, status_code=status, headers=headers)
        return JSONResponse({"prompt": "p", "expected_answer": "1"})

    async def verify(request: Any) -> JSONResponse:
        calls["verify"] += 1
        return JSONResponse({"error": "invalid_request", "detail": "expected: required"}, 422)

    async def size(request: Any) -> JSONResponse:
        return JSONResponse({"size": 3})

    app = Starlette(
        routes=[
            Route("/seed_session", seed, methods=["POST"]),
            Route("/verify", verify, methods=["POST"]),
            Route("/dataset_size", size),
        ]
    )
    app.state.calls = calls
    return app


def test_retries_5xx_then_succeeds() -> None:
    app = _flaky_app(fail_times=2)
    with thread_server(app) as port:
        env = GymEnvironment(f"gym://127.0.0.1:{port}", retries=3, backoff_base=0.01)

        async def run() -> Any:
            try:
                await env.prepare()  # no /health on this server: tolerated
                return await env.seed(0)
            finally:
                await env.close()

        seed = asyncio.run(run())
    assert seed.prompt == "p" and app.state.calls["seed"] == 3
    assert env.remote_benchmark is None and len(env) == 3


def test_retries_exhausted_and_retry_after() -> None:
    app = _flaky_app(fail_times=10, status=429, retry_after="0.05")
    with thread_server(app) as port:
        env = GymEnvironment(f"gym://127.0.0.1:{port}", retries=2, backoff_base=0.01)

        async def run() -> float:
            t0 = time.monotonic()
            try:
                with pytest.raises(RemoteEnvironmentError, match="429") as info:
                    await env.seed(0)
                assert info.value.status == 429 and info.value.retryable
                return time.monotonic() - t0
            finally:
                await env.close()

        elapsed = asyncio.run(run())
    assert app.state.calls["seed"] == 3
    assert elapsed >= 0.1  # two Retry-After waits of 0.05 s


def test_4xx_is_not_retried_and_names_the_problem() -> None:
    app = _flaky_app(fail_times=0)
    with thread_server(app) as port:
        env = GymEnvironment(f"gym://127.0.0.1:{port}", retries=3, backoff_base=0.01)

        async def run() -> None:
            try:
                with pytest.raises(RemoteEnvironmentError, match="422: expected: required") as info:
                    await env.verify("1", "1")
                assert info.value.status == 422 and not info.value.retryable
            finally:
                await env.close()

        asyncio.run(run())
    assert app.state.calls["verify"] == 1


def test_connection_refused_retries_then_clear_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once we leave: nothing listens there
    env = GymEnvironment(f"gym://127.0.0.1:{port}", retries=2, backoff_base=0.01, timeout=2)

    async def run() -> None:
        try:
            with pytest.raises(RemoteEnvironmentError, match="after 3 attempts") as info:
                await env.seed(0)
            assert info.value.retryable and info.value.status is None
        finally:
            await env.close()

    asyncio.run(run())
    with pytest.raises(RemoteEnvironmentError, match="after 3 attempts"):
        len(env)


def test_timeout_is_retried() -> None:
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    calls = {"n": 0}

    async def slow_then_fast(request: Any) -> JSONResponse:
        calls["n"] += 1
        if calls["n"] == 1:
            await asyncio.sleep(4.0)
        return JSONResponse({"size": 5})

    app = Starlette(routes=[Route("/dataset_size", slow_then_fast)])
    with thread_server(app) as port:
        # 2 s, not less: the retry must be answered within it even on a loaded CI machine.
        env = GymEnvironment(f"gym://127.0.0.1:{port}", retries=1, timeout=2.0, backoff_base=0.01)

        async def run() -> None:
            try:
                await env.prepare()
            finally:
                await env.close()

        asyncio.run(run())
    assert len(env) == 5 and calls["n"] == 2


# ----------------------------------------------------------------------------- real process


def test_served_process_round_trip() -> None:
    """`nel serve` in its own process, the client in this one: verdicts match directly."""
    proc, port = start_server(["-b", TOY_NAME, "--import", "tests.benchmarks.test_serve"])
    try:
        wait_healthy(port, proc)

        async def run() -> list[Any]:
            env = GymEnvironment(f"gym://127.0.0.1:{port}")
            try:
                await env.prepare()
                return await _verdicts(env, len(env))
            finally:
                await env.close()

        remote = asyncio.run(run())
    finally:
        stop_server(proc)
    assert remote == asyncio.run(_verdicts(ToyArithmetic(), TOY_SIZE))


def _gsm8k_available() -> bool:
    os.environ.setdefault(
        "NEL_DATA_DIR", str(Path(__file__).resolve().parents[3] / "shared" / "datasets")
    )
    try:
        return "gsm8k" in list_benchmarks()
    except Exception:
        return False


@pytest.mark.skipif(not _gsm8k_available(), reason="built-in gsm8k benchmark not registered yet")
def test_gsm8k_round_trip_matches_direct() -> None:
    n = 25
    proc, port = start_server(["-b", "gsm8k", "--max-problems", str(n)])
    try:
        wait_healthy(port, proc, timeout=60)

        async def collect(env: EvalEnvironment) -> list[Any]:
            out = []
            for idx in range(n):
                seed = await env.seed(idx)
                gold = seed.expected_answer
                for response in (f"#### {gold}", f"So the answer is {gold}.", "#### 0", "", "7"):
                    v = await env.verify(response, gold, **seed.metadata)
                    out.append((idx, response, seed.prompt, v.reward, v.extracted_answer))
            return out

        async def run() -> list[Any]:
            env = GymEnvironment(f"gym://127.0.0.1:{port}")
            try:
                await env.prepare()
                assert len(env) == n and env.remote_benchmark == "gsm8k"
                return await collect(env)
            finally:
                await env.close()

        remote = asyncio.run(run())
    finally:
        stop_server(proc)
    direct = asyncio.run(collect(get_benchmark("gsm8k")))
    assert remote == direct
    assert sum(r[3] for r in remote) >= n  # the gold answers score


# ----------------------------------------------------------------------------- query mode


def _write_rows(path: Path, n: int) -> Path:
    """The toy benchmark's problems as NeMo Gym rows (what `nel serve --export-data` writes)."""
    from benchmarks.serve import export_data

    export_data(ToyArithmetic(n), path)
    return path


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("?protocl=native", "unknown query parameter 'protocl'"),
        ("?protocol=grpc", "expected evaluator or native"),
        ("?data=", "names no file"),
        ("?protocol=native&protocol=native&data=x", "given twice"),
    ],
)
def test_gym_query_refused_in_one_line(query: str, message: str) -> None:
    from benchmarks.errors import NelError

    with pytest.raises(NelError, match=message) as info:
        GymEnvironment(f"gym://127.0.0.1:1{query}")
    assert "\n" not in str(info.value)


def test_gym_data_file_problems_named_by_line(tmp_path: Path) -> None:
    from benchmarks.errors import NelError

    bad = tmp_path / "bad.jsonl"
    cases = {
        '{"responses_create_params": {"input": "hi"}}\n[1]\n': "bad.jsonl:2: expected a JSON object",
        '{"x": 1}\n': "bad.jsonl:1: needs responses_create_params.input",
        '{"responses_create_params": {"input": "hi", "tools": [{"type": "function"}]}}\n':
            "bad.jsonl:1: the row declares tools",
        "\n": "no rows",
        "{nope\n": "bad.jsonl:1: not JSON",
    }
    for text, message in cases.items():
        bad.write_text(text)
        with pytest.raises(NelError, match=message):
            GymEnvironment(f"gym://127.0.0.1:1?protocol=native&data={bad}")
    with pytest.raises(NelError, match="cannot read it"):
        GymEnvironment(f"gym://127.0.0.1:1?data={tmp_path / 'missing.jsonl'}")


def test_gym_data_rows_seed_like_the_benchmark(tmp_path: Path) -> None:
    rows = _write_rows(tmp_path / "rows.jsonl", 4)
    env = get_benchmark(f"gym://127.0.0.1:1?protocol=native&data={rows}")
    assert isinstance(env, GymEnvironment) and len(env) == 4  # no request: the file says
    for idx in range(4):
        got, want = asyncio.run(env.seed(idx)), asyncio.run(ToyArithmetic(4).seed(idx))
        assert (got.prompt, got.expected_answer) == (want.prompt, want.expected_answer)
        assert got.messages is not None and got.messages[-1] == {"role": "user", "content": want.prompt}
        # the system prompt travels as the first message
        assert (got.messages[0]["role"] == "system") == (want.system is not None)
        assert got.metadata["gym_row"] == idx and got.metadata["uuid"] == f"{TOY_NAME}-{idx}"
    # the same settings as keyword parameters (a config's `params`) build the same thing
    same = GymEnvironment("gym://127.0.0.1:1", protocol="native", data=str(rows))
    assert same.fingerprint() == env.fingerprint()


@pytest.mark.parametrize("protocol", ["native", "evaluator"])
def test_gym_data_rows_verify_equals_direct(tmp_path: Path, toy_port: int, protocol: str) -> None:
    """Rows from a file, scoring by the server: `nel serve` takes both /verify forms."""
    rows = _write_rows(tmp_path / "rows.jsonl", TOY_SIZE)

    async def run() -> list[Any]:
        env = GymEnvironment(f"gym://127.0.0.1:{toy_port}?protocol={protocol}&data={rows}")
        try:
            await env.prepare()
            out = []
            for idx in range(len(env)):
                seed = await env.seed(idx)
                for template in RESPONSES:
                    response = template.format(a=seed.expected_answer, w="-1")
                    v = await env.verify(response, seed.expected_answer, **seed.metadata)
                    out.append((idx, template, v.reward, v.extracted_answer))
            return out
        finally:
            await env.close()

    direct = [(i, t, v["reward"], v["extracted_answer"])
              for i, t, _, v in asyncio.run(_verdicts(ToyArithmetic(), TOY_SIZE))]
    assert asyncio.run(run()) == direct


def test_native_verify_sends_the_expected_answer(tmp_path: Path, toy_port: int) -> None:
    """The row's answer is what the caller says it is (NeMo Evaluator's client drops it)."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"responses_create_params": {"input": "What is 2 + 2?"}, "expected_answer": "5"}\n')

    async def run() -> tuple[float, float]:
        env = GymEnvironment(f"gym://127.0.0.1:{toy_port}?protocol=native&data={rows}")
        try:
            seed = await env.seed(0)
            assert seed.expected_answer == "5"
            wrong_row = await env.verify("4", "4", **seed.metadata)
            from_row = await env.verify("5", seed.expected_answer, **seed.metadata)
            return wrong_row.reward, from_row.reward
        finally:
            await env.close()

    assert asyncio.run(run()) == (1.0, 1.0)


def test_eval_run_refuses_a_bad_gym_query_before_writing(tmp_path: Path) -> None:
    from tests.support.cli import run_nel

    out = tmp_path / "out"
    proc = run_nel("eval", "run", "-b", "gym://127.0.0.1:1?protocl=native", "-m", "2",
                   "--model-url", "http://127.0.0.1:1/v1", "-o", str(out), "--no-progress")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        "error: unknown query parameter 'protocl' in 'gym://127.0.0.1:1?protocl=native': "
        "gym:// takes protocol=evaluator|native and data=ROWS.jsonl"
    )
    assert not out.exists()


def test_row_instructions_are_the_system_prompt_and_row_settings_are_named(tmp_path: Path) -> None:
    """A Responses-API row's `instructions` reach the model as its system message; settings
    nel does not apply per row (temperature, max_output_tokens) are warned about by name."""
    import json

    from benchmarks.remote import check_gym_benchmark

    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in [
        {"responses_create_params": {"input": "2+2?", "instructions": "Answer tersely.",
                                     "temperature": 0.7}, "expected_answer": "4"},
        {"responses_create_params": {"input": "3+3?", "max_output_tokens": 64}, "expected_answer": "6"},
    ]))
    name = f"gym://127.0.0.1:1?protocol=native&data={rows}"
    first = asyncio.run(GymEnvironment(name).seed(0))
    assert first.messages == [{"role": "system", "content": "Answer tersely."},
                              {"role": "user", "content": "2+2?"}]
    assert check_gym_benchmark(name) == ["max_output_tokens", "temperature"]

    from tests.support.cli import run_nel

    out = tmp_path / "out"
    proc = run_nel("eval", "run", "-b", name, "-m", "2", "--model-url", "http://127.0.0.1:1/v1",
                   "-o", str(out), "--no-progress", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert (f"warning: {name}: the rows set max_output_tokens, temperature in "
            "responses_create_params; nel sends the service's generation settings to every row "
            "instead") in proc.stderr
