"""Each interceptor's effect, checked at a real reference server process (the bodies it
received) and in what nel's client returns."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from nel_resources.config import ServiceConfig
from nel_resources.model_client import ChainStopError, ModelError
from nel_resources.proxy.service_client import client_for_service
from nel_resources.reference_server import start_reference_server
from tests.support.aiohttp_app import serving
from tests.support.reference import reset_server_stats, server_stats

KEY = "sk-proxy-test-0b7d4e21c9"


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    proc, url = start_reference_server(record_bodies=200)
    try:
        yield url
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def think_server() -> Iterator[str]:
    proc, url = start_reference_server(reasoning_mode="think", record_bodies=50)
    try:
        yield url
    finally:
        proc.stop()


def _svc(url: str, interceptors: list[dict[str, Any]], **extra: Any) -> ServiceConfig:
    return ServiceConfig.model_validate({"type": "api", "url": url, "model": "tiny",
                                         "max_retries": 0, "interceptors": interceptors, **extra})


def _run(svc: ServiceConfig, calls: list[dict[str, Any]]) -> list[Any]:
    async def go() -> list[Any]:
        out = []
        async with client_for_service(svc) as client:
            for c in calls:
                try:
                    out.append(await client.generate(**c))
                except ModelError as exc:
                    out.append(exc)
        return out
    return asyncio.run(go())


def _bodies(url: str) -> list[dict[str, Any]]:
    return server_stats(url)["bodies"]


def test_request_interceptors_change_what_the_server_receives(server: str) -> None:
    reset_server_stats(server)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "string"}, "secret": {"type": "string"}},
        "required": ["a", "secret"]}}}]
    svc = _svc(server, [
        {"name": "drop_params", "config": {"params": ["max_tokens"]}},
        {"name": "system_message", "config": {"system_message": "Be brief.", "strategy": "replace"}},
        {"name": "payload_modifier", "config": {
            "params_to_remove": ["junk"], "params_to_rename": {"old_name": "new_name"},
            "params_to_add": {"chat_template_kwargs": {"thinking": True}}}},
        {"name": "modify_tools", "config": {"strip_properties": ["secret"],
                                            "add_properties": {"why": {"type": "string"}}}},
    ], generation={"max_tokens": 7, "temperature": 0.5})
    messages = [{"role": "system", "content": "old system"}, {"role": "user", "content": "hi"}]
    [resp] = _run(svc, [{"messages": messages, "overrides": {
        "tools": tools, "old_name": 1, "extra": {"junk": 2, "keep": 3}}}])
    assert resp.content
    [body] = _bodies(server)
    assert "max_tokens" not in body and body["temperature"] == 0.5
    assert body["messages"] == [{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": "hi"}]
    assert body["new_name"] == 1 and "old_name" not in body
    assert body["extra"] == {"keep": 3}
    assert body["chat_template_kwargs"] == {"thinking": True}
    fn = body["tools"][0]["function"]["parameters"]
    assert set(fn["properties"]) == {"a", "why"} and fn["required"] == ["a"]
    # the caller's own objects are untouched (the chain edits a copy)
    assert messages[0]["content"] == "old system" and "secret" in tools[0]["function"]["parameters"]["properties"]


def test_system_message_prepend_and_without_chain_max_tokens_is_sent(server: str) -> None:
    reset_server_stats(server)
    _run(_svc(server, [{"name": "system_message", "config": {"system_message": "S"}}],
              generation={"max_tokens": 5}), [{"messages": [{"role": "user", "content": "q"}]}])
    _run(_svc(server, [], generation={"max_tokens": 5}), [{"messages": [{"role": "user", "content": "q"}]}])
    with_chain, plain = _bodies(server)
    assert with_chain["messages"][0] == {"role": "system", "content": "S"}
    assert plain["max_tokens"] == 5 and len(plain["messages"]) == 1


def test_reasoning_moves_think_block_out_of_the_answer(think_server: str) -> None:
    raw, = _run(_svc(think_server, []), [{"messages": [{"role": "user", "content": "x"}]}])
    assert raw.content.lstrip().startswith("<think>")  # the server really sends <think>
    resp, = _run(_svc(think_server, [{"name": "reasoning"}]), [{"messages": [{"role": "user", "content": "x"}]}])
    assert "<think>" not in resp.content and resp.reasoning_content
    assert resp.content == raw.content.split("</think>", 1)[1].strip()


def test_turn_counter_stops_a_session_at_its_budget(server: str) -> None:
    reset_server_stats(server)
    svc = _svc(server, [{"name": "turn_counter", "config": {"max_turns": 2}}])
    msgs = [{"role": "user", "content": "agent step"}]
    out = _run(svc, [{"messages": msgs, "session_id": "s1"}] * 3 + [{"messages": msgs, "session_id": "s2"}])
    assert [isinstance(o, ModelError) for o in out] == [False, False, True, False]
    assert out[2].category == "interceptor" and "turn budget exhausted" in str(out[2])
    assert server_stats(server)["total_requests"] == 3  # the refused turn never left
    # turn 2 of 2 is at 100% of the budget: the model was told to finish
    assert "final answer" in _bodies(server)[1]["messages"][-1]["content"]


def test_caching_keeps_repeats_apart_and_answers_reruns_from_disk(server: str, tmp_path: Path) -> None:
    reset_server_stats(server)
    ic = [{"name": "caching", "config": {"cache_dir": str(tmp_path / "c")}}]
    msgs = [{"role": "user", "content": "cache me"}]
    calls = [{"messages": msgs, "repeat": r} for r in range(3)]
    first = _run(_svc(server, ic, temperature=0.7), calls)
    assert server_stats(server)["total_requests"] == 3  # repeats are independent draws
    second = _run(_svc(server, ic, temperature=0.7), calls)
    assert server_stats(server)["total_requests"] == 3  # a rerun costs nothing
    assert all(r.cached for r in second) and not any(r.cached for r in first)
    assert [r.content for r in second] == [r.content for r in first]
    _run(_svc(server, ic, temperature=0.9), calls[:1])  # a generation change is a new key
    assert server_stats(server)["total_requests"] == 4
    shared = [{"name": "caching", "config": {"cache_dir": str(tmp_path / "t0"),
                                             "share_temperature_zero": True}}]
    _run(_svc(server, shared, temperature=0), calls)
    assert server_stats(server)["total_requests"] == 5  # greedy repeats share one answer


def test_raise_client_errors_stops_the_run(tmp_path: Path) -> None:
    proc, url = start_reference_server(fail_always_status=400)
    try:
        msgs = [{"role": "user", "content": "q"}]
        plain, = _run(_svc(url, []), [{"messages": msgs}])
        assert isinstance(plain, ModelError) and plain.status == 400
        with pytest.raises(ChainStopError, match="raise_client_errors: the endpoint answered HTTP 400"):
            _run(_svc(url, [{"name": "raise_client_errors"}]), [{"messages": msgs}])
    finally:
        proc.stop()


def test_progress_webhook_receives_posts(server: str) -> None:
    got: list[dict[str, Any]] = []

    async def go() -> None:
        async def hook(request: web.Request) -> web.Response:
            got.append(await request.json())
            return web.json_response({"ok": True})
        async with serving("/progress", hook) as port:
            svc = _svc(server, [{"name": "progress_tracking",
                                 "config": {"webhook_url": f"http://127.0.0.1:{port}/progress", "every": 2}}])
            async with client_for_service(svc) as client:
                for i in range(5):
                    await client.generate([{"role": "user", "content": f"p{i}"}])
    asyncio.run(go())
    assert got == [{"completed": 2, "service": "tiny"}, {"completed": 4, "service": "tiny"}]


def test_logging_previews_hold_no_key(server: str, caplog: pytest.LogCaptureFixture) -> None:
    svc = _svc(server, [{"name": "logging", "config": {"max_preview": 4000}}, {"name": "log_tokens"},
                        {"name": "response_stats", "config": {"every": 1}}],
               api_key=KEY, headers={"X-Key": KEY})
    with caplog.at_level(logging.INFO, logger="nel.proxy"):
        logging.getLogger("nel.proxy").propagate = True
        _run(svc, [{"messages": [{"role": "user", "content": f"my key is {KEY}"}]}])
    text = caplog.text
    assert "request /chat/completions" in text and "response status=200" in text
    assert "tokens model=tiny" in text and "responses=1" in text
    assert KEY not in text and "my key is" in text
