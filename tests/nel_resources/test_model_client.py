"""The model client against the reference server: protocols, retries, backoff, errors."""

from __future__ import annotations

import asyncio
import time

import pytest

from nel_resources.model_client import (
    AuthError,
    EndpointUnreachableError,
    ModelClient,
    ModelError,
    ModelResponse,
)
from nel_resources.runtime.processes import free_port
from nel_resources.wire.openai_fields import normalize_base_url

MSG = [{"role": "user", "content": "What is 6 times 7?"}]

# Every behaviour is checked on both transports: the lean keep-alive client (plain HTTP)
# and aiohttp (HTTPS and the fallback).
TRANSPORT = "raw"


@pytest.fixture(autouse=True, params=["raw", "aiohttp"])
def transport(request: pytest.FixtureRequest) -> str:
    global TRANSPORT
    TRANSPORT = request.param
    return request.param


def run(coro):
    return asyncio.run(coro)


async def _one(url: str, **kw) -> tuple[object, ModelClient]:
    kw.setdefault("transport", TRANSPORT)
    async with ModelClient(url, model="m", **kw) as c:
        try:
            return await c.generate(MSG, "What is 6 times 7?"), c
        except ModelError as exc:
            return exc, c


def test_normalize_base_url() -> None:
    assert normalize_base_url("http://h:1") == "http://h:1/v1"
    assert normalize_base_url("http://h:1/v1/") == "http://h:1/v1"
    assert normalize_base_url("http://h:1/v1/chat/completions") == "http://h:1/v1"


def test_chat_and_completions_fields(reference_server) -> None:
    url = reference_server(default_content="The answer is 42.", default_reasoning="6*7=42",
                           reasoning_mode="field")
    r, c = run(_one(url, generation={"temperature": 0, "max_tokens": 50, "seed": 3}))
    assert r.content == "The answer is 42." and r.reasoning_content == "6*7=42"
    assert r.finish_reason == "stop" and r.completion_tokens > 0 and r.prompt_tokens > 0
    assert r.latency_ms > 0 and r.attempts == 1 and c.requests_sent == 1
    r2, _ = run(_one(url, protocol="completions"))
    assert "42" in r2.content and r2.finish_reason == "stop"
    r3, _ = run(_one(url, generation={"max_tokens": 2}))
    assert r3.finish_reason == "length"


def test_5xx_is_retried_until_success(reference_server) -> None:
    url = reference_server(fail_rate=1.0, fail_status=503, fail_attempts=2)
    r, c = run(_one(url, max_retries=3, retry_backoff=0.01))
    assert r.attempts == 3 and c.requests_sent == 3 and r.content


def test_retries_exhausted_is_a_categorised_error(reference_server) -> None:
    url = reference_server(fail_rate=1.0, fail_status=500, fail_attempts=100)
    e, c = run(_one(url, max_retries=2, retry_backoff=0.01))
    assert isinstance(e, ModelError) and e.category == "error" and e.attempts == 3 and e.status == 500
    assert c.requests_sent == 3


def test_429_honours_retry_after(reference_server) -> None:
    url = reference_server(status_429_rate=1.0, retry_after=0.6, fail_attempts=1)
    t0 = time.perf_counter()
    r, _ = run(_one(url, max_retries=3, retry_backoff=0.01))
    assert r.attempts == 2 and time.perf_counter() - t0 >= 0.6
    e, _ = run(_one(reference_server(status_429_rate=1.0, retry_after=0, fail_attempts=50),
                    max_retries=1, retry_backoff=0.01))
    assert isinstance(e, ModelError) and e.category == "rate_limit"


def test_other_4xx_not_retried(reference_server) -> None:
    url = reference_server(fail_always_status=400)
    e, c = run(_one(url, max_retries=5, retry_backoff=0.01))
    assert isinstance(e, ModelError) and e.status == 400 and e.attempts == 1 and c.requests_sent == 1


def test_auth_error_is_raised_once(reference_server, server_stats) -> None:
    url = reference_server(require_api_key="good")

    async def go() -> int:
        async with ModelClient(url, api_key="bad", max_retries=5, transport=TRANSPORT) as c:
            with pytest.raises(AuthError, match="refused the API key"):
                await c.check()
            with pytest.raises(AuthError):
                await c.generate(MSG)
            with pytest.raises(AuthError):  # later calls fail without a request
                await c.generate(MSG)
            return c.requests_sent

    assert run(go()) == 1
    assert server_stats(url)["total_requests"] == 2  # the preflight and one request
    r, _ = run(_one(url, api_key="good"))
    assert r.content


def test_timeout_is_categorised(reference_server) -> None:
    url = reference_server(hang_rate=1.0, fail_attempts=100)
    t0 = time.perf_counter()
    e, c = run(_one(url, timeout=0.3, max_retries=1, retry_backoff=0.01))
    assert isinstance(e, ModelError) and e.category == "timeout" and c.requests_sent == 2
    # Not a speed check: without the timeout the hung requests would never end (the server
    # holds them until the test stops it), so any finish proves it; the bound only says how
    # long to wait before calling it a hang on a loaded machine.
    assert time.perf_counter() - t0 < 60


def test_unreachable_endpoint_fails_fast() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"

    async def go() -> None:
        async with ModelClient(url, timeout=2, transport=TRANSPORT) as c:
            await c.check()

    t0 = time.perf_counter()
    with pytest.raises(EndpointUnreachableError, match="cannot reach"):
        run(go())
    # Fails at connect (nothing listens), not after retries and back-off: well inside the
    # retry schedule's ~60 s, with room for a loaded machine.
    assert time.perf_counter() - t0 < 30


def test_concurrency_is_bounded(reference_server) -> None:
    url = reference_server(delay_ms=100)

    async def go() -> float:
        async with ModelClient(url, max_concurrent=4, transport=TRANSPORT) as c:
            t0 = time.perf_counter()
            await asyncio.gather(*(c.generate([{"role": "user", "content": f"q{i}"}]) for i in range(16)))
            return time.perf_counter() - t0

    assert run(go()) >= 0.39  # 16 requests, 4 at a time, 100 ms each


def test_responses_protocol(reference_server, server_stats) -> None:
    url = reference_server(default_content="#### 42", default_reasoning="6 times 7", reasoning_mode="field")
    r, _ = run(_one(url, protocol="responses", generation={"max_tokens": 20}))
    assert r.content == "#### 42" and r.reasoning_content == "6 times 7"
    assert r.finish_reason == "stop" and r.completion_tokens > 0
    assert server_stats(url)["by_endpoint"]["/v1/responses"] == 1


def test_auto_transport_choice() -> None:
    assert ModelClient("http://127.0.0.1:1/v1").transport == "raw"
    assert ModelClient("https://api.example.invalid/v1").transport == "aiohttp"
    assert ModelClient("http://127.0.0.1:1/v1", transport="aiohttp").transport == "aiohttp"
    with pytest.raises(Exception, match="plain http"):
        ModelClient("https://x.invalid/v1", transport="raw")


def test_dropped_connections_are_retried(reference_server, server_stats) -> None:
    url = reference_server(drop_rate=1.0, fail_attempts=1)
    r, _ = run(_one(url, max_retries=2, retry_backoff=0.01))
    assert r.content and r.attempts == 2


def test_raw_client_reads_chunked_and_close_delimited_bodies() -> None:
    """Servers that answer with chunked encoding or close the connection are understood."""
    body = b'{"choices":[{"message":{"content":"#### 7"},"finish_reason":"stop"}],"usage":{}}'

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        n = 0
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            n += 1
            if n == 1:  # chunked, in two chunks, with a trailer-less end
                half = len(body) // 2
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                             + b"%x\r\n" % half + body[:half] + b"\r\n"
                             + b"%x\r\n" % (len(body) - half) + body[half:] + b"\r\n0\r\n\r\n")
            else:  # no length: the body ends when the server closes
                writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + body)
                await writer.drain()
                writer.close()
                break
            await writer.drain()

    async def go() -> list[str]:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        out = []
        async with server, ModelClient(f"http://127.0.0.1:{port}/v1", transport="raw") as c:
            for _ in range(3):
                out.append((await c.generate(MSG)).content)
        return out

    if TRANSPORT == "raw":
        assert run(go()) == ["#### 7"] * 3


def test_backoff_recovers_by_time_without_any_success(reference_server, server_stats) -> None:
    """Every request is refused for a while, then the server answers but holds each reply
    until 16 requests are in flight at once. The client must really send less while it is
    refused (one at a time by the end), then grow back to 16 in flight with no success to
    go by: permits handed back only after successes would keep the barrier closed."""
    # Every answer takes 20 ms, so the server sees how many requests are in flight at once.
    url = reference_server(status_429_first=150, retry_after=0.05, delay_ms=20, barrier=16,
                           barrier_timeout=60)

    async def go() -> tuple[list[ModelResponse], int]:
        async with ModelClient(url, max_concurrent=16, max_retries=100, retry_backoff=0.01,
                               max_backoff=0.05, adapt_window=0.1, transport=TRANSPORT) as c:
            out = await asyncio.gather(*(c.generate([{"role": "user", "content": f"p{i}"}])
                                         for i in range(16)))
            return out, c.concurrency_cuts

    out, cuts = run(go())
    st = server_stats(url)
    assert st["faults"] == {"429_first": 150} and st["by_status"]["429"] == 150
    early, late = st["first_429_in_flight"][:16], st["first_429_in_flight"][100:]
    assert max(early) == 16  # it started at full concurrency
    assert cuts >= 1 and max(late) == 1, (
        f"the client kept sending while refused (in flight at the last 429s: {late[-10:]})")
    assert st["barrier"] == "opened", (
        f"the client never had 16 requests in flight again before any success "
        f"(barrier {st['barrier']}, max in flight {st['max_in_flight']})")
    assert st["max_in_flight"] == 16 and all(r.content for r in out)


def test_a_few_429s_among_successes_keep_full_concurrency(reference_server) -> None:
    """Random 429s on 5% of requests are single refusals, not overload: no cut."""
    url = reference_server(status_429_rate=0.05, retry_after=0, fault_per_request=True,
                           fail_attempts=2, delay_ms=2)

    async def go() -> tuple[int, int]:
        async with ModelClient(url, max_concurrent=16, retry_backoff=0.01, adapt_window=0.05,
                               transport=TRANSPORT) as c:
            await asyncio.gather(*(c.generate([{"role": "user", "content": f"q{i}"}])
                                   for i in range(600)))
            return c.concurrency_cuts, c.effective_concurrency

    assert run(go()) == (0, 16)


@pytest.mark.parametrize("style", ["json", "eof", "chunked"])
def test_truncated_200_is_retried_and_succeeds(reference_server, server_stats, style: str) -> None:
    """A 200 whose body is cut (bad JSON, EOF mid-body, a missing last chunk) is a
    transport error: retried, and the retry's answer is used."""
    url = reference_server(truncate_rate=1.0, truncate_style=style, fail_attempts=1,
                           default_content="#### 42")
    r, c = run(_one(url, max_retries=2, retry_backoff=0.01))
    assert isinstance(r, ModelResponse), f"truncated 200 ({style}) was not retried: {r}"
    assert r.content == "#### 42" and r.attempts == 2 and c.requests_sent == 2
    st = server_stats(url)
    assert st["faults"] == {"truncate": 1} and st["by_endpoint"]["/v1/chat/completions"] == 2


def test_every_attempt_on_the_wire_is_counted_under_resets(reference_server, server_stats) -> None:
    """Resets and drops on reused keep-alive connections: the client's count of requests
    sent equals what the server received, and every sample still gets its answer."""
    url = reference_server(reset_rate=0.2, drop_rate=0.1, fault_per_request=True, fail_attempts=3)

    async def go() -> tuple[list[ModelResponse], int]:
        async with ModelClient(url, max_concurrent=8, max_retries=5, retry_backoff=0.001,
                               transport=TRANSPORT) as c:
            out = await asyncio.gather(*(c.generate([{"role": "user", "content": f"r{i}"}])
                                         for i in range(300)))
            return out, c.requests_sent

    out, sent = run(go())
    st = server_stats(url)
    assert st["faults"].get("reset", 0) > 20 and st["faults"].get("drop", 0) > 10
    assert sent == st["by_endpoint"]["/v1/chat/completions"], (
        f"client counted {sent} requests, the server received "
        f"{st['by_endpoint']['/v1/chat/completions']}")
    assert sum(r.attempts for r in out) == sent and all(r.content for r in out)


def test_hung_requests_cost_one_timeout_while_others_flow(reference_server, server_stats) -> None:
    """Two requests hang; with a short timeout each costs one timeout and a retry, and the
    other slots serve every other request meanwhile."""
    url = reference_server(hang_rate=1.0, fail_attempts=1, fault_match="hang")
    done: list[str] = []

    async def go() -> list[ModelResponse]:
        async with ModelClient(url, max_concurrent=4, timeout=2.0, retry_backoff=0.01,
                               transport=TRANSPORT) as c:
            async def one(p: str) -> ModelResponse:
                r = await c.generate([{"role": "user", "content": p}])
                done.append(p)
                return r
            return await asyncio.gather(*(one(p) for p in
                                          ["hang 1", "hang 2", *(f"quick {i}" for i in range(60))]))

    out = run(go())
    assert server_stats(url)["faults"] == {"hang": 2}
    assert [r.attempts for r in out[:2]] == [2, 2] and all(r.attempts == 1 for r in out[2:])
    assert set(done[-2:]) == {"hang 1", "hang 2"}, (
        f"requests waited behind the hung ones: completion order {done[:5]}...")


def test_backoff_sleep_holds_no_slot(reference_server) -> None:
    """With one slot, a sample told to retry after 3 s must not hold that slot while it
    waits: every other sample is answered first."""
    url = reference_server(status_429_rate=1.0, retry_after=3, fail_attempts=1, fault_match="wait")
    done: list[str] = []

    async def go() -> list[ModelResponse]:
        async with ModelClient(url, max_concurrent=1, retry_backoff=0.01, transport=TRANSPORT) as c:
            async def one(p: str) -> ModelResponse:
                r = await c.generate([{"role": "user", "content": p}])
                done.append(p)
                return r
            return await asyncio.gather(*(one(p) for p in ["wait", *(f"go {i}" for i in range(30))]))

    out = run(go())
    assert out[0].attempts == 2
    assert done[-1] == "wait", f"the slot sat idle during the back-off: order {done[:5]}..."
