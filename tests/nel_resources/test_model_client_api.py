"""`ModelClient(...).chat(prompt, system=...)`: NeMo Evaluator's client API on nel's client.

Against the reference server: the request it receives (messages, sampling fields), the
`ModelResponse` fields (`total_tokens`, `raw_response`), the documented parameter ranges,
and `NEMO_API_KEY` as the key of `nemo_evaluator.engine.ModelClient`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from benchmarks.errors import NelError
from nel_resources.model_client import ModelClient, ModelResponse, NemoModelClient


def _chat(client: ModelClient, *args: Any, **kwargs: Any) -> ModelResponse:
    async def go() -> ModelResponse:
        try:
            return await client.chat(*args, **kwargs)
        finally:
            await client.close()

    return asyncio.run(go())


def test_chat_sends_the_prompt_system_and_sampling_fields(reference_server, server_stats) -> None:
    url = reference_server(answers=[{"match": "2+2", "content": "4"}])
    client = ModelClient(url, "m", temperature=0.3, max_tokens=16, top_p=0.9, seed=7,
                         stop=["\n\n"], frequency_penalty=0.5, presence_penalty=-0.5)
    resp = _chat(client, "What is 2+2?", system="Answer briefly.")
    assert resp.content == "4" and resp.model == "m"
    assert resp.total_tokens is not None
    assert resp.total_tokens == resp.prompt_tokens + resp.completion_tokens > 0
    assert resp.raw_response["choices"][0]["message"]["content"] == "4"
    stats = server_stats(url)
    assert stats["system_messages"] == {"count": 1, "last": "Answer briefly."}
    sent = stats["last_request"]
    assert sent["messages"] == [{"role": "system", "content": "Answer briefly."},
                                {"role": "user", "content": "What is 2+2?"}]
    assert {k: sent[k] for k in ("temperature", "max_tokens", "top_p", "seed", "stop",
                                 "frequency_penalty", "presence_penalty")} == {
        "temperature": 0.3, "max_tokens": 16, "top_p": 0.9, "seed": 7, "stop": ["\n\n"],
        "frequency_penalty": 0.5, "presence_penalty": -0.5}


def test_chat_with_messages(reference_server, server_stats) -> None:
    url = reference_server(answers=[{"match": "second", "content": "ok"}])
    resp = _chat(ModelClient(url, "m"), messages=[{"role": "user", "content": "first"},
                                                   {"role": "assistant", "content": "a"},
                                                   {"role": "user", "content": "second"}])
    assert resp.content == "ok"
    assert len(server_stats(url)["last_request"]["messages"]) == 3


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"temperature": 2.5}, "temperature=2.5 is out of range (0 to 2)"),
    ({"temperature": -0.1}, "temperature=-0.1 is out of range"),
    ({"top_p": 1.5}, "top_p=1.5 is out of range (0 to 1)"),
    ({"frequency_penalty": -3}, "frequency_penalty=-3 is out of range (-2 to 2)"),
    ({"presence_penalty": 2.01}, "presence_penalty=2.01 is out of range"),
    ({"max_tokens": 0}, "max_tokens=0 is out of range (at least 1)"),
    ({"max_tokens": 1.5}, "max_tokens must be an integer"),
    ({"seed": "7"}, "seed must be an integer"),
    ({"stop": [1]}, "stop must be a list of strings"),
    ({"temperature": float("nan")}, "temperature must be a number"),
    ({"timeout": 0}, "timeout must be a positive number"),
    ({"max_concurrent": 0}, "max_concurrent must be an integer >= 1"),
])
def test_parameters_are_checked_against_the_documented_ranges(kwargs: dict, says: str) -> None:
    with pytest.raises(NelError, match=f"^ModelClient: {says}".replace("(", r"\(").replace(")", r"\)")):
        ModelClient("http://127.0.0.1:9/v1", "m", **kwargs)
    with pytest.raises(NelError):
        NemoModelClient("http://127.0.0.1:9/v1", "m", **kwargs)


def test_range_edges_are_accepted() -> None:
    c = ModelClient("http://127.0.0.1:9/v1", "m", temperature=0, top_p=1.0, frequency_penalty=-2,
                    presence_penalty=2, max_tokens=1, stop="END")
    assert c.generation == {"temperature": 0, "top_p": 1.0, "frequency_penalty": -2,
                            "presence_penalty": 2, "max_tokens": 1, "stop": ["END"]}


def test_nemo_client_reads_nemo_api_key(reference_server, monkeypatch: pytest.MonkeyPatch) -> None:
    url = reference_server(require_api_key="sk-nemo-test", answers=[{"match": "hi", "content": "hello"}])
    monkeypatch.setenv("NEMO_API_KEY", "sk-nemo-test")
    client = NemoModelClient(base_url=url, model="m")
    assert client.max_concurrent == 8  # NeMo Evaluator's documented default
    assert _chat(client, "hi").content == "hello"
    monkeypatch.delenv("NEMO_API_KEY")
    with pytest.raises(NelError, match="refused"):
        _chat(NemoModelClient(base_url=url, model="m"), "hi")


def test_not_yet_supported_client_options_are_refused() -> None:
    with pytest.raises(NelError, match=r"cache_dir= .* not supported yet in nel"):
        NemoModelClient("http://127.0.0.1:9/v1", "m", cache_dir="/tmp/cache")
    with pytest.raises(NelError, match="chat_completions or responses"):
        _chat(ModelClient("http://127.0.0.1:9/v1", "m", protocol="completions"), "hi")
