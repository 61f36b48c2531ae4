"""The standalone proxy in front of the real llama.cpp server (tiny stories260K model):
`drop_params` takes `max_tokens` out of what llama.cpp sees, `system_message` lengthens its
prompt, `caching` answers a repeat with no request upstream, and streams pass through.

Skipped when llama_cpp or the model is missing, failed instead under CI=true.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from nel_resources.proxy import captured_steps
from nel_resources.proxy.server import start_proxy
from tests.support.realcomponents import REPO_ROOT
from tests.support.reference import base_to_root, http_json

pytestmark = pytest.mark.llama

CONFIG = """\
services:
  llama:
    type: api
    url: {url}
    model: stories260K
    interceptors:
      - name: drop_params
        config:
          params: [max_tokens]
      - name: system_message
        config:
          system_message: You tell short stories about cats.
      - name: caching
        config:
          cache_dir: {cache}
      - name: log_tokens
benchmarks:
  - name: gsm8k
"""
ASK = {"model": "stories260K", "temperature": 0.0, "seed": 1, "max_tokens": 2,
       "messages": [{"role": "user", "content": "Once upon a time"}]}


@pytest.fixture(scope="module")
def proxy_url(llama_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("llama_proxy")
    cfg = tmp / "nel.yaml"
    cfg.write_text(CONFIG.format(url=llama_server, cache=tmp / "cache"))
    proc, url = start_proxy(Path(cfg), "llama")
    try:
        yield url
    finally:
        proc.stop()


def _post(url: str, body: dict[str, Any]) -> Any:
    status, _, data = http_json("POST", url + "/chat/completions", body, timeout=120)
    assert status == 200, data
    return data


def _upstream_requests(proxy_url: str) -> int:
    _, _, stats = http_json("GET", base_to_root(proxy_url) + "/stats")
    return stats["upstream_requests"]


def test_llama_sees_the_chain_and_caching_spares_it(llama_server: str, proxy_url: str) -> None:
    direct = _post(llama_server, ASK)
    assert direct["usage"]["completion_tokens"] <= 2 and direct["choices"][0]["finish_reason"] == "length"
    via = _post(proxy_url, ASK)
    # max_tokens never reached llama.cpp: the answer runs past 2 tokens
    assert via["usage"]["completion_tokens"] > 2, via
    # the system message is part of the prompt llama.cpp tokenised
    assert via["usage"]["prompt_tokens"] > direct["usage"]["prompt_tokens"]
    sent = _upstream_requests(proxy_url)
    again = _post(proxy_url, ASK)
    assert _upstream_requests(proxy_url) == sent and again == via


def test_llama_stream_passes_through(proxy_url: str) -> None:
    status, headers, text = http_json(
        "POST", proxy_url + "/chat/completions",
        {**ASK, "stream": True, "messages": [{"role": "user", "content": "A cat named Tom"}]},
        timeout=120)
    assert status == 200 and headers["content-type"].startswith("text/event-stream"), text
    datas = [ln[len("data: "):] for ln in text.splitlines() if ln.startswith("data: ")]
    assert datas[-1] == "[DONE]"
    chunks = [orjson.loads(d) for d in datas[:-1]]
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert len(chunks) > 3 and content.strip()  # more than 2 tokens: max_tokens was dropped


def test_llama_stream_is_logged_cached_and_replayed(proxy_url: str) -> None:
    ask = {**ASK, "stream": True, "messages": [{"role": "user", "content": "A dog named Rex"}]}

    def stream() -> list[Any]:
        status, _, text = http_json("POST", proxy_url + "/chat/completions", ask, timeout=120)
        assert status == 200, text
        datas = [ln[len("data: "):] for ln in text.splitlines() if ln.startswith("data: ")]
        assert datas[-1] == "[DONE]"
        return [orjson.loads(d) for d in datas[:-1]]

    def content(chunks: list[Any]) -> str:
        return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])

    def logged() -> int:
        _, _, stats = http_json("GET", base_to_root(proxy_url) + "/stats")
        return int(stats["stats"]["logged_completion_tokens"])

    before = logged()
    live = stream()
    # log_tokens saw the streamed answer: llama.cpp's usage chunk, or one token per chunk
    usage = [c["usage"] for c in live if c.get("usage")]
    texts = [c for c in live if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert logged() - before == (usage[-1]["completion_tokens"] if usage else len(texts)) > 0
    sent = _upstream_requests(proxy_url)
    replay = stream()
    assert _upstream_requests(proxy_url) == sent  # answered from the cache
    assert content(replay) == content(live) and content(live).strip()
    plain = _post(proxy_url, {**ask, "stream": False})  # the same answer, not streamed
    assert _upstream_requests(proxy_url) == sent
    assert plain["choices"][0]["message"]["content"] == content(live)


CAPTURE_CONFIG = """\
services:
  llama:
    type: api
    url: {url}
    model: stories260K
    interceptors:
      - name: log_tokens
benchmarks:
  - name: gsm8k
"""


def test_llama_tool_calls_are_captured_as_atif_steps(llama_server: str, tmp_path: Path) -> None:
    cfg = tmp_path / "nel.yaml"
    cfg.write_text(CAPTURE_CONFIG.format(url=llama_server))
    capture = tmp_path / "capture.jsonl"
    proc, url = start_proxy(cfg, "llama", capture_path=capture)
    try:
        # the agent forces its tool on the first turn: llama.cpp answers with a real tool call
        done = subprocess.run([sys.executable, "-m", "tests.support.tool_agent", url, "rex",
                               "What is 2+3?", "Thanks"], capture_output=True, text=True,
                              timeout=300, cwd=REPO_ROOT,
                              env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    finally:
        proc.stop()
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    [call] = said[2]["tool_calls"]
    steps = captured_steps(capture, "rex")
    assert [s["source"] for s in steps] == ["system", "user", "agent", "agent", "user", "agent"]
    first = steps[2]
    assert first["tool_calls"][0]["tool_call_id"] == call["id"]
    assert first["tool_calls"][0]["function_name"] == "add"
    args = call["function"]["arguments"]
    try:  # parsed when the model wrote valid JSON, kept as written otherwise
        expected: Any = json.loads(args)
    except ValueError:
        expected = args
    assert first["tool_calls"][0]["arguments"] == expected
    # the tool's result is the observation of the step that called it
    [result] = first["observation"]["results"]
    assert result == {"source_call_id": call["id"], "content": said[3]["content"]}
    assert [s["message"] for s in steps[3::2]] == [said[4]["content"], said[6]["content"]]
    assert all(s["metrics"]["completion_tokens"] > 0 for s in steps if s["source"] == "agent")
