"""The chain's build-time shortcuts keep every interceptor's behaviour: hooks a config
leaves idle are left out, the plain (all-sync) stages answer like the general ones, and
the cheap pre-checks (`payload_modifier`'s single key, `reasoning`'s substring test, the
inlined usage lookups) still act whenever their condition appears."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web

from nel_resources.config import ServiceConfig
from nel_resources.model_client import ModelError
from nel_resources.proxy import interceptor
from nel_resources.proxy.env import ChainEnv
from nel_resources.proxy.registry import build
from nel_resources.proxy.service_client import client_for_service
from nel_resources.proxy.streams import COUNTED_USAGE
from nel_resources.proxy.types import ProxyRequest, ProxyResponse, RequestContext
from nel_resources.reference_server import start_reference_server
from tests.support.aiohttp_app import serving
from tests.support.reference import reset_server_stats, server_stats


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    proc, url = start_reference_server(record_bodies=50)
    try:
        yield url
    finally:
        proc.stop()


def _svc(url: str, interceptors: list[dict[str, Any]], **extra: Any) -> ServiceConfig:
    return ServiceConfig.model_validate({"type": "api", "url": url, "model": "tiny",
                                         "max_retries": 0, "interceptors": interceptors, **extra})


def _run(svc: ServiceConfig, calls: list[dict[str, Any]]) -> tuple[list[Any], dict[str, Any]]:
    """Each call's answer (or error), and the chain's stats after them."""
    async def go() -> tuple[list[Any], dict[str, Any]]:
        out = []
        async with client_for_service(svc) as client:
            assert client.chain is not None
            for c in calls:
                try:
                    out.append(await client.generate(**c))
                except ModelError as exc:
                    out.append(exc)
            return out, client.chain.stats()
    return asyncio.run(go())


def _bodies(url: str) -> list[dict[str, Any]]:
    return server_stats(url)["bodies"]


def test_idle_hooks_are_left_out_and_the_active_ones_still_act(server: str) -> None:
    reset_server_stats(server)
    ic = [{"name": "drop_params", "config": {"params": []}},
          {"name": "modify_tools", "config": {}},
          {"name": "payload_modifier", "config": {}},
          {"name": "drop_params", "config": {"params": ["max_tokens"]}}]
    svc = _svc(server, ic, generation={"max_tokens": 5, "temperature": 0.5})
    client = client_for_service(svc)
    assert client.chain is not None and client.chain.plain
    # four links, one request hook that runs: the idle ones cost a request nothing
    assert len(client.chain.links) == 4 and len(client.chain._on_request) == 1
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}}}]
    _run(svc, [{"messages": [{"role": "user", "content": "q"}], "overrides": {"tools": tools}}])
    [body] = _bodies(server)
    assert "max_tokens" not in body and body["temperature"] == 0.5
    assert body["tools"] == tools  # the idle modify_tools left them as they were


def test_a_configured_payload_modifier_is_never_idle() -> None:
    for cfg in ({"params_to_add": {"a": 1}}, {"headers_to_add": {"X-A": "1"}},
                {"headers_to_remove": ["x-b"]}, {"params_to_remove": ["k"]}):
        assert build("payload_modifier", cfg, ChainEnv()).idle_hooks == ()
    assert build("modify_tools", {"add_properties": {"p": {"type": "string"}}}, ChainEnv()).idle_hooks == ()


@pytest.mark.parametrize("config", [
    {"params_to_rename": {"old": "new"}},                        # one key: a substring test
    {"params_to_rename": {"old": "new"}, "params_to_remove": ["gone"]},  # several: the regex
])
def test_payload_modifier_acts_whenever_its_key_appears(server: str, config: dict[str, Any]) -> None:
    reset_server_stats(server)
    svc = _svc(server, [{"name": "payload_modifier", "config": config}])
    msgs = [{"role": "user", "content": 'the text says "old": 1 and that is no key'}]
    _run(svc, [{"messages": msgs},
               {"messages": msgs, "overrides": {"extra": {"old": 2, "keep": 3}, "gone": 4}},
               {"messages": msgs, "overrides": {"old": 5}}])
    quiet, deep, top = _bodies(server)
    assert quiet["messages"] == msgs  # a string value that quotes the key is left alone
    assert deep["extra"] == {"new": 2, "keep": 3}
    assert ("gone" in deep) == ("params_to_remove" not in config)
    assert top["new"] == 5 and "old" not in top


def _reasoning_out(message: dict[str, Any]) -> dict[str, Any]:
    r = build("reasoning", {}, ChainEnv())
    resp = r.on_response(ProxyResponse(200, {"choices": [{"message": message}]}))
    assert isinstance(resp.body, dict)
    return resp.body["choices"][0]["message"]


def test_reasoning_splits_only_a_leading_think_block() -> None:
    assert _reasoning_out({"content": " \n<think>plan</think>\n42"}) == {
        "content": "42", "reasoning_content": "plan"}
    assert _reasoning_out({"content": "<think>cut off"}) == {"content": "", "reasoning_content": "cut off"}
    # a mention further on, or none: the answer is left whole
    assert _reasoning_out({"content": "42, not <think>x</think>"}) == {"content": "42, not <think>x</think>"}
    assert _reasoning_out({"content": "42"}) == {"content": "42"}
    assert _reasoning_out({"content": "42", "reasoning": "r"}) == {"content": "42", "reasoning_content": "r"}


def test_usage_counters_read_the_body_or_a_streams_count() -> None:
    stats = build("response_stats", {"every": 1000}, ChainEnv())
    tokens = build("log_tokens", {}, ChainEnv())
    whole = ProxyResponse(200, {"usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}})
    counted = ProxyResponse(200, {"choices": []}, ctx=RequestContext(extra={COUNTED_USAGE: {"completion_tokens": 5}}))
    for resp in (whole, counted, ProxyResponse(502, b"upstream down")):
        stats.on_response(resp)
        tokens.on_response(resp)
    assert stats.stats()["response_tokens"] == 7 + 5
    assert stats.stats()["responses_by_status"] == {"200": 2, "502": 1}
    assert tokens.stats() == {"logged_prompt_tokens": 3, "logged_completion_tokens": 4 + 5,
                              "logged_total_tokens": 7}


_seen_log: list[str] = []


@interceptor("test_fast:answer_here")
def _answer_here(content: str = "from the chain") -> Any:
    class AnswerHere:
        def on_request(self, req: ProxyRequest) -> ProxyRequest | ProxyResponse:
            if req.ctx.session_id == "short":
                return ProxyResponse(200, {"choices": [{"message": {"role": "assistant", "content": content},
                                                        "finish_reason": "stop"}]}, 0.0, 0, req.ctx)
            return req
    return AnswerHere()


@interceptor("test_fast:seen")
def _seen() -> Any:
    class Seen:
        def on_response(self, resp: ProxyResponse) -> ProxyResponse:
            _seen_log.append(str(resp.ctx.session_id))
            return resp
    return Seen()


@interceptor("test_fast:slow_seen")
def _slow_seen() -> Any:
    class SlowSeen:
        async def on_response(self, resp: ProxyResponse) -> ProxyResponse:
            await asyncio.sleep(0)
            _seen_log.append(f"async {resp.ctx.session_id}")
            return resp
    return SlowSeen()


@pytest.mark.parametrize("observer", ["test_fast:seen", "test_fast:slow_seen"])
def test_an_answer_from_a_request_hook_skips_the_endpoint_in_both_stage_kinds(
        server: str, observer: str) -> None:
    reset_server_stats(server)
    _seen_log.clear()
    svc = _svc(server, [{"name": "test_fast:answer_here"}, {"name": observer}])
    assert client_for_service(svc).chain.plain == (observer == "test_fast:seen")  # type: ignore[union-attr]
    msgs = [{"role": "user", "content": "q"}]
    (short, sent), _ = _run(svc, [{"messages": msgs, "session_id": "short"},
                                  {"messages": msgs, "session_id": "long"}])
    assert short.content == "from the chain" and sent.content != "from the chain"
    assert server_stats(server)["total_requests"] == 1  # only the second reached the model
    prefix = "async " if observer == "test_fast:slow_seen" else ""
    assert _seen_log == [f"{prefix}short", f"{prefix}long"]  # the response hook saw both


def test_the_endpoints_extra_body_and_headers_reach_the_server_with_a_plain_chain() -> None:
    """nel's client runs a plain chain's stages itself around its transport: what the
    `endpoint` adds (body fields, headers) still goes out, at a real HTTP server."""
    seen: list[tuple[dict[str, str], dict[str, Any]]] = []

    async def go() -> tuple[Any, bool]:
        async def chat(request: web.Request) -> web.Response:
            seen.append((dict(request.headers), await request.json()))
            return web.json_response({"choices": [{"message": {"role": "assistant", "content": "4"},
                                                   "finish_reason": "stop"}], "model": "tiny"})
        async with serving("/v1/chat/completions", chat) as port:
            svc = _svc(f"http://127.0.0.1:{port}/v1", [
                {"name": "endpoint", "config": {"extra_body": {"seed": 7}, "extra_headers": {"X-Extra": "yes"}}},
                {"name": "system_message", "config": {"system_message": "S"}}])
            async with client_for_service(svc) as client:
                assert client.chain is not None
                return await client.generate([{"role": "user", "content": "q"}]), client.chain.plain

    resp, plain = asyncio.run(go())
    assert plain and resp.content == "4"
    [(headers, body)] = seen
    assert headers["X-Extra"] == "yes" and body["seed"] == 7
    assert body["messages"][0] == {"role": "system", "content": "S"}
