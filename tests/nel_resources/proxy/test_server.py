"""The standalone proxy process (`nel proxy`) in front of a real reference server: what the
server receives reflects the interceptors, streams pass through the chunk hooks, `caching`
answers a second pass with no upstream request, a spent turn budget is a 429, malformed
requests get 4xx, the Dagster resource's process ends with its run, and an agent's traffic
is captured (`--capture`) and read back as ATIF steps."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import dagster as dg
import orjson
import pytest

from nel_resources.proxy import captured_steps, read_capture
from nel_resources.proxy.server import start_proxy
from nel_resources.reference_server import start_reference_server
from nel_resources.resources import InterceptorProxy
from nel_resources.runtime.processes import pid_alive
from tests.support.realcomponents import REPO_ROOT
from tests.support.reference import base_to_root, http_json, reset_server_stats, server_stats

# A user's interceptor module: `@interceptor` on the factory (it only observes answers, so it
# says affects_answers=False) and a chunk hook, named `package.module:factory` in the config.
USER_MODULE = """
from nel_resources.proxy import interceptor


@interceptor(affects_answers=False)
def shout(marker="!"):
    class Shout:
        async def on_chunk(self, chunk, ctx):
            for ch in chunk.get("choices") or ():
                delta = ch.get("delta") or {}
                if delta.get("content"):
                    delta["content"] = delta["content"].upper() + marker
            return chunk
    return Shout()
"""

CONFIG = """\
services:
  m:
    type: api
    url: {url}
    model: tiny
    api_key: {secret}
    max_retries: 0
    interceptors:
      - name: turn_counter
        config:
          max_turns: 3
      - name: drop_params
        config:
          params: [max_tokens]
      - name: system_message
        config:
          system_message: Reply in one word.
      - name: caching
        config:
          cache_dir: {cache}
      - name: nel_proxy_user.hooks:shout
        config:
          marker: "~"
      - name: log_tokens
      - name: response_stats
benchmarks:
  - name: gsm8k
"""


SECRET = "sk-capture-secret-4242"


@dataclass
class Proxied:
    upstream: str
    url: str
    cfg: Path
    env: dict[str, str]
    capture: Path


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxied]:
    tmp = tmp_path_factory.mktemp("proxy")
    pkg = tmp / "user" / "nel_proxy_user"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "hooks.py").write_text(USER_MODULE)
    ref, upstream = start_reference_server(record_bodies=50)
    try:
        cfg = tmp / "nel.yaml"
        cfg.write_text(CONFIG.format(url=upstream, cache=tmp / "cache", secret=SECRET))
        env = {"PYTHONPATH": f"{REPO_ROOT}:{tmp / 'user'}"}
        capture = tmp / "capture" / "exchanges.jsonl"
        proc, url = start_proxy(cfg, "m", env=env, capture_path=capture)
        try:
            yield Proxied(upstream, url, cfg, env, capture)
        finally:
            proc.stop()
    finally:
        ref.stop()


def _chat(url: str, content: str, path: str = "/chat/completions", **extra: Any
          ) -> tuple[int, Any]:
    headers = extra.pop("headers", None)
    body = {"messages": [{"role": "user", "content": content}], **extra}
    status, _, data = http_json("POST", url + path, body, headers=headers)
    return status, data


def _events(text: str) -> list[Any]:
    out = []
    for line in text.splitlines():
        if line.startswith("data: "):
            data = line[len("data: "):]
            out.append(data if data == "[DONE]" else orjson.loads(data))
    return out


def test_server_receives_what_the_interceptors_made(proxied: Proxied) -> None:
    reset_server_stats(proxied.upstream)
    status, data = _chat(proxied.url, "What is 2+2?", max_tokens=3, temperature=0.5,
                         headers={"Authorization": "Bearer agent-key"})
    assert status == 200, data
    assert data["choices"][0]["message"]["content"]
    [body] = server_stats(proxied.upstream)["bodies"]
    assert "max_tokens" not in body and body["temperature"] == 0.5
    assert body["model"] == "tiny"  # the service's model filled in
    assert body["messages"][0] == {"role": "system", "content": "Reply in one word."}
    assert body["messages"][-1] == {"role": "user", "content": "What is 2+2?"}


def test_models_pass_through(proxied: Proxied) -> None:
    status, _, data = http_json("GET", proxied.url + "/models")
    assert status == 200 and data["data"][0]["id"]


def test_stream_passes_through_the_chunk_hooks(proxied: Proxied) -> None:
    reset_server_stats(proxied.upstream)
    _, plain = _chat(proxied.url, "Stream 3+4?", headers={"X-Nel-Repeat": "7"})
    status, headers, text = http_json(
        "POST", proxied.url + "/chat/completions",
        {"messages": [{"role": "user", "content": "Stream 3+4?"}], "stream": True})
    assert status == 200 and headers["content-type"].startswith("text/event-stream"), text
    events = _events(text)
    assert events[-1] == "[DONE]" and len(events) >= 3
    content = "".join((e["choices"][0]["delta"].get("content") or "") for e in events[:-1])
    # the user interceptor's chunk hook ran on every content delta
    expected = plain["choices"][0]["message"]["content"].upper() + "~"
    assert content.replace("~", "") == expected.replace("~", "") and content.endswith("~")
    bodies = server_stats(proxied.upstream)["bodies"]
    assert bodies[-1]["stream"] is True
    assert bodies[-1]["messages"][0]["content"] == "Reply in one word."


def _stream(url: str, content: str, **extra: Any) -> list[Any]:
    status, headers, text = http_json(
        "POST", url + "/chat/completions",
        {"messages": [{"role": "user", "content": content}], "stream": True, **extra})
    assert status == 200 and headers["content-type"].startswith("text/event-stream"), text
    events = _events(text)
    assert events[-1] == "[DONE]", events
    return events[:-1]


def _proxy_stats(url: str) -> dict[str, Any]:
    _, _, stats = http_json("GET", base_to_root(url) + "/stats")
    return stats


def test_streamed_answers_reach_the_response_hooks(proxied: Proxied) -> None:
    session = proxied.url.replace("/v1", "/s/streamstats/v1")
    before = _proxy_stats(proxied.url)["stats"]
    events = _stream(session, "Count my tokens", stream_options={"include_usage": True})
    [usage] = [e["usage"] for e in events if e.get("usage")]  # the server's usage chunk
    after = _proxy_stats(proxied.url)["stats"]
    # log_tokens and response_stats saw the whole streamed answer, with the server's usage
    assert after["logged_total_tokens"] - before["logged_total_tokens"] == usage["total_tokens"]
    assert after["logged_prompt_tokens"] - before["logged_prompt_tokens"] == usage["prompt_tokens"]
    assert after["responses"] == before["responses"] + 1
    # without a usage chunk the completion tokens are counted on the stream (one per chunk
    # that carried text), and the prompt's stay unknown rather than made up
    events = _stream(proxied.url.replace("/v1", "/s/streamcount/v1"), "Count these too")
    texts = [e for e in events if e["choices"] and e["choices"][0]["delta"].get("content")]
    again = _proxy_stats(proxied.url)["stats"]
    assert again["logged_completion_tokens"] - after["logged_completion_tokens"] == len(texts) > 0
    assert again["logged_prompt_tokens"] == after["logged_prompt_tokens"]


def test_caching_replays_a_streamed_answer_and_shares_it_with_plain_requests(
        proxied: Proxied) -> None:
    def url(name: str) -> str:  # one session each: turn_counter's reminders stay out
        return proxied.url.replace("/v1", f"/s/{name}/v1")

    def content(events: list[Any]) -> str:
        return "".join(e["choices"][0]["delta"].get("content") or ""
                       for e in events if e["choices"])

    first = _stream(url("cs1"), "Stream then replay", stream_options={"include_usage": True})
    sent = server_stats(proxied.upstream)["total_requests"]
    hits = _proxy_stats(proxied.url)["stats"]["cache_hits"]
    replayed = _stream(url("cs2"), "Stream then replay", stream_options={"include_usage": True})
    plain_status, plain = _chat(url("cs3"), "Stream then replay")
    assert server_stats(proxied.upstream)["total_requests"] == sent  # 0 requests upstream
    assert _proxy_stats(proxied.url)["stats"]["cache_hits"] == hits + 2
    # the replay is a stream of chunks, through the chunk hooks like the live one
    assert all(e["object"] == "chat.completion.chunk" for e in replayed)
    assert content(replayed) == content(first) and content(first).endswith("~")
    assert [e["usage"] for e in replayed if e.get("usage")] == [
        e["usage"] for e in first if e.get("usage")]
    # a plain request gets the assembled answer: the upstream's text, before chunk hooks
    assert plain_status == 200 and plain["object"] == "chat.completion"
    assert plain["choices"][0]["message"]["content"].upper() + "~" == content(first)
    # and the other way round: a plain answer cached first is replayed to a stream
    _, plain2 = _chat(url("cs4"), "Plain then stream")
    sent = server_stats(proxied.upstream)["total_requests"]
    streamed = _stream(url("cs5"), "Plain then stream")
    assert server_stats(proxied.upstream)["total_requests"] == sent
    assert content(streamed) == plain2["choices"][0]["message"]["content"].upper() + "~"


def test_caching_answers_a_second_pass_without_upstream_requests(proxied: Proxied) -> None:
    prompts = [f"Cache me {i}" for i in range(3)]

    def ask(i: int, run: int, repeat: int) -> tuple[int, Any]:
        # One session per sample and pass (as an agent harness gives): turn_counter's
        # reminders, which change the request, stay out of it.
        url = proxied.url.replace("/v1", f"/s/cache{i}r{repeat}p{run}/v1")
        return _chat(url, prompts[i], headers={"X-Nel-Repeat": str(repeat)})

    first = [ask(i, 1, 0) for i in range(3)]
    other_repeat = ask(0, 1, 1)
    sent = server_stats(proxied.upstream)["total_requests"]
    second = [ask(i, 2, 0) for i in range(3)]
    assert server_stats(proxied.upstream)["total_requests"] == sent  # 0 requests upstream
    assert second == first and all(s == 200 for s, _ in second)
    assert other_repeat[0] == 200 and other_repeat[1]["id"] != first[0][1]["id"]  # its own draw
    _, _, stats = http_json("GET", base_to_root(proxied.url) + "/stats")
    assert stats["stats"]["cache_hits"] >= 3 and stats["stats"]["cache_saved_tokens"] > 0


def test_turn_counter_budget_is_a_429_per_session(proxied: Proxied) -> None:
    reset_server_stats(proxied.upstream)
    path = "/chat/completions"
    session = proxied.url.replace("/v1", "/s/agent01/v1")
    assert [_chat(session, f"turn {i}", path)[0] for i in range(3)] == [200] * 3
    status, data = _chat(session, "turn 4", path)
    assert status == 429 and data["error"]["code"] == "session_budget_exhausted"
    assert server_stats(proxied.upstream)["total_requests"] == 3  # the fourth never left
    assert _chat(proxied.url.replace("/v1", "/s/agent02/v1"), "turn 1")[0] == 200


def test_a_query_string_is_not_part_of_the_path(proxied: Proxied) -> None:
    status, data = _chat(proxied.url, "What is 1+2?", path="/chat/completions?api-version=1")
    assert status == 200 and data["choices"][0]["message"]["content"]
    status, data = _chat(proxied.url, "What is 1+2?", path="/embeddings?x=/chat/completions")
    assert status == 404 and "unknown path /v1/embeddings:" in data["error"]["message"]


@pytest.mark.parametrize(("method", "path", "raw", "headers", "status"), [
    ("POST", "/v1/chat/completions", b"{not json", {}, 400),
    ("POST", "/v1/chat/completions", b"[1, 2]", {}, 400),
    ("POST", "/v1/chat/completions", b'{"messages": []}', {"X-Nel-Repeat": "-1"}, 400),
    ("GET", "/v1/chat/completions", b"", {}, 405),
    ("POST", "/v1/embeddings", b"{}", {}, 404),
    ("POST", "/admin", b"{}", {}, 404),
])
def test_malformed_requests_get_4xx(proxied: Proxied, method: str, path: str, raw: bytes,
                                    headers: dict[str, str], status: int) -> None:
    got, _, data = http_json(method, base_to_root(proxied.url) + path, raw=raw or None,
                             headers=headers)
    assert got == status, data
    assert data["error"]["message"]


@pytest.mark.parametrize(("raw", "status"), [
    (b"NOT-HTTP\r\n\r\n", 400),
    (b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: x\r\n\r\n", 400),
    (b"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 411),
    (b"POST /v1/chat/\xffcompletions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", 400),
])
def test_malformed_http_gets_4xx_and_a_closed_connection(proxied: Proxied, raw: bytes,
                                                         status: int) -> None:
    parts = urlsplit(proxied.url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(raw)
        data = b""
        while chunk := sock.recv(65536):  # the proxy closes after the answer
            data += chunk
    assert data.startswith(f"HTTP/1.1 {status} ".encode()), data
    assert b'"error"' in data


def test_resource_process_ends_with_its_run(proxied: Proxied, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    monkeypatch.setenv("PYTHONPATH", proxied.env["PYTHONPATH"])  # the user's module
    seen: dict[str, Any] = {}

    @dg.asset
    def agent_traffic(proxy: InterceptorProxy) -> None:
        seen["pid"] = proxy.pid()
        seen["alive"] = pid_alive(proxy.pid())
        seen["status"], seen["data"] = _chat(proxy.url(), "via resource")

    result = dg.materialize([agent_traffic], resources={
        "proxy": InterceptorProxy(config_path=str(proxied.cfg), service="m")})
    assert result.success
    assert seen["alive"] and seen["status"] == 200, seen
    assert not pid_alive(seen["pid"])  # stopped at the end of the run's execution


def _agent(url: str, session: str, *questions: str) -> subprocess.CompletedProcess[str]:
    """The tool-calling agent (tests/support/tool_agent.py) as its own process."""
    return subprocess.run([sys.executable, "-m", "tests.support.tool_agent", url, session,
                           *questions], capture_output=True, text=True, timeout=120,
                          cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})


def test_agent_traffic_is_captured_as_atif_steps(proxied: Proxied) -> None:
    done = _agent(proxied.url, "agent-cap", f"My key is {SECRET}. What is 2+3?", "And 4+4?")
    assert done.returncode == 0, done.stderr
    said = [m for m in json.loads(done.stdout) if m["role"] == "assistant"]
    records = list(read_capture(proxied.capture, "agent-cap"))
    assert [r["turn"] for r in records] == [1, 2] and all(r["status"] == 200 for r in records)
    # the request as the agent sent it (tools included), before the chain added its system
    # message or dropped max_tokens
    first = records[0]["request"]
    assert first["tools"][0]["function"]["name"] == "add" and first["tool_choice"]
    assert first["messages"][0]["content"] == "You can add numbers with the add tool."
    steps = captured_steps(proxied.capture, "agent-cap")
    assert [s["source"] for s in steps] == ["system", "user", "agent", "user", "agent"]
    assert [s["step_id"] for s in steps] == [1, 2, 3, 4, 5]
    assert [s["message"] for s in steps if s["source"] == "agent"] == [m["content"] for m in said]
    assert steps[3]["message"] == "And 4+4?"
    for step, rec in zip([s for s in steps if s["source"] == "agent"], records, strict=True):
        assert step["metrics"] == {k: rec["usage"][k] for k in ("prompt_tokens", "completion_tokens")}
        assert step["extra"]["status"] == 200 and step["extra"]["latency_ms"] > 0
    # the service's key, even where the agent's own text carried it, is not in the file
    text = proxied.capture.read_text()
    assert SECRET not in text and "My key is" in text


def test_a_refused_turn_is_captured_with_its_status(proxied: Proxied) -> None:
    # turn_counter allows 3 turns a session: the agent's fourth request is refused (429)
    done = _agent(proxied.url, "agent-over", "What is 1+1?", "Again?", "Once more?", "Last?")
    assert done.returncode == 1 and "429" in done.stderr
    steps = captured_steps(proxied.capture, "agent-over")
    agents = [s for s in steps if s["source"] == "agent"]
    assert [s["extra"]["status"] for s in agents] == [200, 200, 200, 429]
    assert agents[-1]["message"] == "" and "turn budget exhausted" in agents[-1]["extra"]["error"]
    assert captured_steps(proxied.capture, "no-such-session") == []
