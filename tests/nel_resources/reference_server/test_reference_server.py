"""The reference OpenAI-compatible server: formats, answer policy, faults, stats, HTTP."""

from __future__ import annotations

import hashlib
import json
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from nel_resources.reference_server import start_reference_server
from tests.support import base_to_root, http_json, reset_server_stats, server_stats

StartServer = Callable[..., str]


def chat(
    base: str,
    user: str,
    *,
    system: str | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
    **extra: Any,
) -> tuple[int, dict[str, str], Any]:
    messages = [{"role": "system", "content": system}] if system is not None else []
    messages.append({"role": "user", "content": user})
    return http_json(
        "POST",
        f"{base}/chat/completions",
        {"model": "test-model", "messages": messages, **extra},
        headers=headers,
        timeout=timeout,
    )


def complete(base: str, prompt: str, **extra: Any) -> tuple[int, dict[str, str], Any]:
    return http_json(
        "POST", f"{base}/completions", {"model": "test-model", "prompt": prompt, **extra}
    )


def test_chat_completion_format(reference_server: StartServer) -> None:
    base = reference_server()
    status, headers, data = chat(base, "What is six times seven?")
    assert status == 200 and headers["content-type"] == "application/json"
    assert data["id"].startswith("chatcmpl-")
    assert data["object"] == "chat.completion"
    assert isinstance(data["created"], int) and abs(data["created"] - time.time()) < 60
    assert data["model"] == "test-model"  # echoed
    [choice] = data["choices"]
    assert choice["index"] == 0 and choice["finish_reason"] == "stop"
    assert choice["message"] == {"role": "assistant", "content": "The answer is 42."}
    usage = data["usage"]
    assert usage["prompt_tokens"] == 5  # whitespace tokens of the messages
    assert usage["completion_tokens"] == 4
    assert usage["total_tokens"] == 9
    assert usage["completion_tokens_details"] == {"reasoning_tokens": 0}


def test_text_completion_format_and_models(reference_server: StartServer) -> None:
    base = reference_server(default_content="Paris.", model_name="ref-m")
    status, _, data = complete(base, "The capital of France is")
    assert status == 200
    assert data["object"] == "text_completion" and data["id"].startswith("cmpl-")
    assert data["choices"] == [
        {"index": 0, "text": "Paris.", "logprobs": None, "finish_reason": "stop"}
    ]
    assert data["usage"]["prompt_tokens"] == 5 and data["usage"]["completion_tokens"] == 1
    status, _, models = http_json("GET", f"{base}/models")
    assert status == 200 and models["object"] == "list"
    assert [m["id"] for m in models["data"]] == ["ref-m"]


def test_answers_file_sha256_then_first_match(
    reference_server: StartServer, tmp_path: Path
) -> None:
    exact = "Exactly this question?"
    rows = [
        {"match": "capital", "content": "Paris"},
        {"match": "capital of Spain", "content": "never: an earlier row matches first"},
        {"sha256": hashlib.sha256(exact.encode()).hexdigest(), "content": "by hash"},
        {"match": "question", "content": "by substring"},
    ]
    path = tmp_path / "answers.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    base = reference_server(answers=str(path), echo=True)
    answer = lambda q: chat(base, q)[2]["choices"][0]["message"]["content"]  # noqa: E731
    assert answer("What is the capital of Spain?") == "Paris"
    assert answer(exact) == "by hash"  # sha256 wins although 'question' would also match
    assert answer("another question here") == "by substring"
    assert answer("no row for this") == "no row for this"  # --echo fallback
    # The last user message is what is matched, not earlier turns or the system prompt.
    status, _, data = http_json(
        "POST",
        f"{base}/chat/completions",
        {
            "messages": [
                {"role": "system", "content": "capital"},
                {"role": "user", "content": "capital x"},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "plain"},
            ]
        },
    )
    assert status == 200
    assert data["choices"][0]["message"]["content"] == "plain"


@pytest.mark.parametrize("mode", ["none", "field", "think"])
def test_reasoning_modes(reference_server: StartServer, mode: str) -> None:
    base = reference_server(
        reasoning_mode=mode,
        answers=[{"match": "sum", "content": "It is 5.", "reasoning": "two plus three is five"}],
    )
    _, _, data = chat(base, "What is the sum of 2 and 3?")
    message = data["choices"][0]["message"]
    details = data["usage"]["completion_tokens_details"]
    if mode == "none":
        assert message == {"role": "assistant", "content": "It is 5."}
        assert details["reasoning_tokens"] == 0
    elif mode == "field":
        assert message["content"] == "It is 5."
        assert message["reasoning_content"] == "two plus three is five"
        assert details["reasoning_tokens"] == 5
        assert data["usage"]["completion_tokens"] == 8
    else:
        assert "reasoning_content" not in message
        assert message["content"] == "<think>\ntwo plus three is five\n</think>\n\nIt is 5."
        assert details["reasoning_tokens"] == 5


def test_max_tokens_truncates_with_length_and_stop_sequences(reference_server: StartServer) -> None:
    base = reference_server(default_content="one two three four five six")
    _, _, data = chat(base, "count", max_tokens=3)
    choice = data["choices"][0]
    assert choice["message"]["content"] == "one two three"
    assert choice["finish_reason"] == "length"
    assert data["usage"]["completion_tokens"] == 3
    _, _, data = chat(base, "count", max_tokens=6)
    assert data["choices"][0]["finish_reason"] == "stop"  # exactly enough room
    _, _, data = chat(base, "count", stop=[" four", "six"], max_tokens=50)
    assert data["choices"][0]["message"]["content"] == "one two three"
    assert data["choices"][0]["finish_reason"] == "stop"
    _, _, data = complete(base, "count", max_tokens=2)
    assert data["choices"][0]["text"] == "one two"
    assert data["choices"][0]["finish_reason"] == "length"
    status, _, data = chat(base, "count", max_tokens=0)
    assert status == 400 and "max_tokens" in data["error"]["message"]


def test_max_tokens_spent_on_reasoning_leaves_empty_content(reference_server: StartServer) -> None:
    base = reference_server(
        reasoning_mode="field", default_reasoning="a b c d e f", default_content="final answer"
    )
    _, _, data = chat(base, "q", max_tokens=4)
    msg = data["choices"][0]["message"]
    assert msg["reasoning_content"] == "a b c d" and msg["content"] == ""
    assert data["choices"][0]["finish_reason"] == "length"
    assert data["usage"]["completion_tokens_details"]["reasoning_tokens"] == 4


def test_429_with_retry_after_then_success(
    reference_server: StartServer, server_stats: Callable[[str], dict[str, Any]]
) -> None:
    base = reference_server(status_429_rate=1.0, retry_after=2)
    status, headers, data = chat(base, "hello")
    assert status == 429
    assert headers["retry-after"] == "2"
    assert data["error"]["type"] == "rate_limit_exceeded"
    status, _, _ = chat(base, "hello")  # second attempt of this prompt goes through
    assert status == 200
    stats = server_stats(base)
    assert stats["by_status"] == {"429": 1, "200": 1} and stats["faults"] == {"429": 1}


def test_fail_then_succeed_by_attempt(reference_server: StartServer) -> None:
    base = reference_server(fail_rate=1.0, fail_status=503, fail_attempts=2)
    assert [chat(base, "retry me")[0] for _ in range(4)] == [503, 503, 200, 200]
    # Attempts are counted per prompt (+ seed): a new prompt fails afresh.
    assert chat(base, "another")[0] == 503
    assert chat(base, "retry me", seed=1)[0] == 503


def test_fail_rate_is_deterministic_fraction_of_prompts(reference_server: StartServer) -> None:
    prompts = [f"question number {i}" for i in range(200)]
    failing = []
    for _ in range(2):  # two independent servers choose exactly the same prompts
        base = reference_server(fail_rate=0.3)
        failing.append({p for p in prompts if chat(base, p)[0] == 500})
    assert failing[0] == failing[1]
    assert 30 <= len(failing[0]) <= 90


def test_api_key_required(reference_server: StartServer) -> None:
    base = reference_server(require_api_key="sk-test-123")
    status, _, data = chat(base, "hi")
    assert status == 401 and data["error"]["code"] == 401
    assert chat(base, "hi", headers={"Authorization": "Bearer wrong"})[0] == 401
    assert chat(base, "hi", headers={"Authorization": "Bearer sk-test-123"})[0] == 200
    assert http_json("GET", base_to_root(base) + "/health")[0] == 200  # health stays open
    assert http_json("GET", f"{base}/models")[0] == 401


def test_malformed_bodies_get_400_json(reference_server: StartServer) -> None:
    base = reference_server()
    status, _, data = http_json("POST", f"{base}/chat/completions", raw=b'{"messages": [')
    assert status == 400 and data["error"]["type"] == "invalid_request_error"
    status, _, data = http_json("POST", f"{base}/chat/completions", raw=b"[1, 2]")
    assert status == 400
    status, _, data = http_json("POST", f"{base}/chat/completions", {"model": "m"})
    assert status == 400 and "messages" in data["error"]["message"]
    status, _, data = http_json("POST", f"{base}/completions", {"prompt": 5})
    assert status == 400 and "prompt" in data["error"]["message"]
    assert http_json("GET", f"{base}/nope")[0] == 404
    assert http_json("GET", f"{base}/chat/completions")[0] == 405


@pytest.mark.parametrize(("raw", "status"), [
    (b"NOT-HTTP\r\n\r\n", 400),
    (b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: x\r\n\r\n", 400),
    (b"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 411),
    (b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n", 413),
])
def test_malformed_http_gets_4xx_json_and_a_closed_connection(
    reference_server: StartServer, raw: bytes, status: int
) -> None:
    # The same HTTP/1.1 code as the proxy (nel_resources/wire/http1.py): a 4xx, never a 5xx.
    url = urlsplit(reference_server())
    with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
        sock.sendall(raw)
        data = b""
        while piece := sock.recv(65536):  # the server closes after the answer
            data += piece
    assert data.startswith(f"HTTP/1.1 {status} ".encode()), data
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"connection: close" in head.lower()
    assert json.loads(body)["error"]["type"] == "invalid_request_error"


def test_fail_always_status(reference_server: StartServer) -> None:
    base = reference_server(fail_always_status=403)
    assert [chat(base, "x")[0] for _ in range(3)] == [403, 403, 403]
    assert complete(base, "x")[0] == 403


def test_stats_counts_system_prompt_and_reset(reference_server: StartServer) -> None:
    base = reference_server()
    chat(base, "alpha", system="You are terse.")
    chat(base, "alpha")
    chat(base, "beta", system="Answer in French.")
    complete(base, "gamma")
    http_json("POST", f"{base}/chat/completions", raw=b"not json")
    http_json("GET", base_to_root(base) + "/health")  # control endpoints are not counted
    stats = server_stats(base)
    assert stats["total_requests"] == 5
    assert stats["by_endpoint"] == {"/v1/chat/completions": 4, "/v1/completions": 1}
    assert stats["by_status"] == {"200": 4, "400": 1}
    assert stats["prompts"] == {"alpha": 2, "beta": 1, "gamma": 1}
    assert stats["system_messages"] == {"count": 2, "last": "Answer in French."}
    assert stats["models"] == {"test-model": 4}
    reset_server_stats(base)
    stats = server_stats(base)
    assert stats["total_requests"] == 0 and stats["prompts"] == {}
    assert stats["system_messages"] == {"count": 0, "last": None}


def _read_responses(sock: socket.socket, count: int) -> list[tuple[int, dict[str, Any]]]:
    """Parse ``count`` Content-Length responses off a raw socket, in arrival order."""
    buf = b""
    out: list[tuple[int, dict[str, Any]]] = []
    while len(out) < count:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            head = buf[:end].decode().lower()
            length = int(head.split("content-length:")[1].split("\r\n")[0])
            if len(buf) >= end + 4 + length:
                out.append((int(head[9:12]), json.loads(buf[end + 4 : end + 4 + length])))
                buf = buf[end + 4 + length :]
                continue
        chunk = sock.recv(65536)
        assert chunk, "server closed the connection"
        buf += chunk
    return out


def _raw_post(host: str, path: str, body: bytes) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


@pytest.mark.parametrize("delay_ms", [0, 30])
def test_pipelined_keep_alive_requests_on_one_socket(
    reference_server: StartServer, delay_ms: int
) -> None:
    base = reference_server(echo=True, delay_ms=delay_ms)
    url = urlsplit(base)
    host = url.netloc
    payload = b"".join(
        _raw_post(
            host,
            "/v1/chat/completions",
            json.dumps({"messages": [{"role": "user", "content": f"msg {i}"}]}).encode(),
        )
        for i in range(5)
    )
    payload += _raw_post(host, "/v1/completions", b'{"prompt": "last one"}')
    payload += _raw_post(host, "/v1/chat/completions", b"{broken")
    payload += b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
        # Split mid-request too: parsing must cope with arbitrary segment boundaries.
        sock.sendall(payload[:37])
        time.sleep(0.05)
        sock.sendall(payload[37:])
        responses = _read_responses(sock, 8)
        # The same connection is still usable afterwards.
        sock.sendall(_raw_post(host, "/v1/completions", b'{"prompt": "again"}'))
        [(status, again)] = _read_responses(sock, 1)
    assert status == 200 and again["choices"][0]["text"] == "again"
    contents = [r[1]["choices"][0]["message"]["content"] for r in responses[:5]]
    assert contents == [f"msg {i}" for i in range(5)]  # in request order
    assert responses[5][1]["choices"][0]["text"] == "last one"
    assert responses[6][0] == 400
    assert responses[7][0] == 200 and responses[7][1]["object"] == "list"


def test_hang_and_drop_faults(reference_server: StartServer) -> None:
    base = reference_server(hang_rate=1.0)
    with pytest.raises(TimeoutError):
        chat(base, "will hang", timeout=0.5)
    assert chat(base, "will hang")[0] == 200  # the retry is answered
    base = reference_server(drop_rate=1.0)
    with pytest.raises(ConnectionError):
        chat(base, "will drop")
    assert chat(base, "will drop")[0] == 200
    assert server_stats(base)["faults"] == {"drop": 1}


def test_delay_ms_is_applied(reference_server: StartServer) -> None:
    base = reference_server(delay_ms=200)
    started = time.monotonic()
    assert chat(base, "slow")[0] == 200
    assert time.monotonic() - started >= 0.19


def test_n_choices_streaming_and_echo_flag(reference_server: StartServer) -> None:
    base = reference_server(default_content="a b")
    _, _, data = chat(base, "q", n=3)
    assert [c["index"] for c in data["choices"]] == [0, 1, 2]
    assert data["usage"]["completion_tokens"] == 6
    _, _, data = complete(base, "start:", echo=True)
    assert data["choices"][0]["text"] == "start:a b"
    status, headers, text = chat(base, "q", stream=True, stream_options={"include_usage": True})
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    events = [line[6:] for line in text.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert (
        "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
        == "a b"
    )
    assert chunks[-1]["usage"]["completion_tokens"] == 2


def test_start_reference_server_api_rejects_unknown_options() -> None:
    with pytest.raises(TypeError, match="unknown reference server option"):
        start_reference_server(no_such_option=1)
    proc, base = start_reference_server(default_content="direct")
    try:
        assert base.endswith("/v1")
        assert chat(base, "x")[2]["choices"][0]["message"]["content"] == "direct"
        assert "listening on 127.0.0.1:" in proc.log_tail()
    finally:
        proc.stop()


def _raw_exchange(base: str, prompt: str) -> tuple[bytes, bool]:
    """Send one chat request on a fresh socket; return (every byte received, closed by server)."""
    url = urlsplit(base)
    body = json.dumps({"messages": [{"role": "user", "content": prompt}]}).encode()
    with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
        sock.sendall(_raw_post(url.netloc, "/v1/chat/completions", body))
        data = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                return data, False  # still open: the server meant to keep it alive
            if not chunk:
                return data, True
            data += chunk
            if b"\r\n\r\n" in data and b"content-length:" in data.lower():
                head, _, rest = data.partition(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                if len(rest) >= length:
                    return data, False


@pytest.mark.parametrize("style", ["json", "eof", "chunked"])
def test_truncated_200_bodies(reference_server: StartServer, style: str) -> None:
    base = reference_server(truncate_rate=1.0, truncate_style=style)
    data, closed = _raw_exchange(base, "cut me")
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    with pytest.raises(json.JSONDecodeError):
        json.loads(body)
    if style == "json":  # well framed, keep-alive: only the JSON is cut
        assert not closed and f"content-length: {len(body)}".encode() in head.lower()
    elif style == "eof":  # fewer bytes than announced, then the server closes
        assert closed and int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0]) > len(body)
    else:  # one chunk, then the connection closes before the terminating 0 chunk
        assert closed and b"transfer-encoding: chunked" in head.lower()
        assert not body.endswith(b"0\r\n\r\n")
    assert chat(base, "cut me")[0] == 200  # the retry gets the whole answer
    stats = server_stats(base)
    assert stats["faults"] == {"truncate": 1} and stats["fault_log"] == {"cut me": ["truncate"]}


def test_reset_closes_with_rst(reference_server: StartServer) -> None:
    base = reference_server(reset_rate=1.0)
    with pytest.raises(ConnectionResetError):
        _raw_exchange(base, "reset me")
    assert chat(base, "reset me")[0] == 200
    stats = server_stats(base)
    assert stats["faults"] == {"reset": 1} and stats["by_endpoint"]["/v1/chat/completions"] == 2
    assert stats["in_flight"] == 0


def test_fault_per_request_draws_each_attempt(reference_server: StartServer) -> None:
    """Per prompt: a prompt fails its first attempts or never. Per request: any attempt
    within --fail-attempts may fail, after a success too, identically on every server."""
    prompts = [f"p{i}" for i in range(20)]
    seqs = []
    for _ in range(2):
        base = reference_server(fail_rate=0.5, fault_per_request=True, fail_attempts=6)
        seqs.append([[chat(base, p)[0] for _ in range(8)] for p in prompts])
    assert seqs[0] == seqs[1]
    assert all(s[6:] == [200, 200] for s in seqs[0])  # past --fail-attempts: always answered
    assert any(500 in s[s.index(200):6] for s in seqs[0] if 200 in s[:6])
    base = reference_server(fail_rate=0.5, fail_attempts=6)
    per_prompt = [[chat(base, p)[0] for _ in range(8)] for p in prompts]
    assert all(len(set(s[:6])) == 1 for s in per_prompt)


def test_fault_match_limits_faults_to_matching_prompts(reference_server: StartServer) -> None:
    base = reference_server(fail_rate=1.0, fault_match="flaky")
    assert [chat(base, p)[0] for p in ("a flaky one", "steady", "flaky again")] == [500, 200, 500]


def test_status_429_first_refuses_the_first_n_requests(reference_server: StartServer) -> None:
    base = reference_server(status_429_first=3, retry_after=0.5)
    statuses = [chat(base, p) for p in ("a", "b", "a", "c", "a")]
    assert [s[0] for s in statuses] == [429, 429, 429, 200, 200]
    assert statuses[0][1]["retry-after"] == "0.5"
    stats = server_stats(base)
    assert stats["faults"] == {"429_first": 3} and stats["first_429_in_flight"] == [1, 1, 1]


def _wait_stats(base: str, what: str, ok: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        stats = server_stats(base)
        if ok(stats):
            return stats
        assert time.monotonic() < deadline, f"server never reported {what}: {stats}"
        time.sleep(0.01)


def test_barrier_holds_replies_until_n_in_flight(reference_server: StartServer) -> None:
    from concurrent.futures import ThreadPoolExecutor

    base = reference_server(barrier=3)
    with ThreadPoolExecutor(3) as pool:
        first = [pool.submit(chat, base, f"q{i}") for i in range(2)]
        stats = _wait_stats(base, "2 requests in flight", lambda s: s["in_flight"] == 2)
        assert stats["barrier"] == "closed" and not any(f.done() for f in first)
        third = pool.submit(chat, base, "q2")
        assert [f.result()[0] for f in [*first, third]] == [200, 200, 200]
    stats = server_stats(base)
    assert stats["barrier"] == "opened" and stats["max_in_flight"] == 3 and stats["in_flight"] == 0
    assert chat(base, "later")[0] == 200  # once open, it stays open

    base = reference_server(barrier=5, barrier_timeout=0.2)
    assert chat(base, "alone")[0] == 200
    assert server_stats(base)["barrier"] == "timed_out"
