"""`nel serve` as a real process: scoring off the event loop, SIGTERM, slow clients, 415."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nel_resources.runtime.processes import ManagedProcess, start_on_free_port

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 60.0

# A BYOB benchmark whose scorer announces that it started, then holds until released:
# the test decides when scoring ends, so "/health answered during scoring" is a fact,
# not a race. Released, it scores the (huge) reply with the real GSM8K scorer.
BYOB = '''
import time
from pathlib import Path
from benchmarks.byob import benchmark, scorer
from benchmarks.scoring import numeric_match

FLAGS = Path({flags!r})

@benchmark(name="held_scorer", dataset=[{{"q": "1+1", "a": "2"}}], prompt="{{q}}",
           target_field="a")
@scorer
def held(inp):
    (FLAGS / "started").write_text("1")
    deadline = time.monotonic() + 120
    while not (FLAGS / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return numeric_match(inp.response, inp.target)
'''


def _wait_for(cond: Any, what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"within {timeout:.0f} s: {what} did not happen")
        time.sleep(0.02)


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[tuple[ManagedProcess, int, Path]]:
    flags = tmp_path / "flags"
    flags.mkdir()
    module = tmp_path / "held.py"
    module.write_text(BYOB.format(flags=str(flags)))

    def make(port: int) -> ManagedProcess:
        return ManagedProcess(
            [sys.executable, "-m", "dagster_project.cli.main", "serve", "-b", "held_scorer",
             "--import", str(module), "--port", str(port), "--read-timeout", "2"],
            cwd=REPO,
            env={"PYTHONPATH": str(REPO)},
            name="nel-serve",
        )

    proc, port = start_on_free_port(make, lambda p: f"http://127.0.0.1:{p}/health")
    try:
        yield proc, port, flags
    finally:
        proc.stop()


def _post(port: int, path: str, body: bytes, ctype: str = "application/json") -> tuple[int, dict]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=body, headers={"Content-Type": ctype}
    )
    try:
        with urllib.request.urlopen(req, timeout=WAIT_S) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _health(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=WAIT_S) as resp:
        return resp.status


def _huge_verify_body() -> bytes:
    reply = "\\boxed{" * 100_000 + " #### 2"
    return json.dumps({"response": reply, "expected_answer": "2"}).encode()


def test_health_answers_while_a_huge_verify_is_scored(served) -> None:
    _, port, flags = served
    result: dict[str, Any] = {}
    def call() -> None:
        result["status"], result["body"] = _post(port, "/verify", _huge_verify_body())

    worker = threading.Thread(target=call)
    worker.start()
    _wait_for(lambda: (flags / "started").exists(), "scoring of the huge /verify starting")
    assert _health(port) == 200, "/health did not answer while /verify was being scored"
    assert not result, "the /verify answered before its scorer was released"
    (flags / "release").write_text("1")
    worker.join(WAIT_S)
    assert not worker.is_alive(), "the huge /verify never answered after release"
    assert result["status"] == 200, result
    assert result["body"]["reward"] == 1.0, result


def test_sigterm_stops_the_server_while_scoring(served) -> None:
    """The request still being scored when the graceful-shutdown time is up is answered 503
    `server_stopping` (never a reward, never a dropped connection), then the server exits."""
    proc, port, flags = served
    result: dict[str, Any] = {}

    def call() -> None:
        # The server going away mid-request is what this test causes.
        with contextlib.suppress(OSError):
            result["status"], result["body"] = _post(port, "/verify", _huge_verify_body())

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    _wait_for(lambda: (flags / "started").exists(), "scoring starting")

    os.kill(proc.pid, signal.SIGTERM)  # the server itself, as a service manager would
    _wait_for(lambda: not proc.is_running(), "nel serve exiting after SIGTERM during scoring", 20)
    caller.join(WAIT_S)
    assert result.get("status") == 503, result
    assert result["body"]["error"] == "server_stopping", result


@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded", "image/png"])
def test_non_json_content_type_is_415(served, ctype: str) -> None:
    _, port, _ = served
    status, body = _post(port, "/verify", b'{"response": "2", "expected_answer": "2"}', ctype)
    assert status == 415, body
    assert body["error"] == "unsupported_media_type" and "reward" not in body


def _slow_client(port: int, payload: bytes) -> bytes:
    """Send `payload` a byte every 0.2 s until the server closes; returns what it answered."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        for i in range(len(payload)):
            try:
                sock.sendall(payload[i : i + 1])
            except OSError:
                break
            time.sleep(0.2)  # the slow client's pace, not a wait on the server
        else:
            pytest.fail("the server read a byte-by-byte request to the end without cutting it off")
        try:
            return sock.recv(65536)
        except OSError:
            return b""


def test_slow_headers_are_cut_off(served) -> None:
    _, port, _ = served
    head = b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 400 + b"\r\n\r\n"
    _slow_client(port, head)
    assert _health(port) == 200


def test_slow_headers_on_a_kept_alive_connection_are_cut_off(served) -> None:
    _, port, _ = served
    head = b"GET /health HTTP/1.1\r\nHost: x\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        sock.sendall(head + b"\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        # The next request's head, a byte every 0.2 s (the slow client's pace): cut off
        # within the 2 s limit, although the connection has been open for longer.
        t0 = time.monotonic()
        for byte in head + b"X-Pad: " + b"a" * 400:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                break
            if time.monotonic() - t0 > 10:
                pytest.fail("a kept-alive connection's slow head was not cut off")
            time.sleep(0.2)
        assert time.monotonic() - t0 < 6


def test_slow_body_is_cut_off(served) -> None:
    _, port, _ = served
    body = b'{"response": "' + b"1" * 400 + b'", "expected_answer": "2"}'
    head = (
        b"POST /verify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
    )
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        sock.sendall(head)
        answer = b""
        for i in range(len(body)):
            try:
                sock.sendall(body[i : i + 1])
            except OSError:
                break
            sock.settimeout(0.2)  # the slow client's pace: read whatever came back meanwhile
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            answer += chunk
            if not chunk or b"\r\n\r\n" in answer:
                break
        else:
            pytest.fail("the server read a byte-by-byte body to the end without cutting it off")
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]


def test_scoring_overrun_is_422_and_frees_the_loop() -> None:
    """A scorer that overruns `verify_timeout` gets a 422 `scorer_timeout`, never a reward."""
    from fastapi.testclient import TestClient

    from benchmarks._types import VerifyResult
    from benchmarks.serve import generate_app
    from tests.benchmarks.test_serve import ToyArithmetic

    release = threading.Event()

    class Stuck(ToyArithmetic):
        async def verify(self, response: str, expected: str, **metadata: Any) -> VerifyResult:
            release.wait(WAIT_S)  # blocks its scoring thread, as a runaway scorer would
            return VerifyResult(1.0, response, {})

    app = generate_app(Stuck(), verify_timeout=0.5)
    try:
        with TestClient(app) as client:
            resp = client.post("/verify", json={"response": "2", "expected_answer": "2"})
            assert resp.status_code == 422, resp.text
            assert resp.json()["error"] == "scorer_timeout" and "reward" not in resp.json()
            assert client.get("/health").status_code == 200
    finally:
        release.set()
