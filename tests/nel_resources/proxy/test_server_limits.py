"""What a real `nel proxy` process takes in, in front of a real reference server: its memory
stays bounded under 8 concurrent 60 MB bodies (a budget over the bodies in flight: 503
past it), a slow client is cut after the head / body timeout, a malformed X-Nel-Repeat
is a 400, and a `stream: true` request to an upstream that does not stream gets the answer
as a stream."""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest

from nel_resources.proxy.server import start_proxy
from nel_resources.reference_server import start_reference_server
from nel_resources.runtime.processes import ManagedProcess
from tests.support.reference import http_json, server_stats

MIB = 1024 * 1024


@dataclass
class Proxy:
    proc: ManagedProcess
    url: str

    @property
    def addr(self) -> tuple[str, int]:
        parts = urlsplit(self.url)
        assert parts.hostname and parts.port
        return parts.hostname, parts.port


def _start(tmp: Path, upstream: str, *flags: str) -> Proxy:
    cfg = tmp / "nel.yaml"
    cfg.write_text(f"services:\n  m:\n    type: api\n    url: {upstream}\n    model: tiny\n"
                   "    max_retries: 0\nbenchmarks:\n  - name: gsm8k\n")
    proc, url = start_proxy(cfg, "m", **({"extra_args": flags} if flags else {}))
    return Proxy(proc, url)


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    proc, url = start_reference_server()
    try:
        yield url
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def proxy(upstream: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    p = _start(tmp_path_factory.mktemp("limits"), upstream)
    try:
        yield p
    finally:
        p.proc.stop()


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):  # the process's peak resident set size
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM in /proc/PID/status")


def test_memory_stays_bounded_under_eight_concurrent_large_bodies(upstream: str,
                                                                  tmp_path: Path) -> None:
    # the default per-request limit (64 MiB) and budget (256 MiB of bodies in flight)
    proxy = _start(tmp_path, upstream)
    try:
        before = _peak_rss_mb(proxy.proc.pid)
        body = orjson.dumps({"messages": [{"role": "user", "content": "x" * (60 * MIB)}]})
        sent_before = server_stats(upstream)["total_requests"]
        start = threading.Barrier(8)
        results: list[tuple[int, Any]] = []

        def post() -> None:
            conn = http.client.HTTPConnection(*proxy.addr, timeout=120)
            try:
                start.wait()
                conn.request("POST", "/v1/chat/completions", body=body,
                             headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                results.append((resp.status, orjson.loads(resp.read())))
            finally:
                conn.close()

        threads = [threading.Thread(target=post) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        peak = _peak_rss_mb(proxy.proc.pid)
        print(f"proxy peak RSS: {before:.0f} MB at start, {peak:.0f} MB after 8 concurrent "
              f"{len(body) / MIB:.0f} MiB bodies; statuses {sorted(s for s, _ in results)}")
        assert len(results) == 8
        ok = [r for s, r in results if s == 200]
        busy = [r for s, r in results if s == 503]
        assert len(ok) + len(busy) == 8, results
        assert ok and busy  # the budget took some and turned the rest away
        assert len(ok) <= 4  # 256 MiB holds four 60 MiB bodies at once
        assert all("over its 268435456-byte budget" in r["error"]["message"] for r in busy)
        assert server_stats(upstream)["total_requests"] == sent_before + len(ok)
        # 8 x 60 MB unbounded reached 2.3 GB; the budget keeps it near 4 bodies' worth
        assert peak < 1200, f"proxy peak RSS {peak:.0f} MB"
        # a body over the per-request limit is a 413 before it is read
        status, _, data = http_json("POST", proxy.url + "/chat/completions",
                                    raw=b"x" * (65 * MIB), timeout=60)
        assert status == 413 and "larger than 67108864 bytes" in data["error"]["message"]
    finally:
        proxy.proc.stop()


def _cut_after(addr: tuple[str, int], first: bytes, then: bytes = b"") -> tuple[float, bytes]:
    """Send `first`, then `then` a byte every 0.2 s (a slow client); the seconds until the
    proxy closed the connection, and what it answered."""
    with socket.create_connection(addr, timeout=30) as sock:
        t0 = time.monotonic()
        sock.sendall(first)
        sock.settimeout(0.2)
        data = b""
        for i in range(len(then) + 150):  # ~30 s at most
            if i < len(then):
                with contextlib.suppress(OSError):  # the proxy closed: read what it said
                    sock.sendall(then[i:i + 1])
            try:
                piece = sock.recv(65536)
            except TimeoutError:
                continue
            if not piece:
                return time.monotonic() - t0, data
            data += piece
        raise AssertionError(f"the proxy did not cut a slow client within 30 s; got {data!r}")


def test_a_slow_client_is_cut_after_the_head_and_body_timeouts(upstream: str,
                                                               tmp_path: Path) -> None:
    proxy = _start(tmp_path, upstream, "--head-timeout", "1", "--body-timeout", "2")
    try:
        _slow_clients(proxy)
    finally:
        proxy.proc.stop()


def _slow_clients(proxy: Proxy) -> None:
    # connected and sent nothing
    took, data = _cut_after(proxy.addr, b"")
    assert 0.9 <= took < 10 and data.startswith(b"HTTP/1.1 408 "), data
    # a head that trickles in
    took, data = _cut_after(proxy.addr, b"POST /v1/chat/completions HTTP/1.1\r\n",
                            b"X-Slow: " + b"a" * 200)
    assert 0.9 <= took < 10 and data.startswith(b"HTTP/1.1 408 "), data
    assert b"the request head did not arrive within 1s" in data
    # a whole head, then a body that trickles in
    took, data = _cut_after(proxy.addr, b"POST /v1/chat/completions HTTP/1.1\r\n"
                                        b"Content-Length: 1000\r\n\r\n{", b" " * 200)
    assert 1.9 <= took < 12 and data.startswith(b"HTTP/1.1 408 "), data
    assert b"the request body did not arrive within 2s" in data
    # the proxy still serves
    status, _, data = http_json("POST", proxy.url + "/chat/completions",
                                {"messages": [{"role": "user", "content": "hi"}]})
    assert status == 200, data


def test_a_cut_connection_lingers_half_closed(upstream: str, tmp_path: Path) -> None:
    """After the 408 of a cut, the proxy half-closes and swallows what the client still sends
    for a while, instead of closing with the client's bytes unread: that close answers with a
    reset, which can discard the 408 before the client reads it (seen once in CI as
    ConnectionResetError in the slow-client test above; not reproducible on demand, so
    this pins the lingering itself: bytes sent after the 408 are not refused)."""
    proxy = _start(tmp_path, upstream, "--body-timeout", "1")
    try:
        with socket.create_connection(proxy.addr, timeout=30) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\n"
                         b"Content-Length: 10000000\r\n\r\n{")
            data = b""
            while piece := sock.recv(65536):  # the 408, then the proxy's FIN
                data += piece
            assert data.startswith(b"HTTP/1.1 408 "), data
            assert b"the request body did not arrive within 1s" in data
            # A closed socket answers these with a reset, and the second send then fails.
            sock.sendall(b" " * 1024)
            time.sleep(0.3)
            sock.sendall(b" " * 1024)
            time.sleep(0.3)
            sock.sendall(b" " * 1024)
    finally:
        proxy.proc.stop()


@pytest.mark.parametrize("value", ["9" * 5000, "12345678901", "3.5", "-2", "１２"])
def test_a_malformed_repeat_header_is_a_400(proxy: Proxy, value: str) -> None:
    with socket.create_connection(proxy.addr, timeout=10) as sock:
        body = b'{"messages": [{"role": "user", "content": "hi"}]}'
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nX-Nel-Repeat: " + value.encode()
                     + b"\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        data = b""
        while piece := sock.recv(65536):
            data += piece
    assert data.startswith(b"HTTP/1.1 400 "), data[:200]
    assert b"X-Nel-Repeat must be a non-negative integer" in data


def test_a_stream_request_to_an_upstream_that_does_not_stream_gets_the_answer(
        tmp_path: Path) -> None:
    ref, upstream = start_reference_server(ignore_stream=True)
    try:
        proxy = _start(tmp_path, upstream)
        try:
            status, headers, text = http_json("POST", proxy.url + "/chat/completions", {
                "messages": [{"role": "user", "content": "hi"}], "stream": True,
                "stream_options": {"include_usage": True}})
        finally:
            proxy.proc.stop()
    finally:
        ref.stop()
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    events = [line[len("data: "):] for line in text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [orjson.loads(e) for e in events[:-1]]
    content = "".join(c["choices"][0]["delta"].get("content") or ""
                      for c in chunks if c.get("choices"))
    assert content == "The answer is 42."
    assert any(c.get("usage") for c in chunks)  # the usage the upstream counted
