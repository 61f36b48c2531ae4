"""`nel serve`'s own HTTP protocol (`benchmarks.serve_http`) on a real server process.

`/verify` and `/seed_session` are answered by the protocol, below the ASGI app: these tests
pin that a response leaves in one piece (one TCP segment, read from the client's kernel
counters), that every answer, errors included, is the one the ASGI app gives, and that
pipelining and HTTP/1.0 keep their meaning.
"""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks.test_serve import (
    responses_api_body,
    start_server,
    stop_server,
    wait_healthy,
)

MAX_BODY = 4000
# A BYOB benchmark (nel's own environment code, so both hot routes run without a task):
# problem i asks for i + i; the last integer is the answer; BOOM makes the scorer raise.
BYOB = '''
import re
from benchmarks.byob import benchmark, scorer

@benchmark(name="nel_test_http_arith", dataset=[{"q": i, "a": str(2 * i)} for i in range(12)],
           prompt="What is {q} + {q}?", target_field="a")
@scorer
def last_int(inp):
    if "BOOM" in inp.response:
        raise RuntimeError("scorer exploded")
    found = re.findall(r"-?\\d+", inp.response)
    return {"correct": bool(found) and found[-1] == str(inp.target)}
'''
WAIT_S = 30.0
# Offset of `tcpi_data_segs_in` in Linux's `struct tcp_info` (linux/tcp.h, since 4.6).
_TCPI_DATA_SEGS_IN = 152


@pytest.fixture(scope="module")
def byob(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("byob") / "http_arith.py"
    path.write_text(BYOB)
    return path


@pytest.fixture(scope="module")
def port(byob: Path) -> Iterator[int]:
    proc, port = start_server(["-b", str(byob), "--max-body-bytes", str(MAX_BODY)])
    try:
        wait_healthy(port, proc)
        yield port
    finally:
        stop_server(proc)


def _request(path: str, body: bytes, ctype: str | None = "application/json",
             version: str = "1.1") -> bytes:
    head = f"POST {path} HTTP/{version}\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
    if ctype is not None:
        head += f"Content-Type: {ctype}\r\n"
    return head.encode() + b"\r\n" + body


def _read_response(sock: socket.socket, buf: bytearray) -> tuple[int, dict[str, str], bytes]:
    """One response from `sock` (bytes already read are in `buf`, and what is read past the
    response stays there): status, headers, body."""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed mid-head: {bytes(buf)!r}"
        buf += chunk
    head, _, _ = bytes(buf).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    start = len(head) + 4
    end = start + int(headers["content-length"])
    while len(buf) < end:
        chunk = sock.recv(65536)
        assert chunk, "connection closed mid-body"
        buf += chunk
    body = bytes(buf[start:end])
    del buf[:end]
    return int(lines[0].split()[1]), headers, body


def _data_segments_in(sock: socket.socket) -> int:
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    return struct.unpack_from("I", info, _TCPI_DATA_SEGS_IN)[0]


def _seed(idx: int) -> bytes:
    return json.dumps({"idx": idx}).encode()


def _verify(text: str, expected: str = "6") -> bytes:
    return json.dumps({"response": text, "expected": expected, "metadata": {"parity": 1}}).encode()


def test_a_hot_response_leaves_in_one_segment(port: int) -> None:
    """Status line, headers and body in one write: the client is woken once per response
    (uvicorn's ASGI path writes the head and the body apart: two segments)."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        buf = bytearray()
        for path, body in [("/seed_session", _seed(3)), ("/verify", _verify("so 6")),
                           ("/verify", b"[1]")]:
            before = _data_segments_in(sock)
            sock.sendall(_request(path, body))
            status, _, answer = _read_response(sock, buf)
            assert status in (200, 422), answer
            assert _data_segments_in(sock) - before == 1, (path, status, answer)


# Requests as an RL client (or a broken one) sends them; each must get the app's answer.
CASES: list[tuple[str, bytes, str | None]] = [
    ("/seed_session", _seed(3), "application/json"),
    ("/seed_session", b"", None),
    ("/seed_session", _seed(99), "application/json"),
    ("/seed_session", b'{"idx": "3"}', "application/json"),
    ("/seed_session", b'{"idx": 1e300}', "application/json"),
    ("/verify", _verify("so 6"), "application/json; charset=utf-8"),
    ("/verify", _verify("so 5"), "application/vnd.api+json"),
    ("/verify", _verify("BOOM"), "application/json"),
    ("/verify", json.dumps({"response": responses_api_body("6"), "expected_answer": "6",
                            "responses_create_params": {"input": []}}).encode(),
     "application/json"),
    ("/verify", b'{"response": "6"', "application/json"),
    ("/verify", b"[1]", "application/json"),
    ("/verify", b"", "application/json"),
    ("/verify", b'{"expected": "6"}', "application/json"),
    ("/verify", _verify("so 6"), "text/plain"),
    ("/verify", _verify("x" * MAX_BODY), "application/json"),
]


def test_hot_routes_answer_as_the_asgi_app_does(port: int, byob: Path) -> None:
    from fastapi.testclient import TestClient

    from benchmarks.plugins import resolve_benchmark_ref
    from benchmarks.serve import build_environment, generate_app

    env = build_environment(resolve_benchmark_ref(str(byob)), imports=[str(byob)])
    app = generate_app(env, max_body_bytes=MAX_BODY)
    assert app.hot_answers.taskless == {b"/verify", b"/seed_session"}
    with TestClient(app) as client, socket.create_connection(("127.0.0.1", port),
                                                             timeout=WAIT_S) as sock:
        buf = bytearray()
        for path, body, ctype in CASES:
            headers = {} if ctype is None else {"content-type": ctype}
            expected = client.post(path, content=body, headers=headers)
            sock.sendall(_request(path, body, ctype))
            status, got_headers, answer = _read_response(sock, buf)
            assert (status, json.loads(answer)) == (expected.status_code, expected.json()), (
                path, body[:80], ctype)
            assert got_headers["content-type"] == "application/json"


def test_pipelined_requests_are_answered_in_order(port: int) -> None:
    """Three requests in one write, a scored one first: answers come back in order."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        sock.sendall(_request("/verify", _verify("so 6")) + _request("/seed_session", _seed(4))
                     + _request("/verify", _verify("so 7")))
        buf = bytearray()
        answers: list[dict[str, Any]] = [json.loads(_read_response(sock, buf)[2])
                                         for _ in range(3)]
    assert [a.get("reward") for a in answers] == [1.0, None, 0.0]
    assert answers[1]["expected_answer"] == "8"


def test_http_1_0_gets_connection_close(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        sock.sendall(_request("/seed_session", _seed(2), version="1.0"))
        buf = bytearray()
        status, headers, _ = _read_response(sock, buf)
        assert status == 200 and headers.get("connection") == "close"
        assert sock.recv(1) == b"", "the server kept an HTTP/1.0 connection open"
