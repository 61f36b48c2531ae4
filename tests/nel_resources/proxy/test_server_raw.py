"""The proxy's pass-through fast path: when no hook changes a body, the agent's request
bytes go upstream as they came and the upstream's answer bytes come back as they came;
a body a hook does change is encoded again, so the other side sees the change.

A real upstream (aiohttp on 127.0.0.1) records the exact bytes it receives and answers
with fixed bytes that a re-encode could not reproduce (spaces, a `\\u00e9` escape, `1.50`),
the proxy (`ProxyServer` on its own HTTP transport) runs in the same loop, and the agent
is a real HTTP client.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from aiohttp import ClientSession, web

from nel_resources.config import ServiceConfig
from nel_resources.proxy import interceptor
from nel_resources.proxy.http_server import start_server
from nel_resources.proxy.server import ProxyServer
from nel_resources.proxy.service_client import client_for_service
from tests.support.aiohttp_app import serving

# Formatting orjson would not write back: byte-identical means nobody re-encoded it.
PLAIN_ANSWER = (b'{ "id": "a1", "model": "tiny",\n  "choices": [ {"index": 0, "message": '
                b'{"role": "assistant", "content": "caf\\u00e9 4"}, "finish_reason": "stop"} ],'
                b' "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},'
                b' "score": 1.50 }')
THINK_ANSWER = PLAIN_ANSWER.replace(b"caf\\u00e9 4", b"<think>add them</think> caf\\u00e9 4")
AGENT_BODY = (b'{ "model": "tiny", "messages": [ {"role": "user", "content": "caf\\u00e9?"} ],'
              b' "temperature": 0.50 }')

# Every built-in hook that only reads, or changes nothing in this request and answer.
READ_ONLY = [
    {"name": "drop_params", "config": {"params": ["junk"]}},
    {"name": "payload_modifier", "config": {"params_to_rename": {"old": "new"}}},
    {"name": "modify_tools", "config": {"strip_properties": ["x"]}},
    {"name": "turn_counter", "config": {"max_turns": 1000}},
    {"name": "reasoning"},
    {"name": "response_stats"},
    {"name": "log_tokens"},
    {"name": "progress_tracking"},
]


@interceptor(affects_answers=True)
def stamp() -> Any:
    """A user's hook that edits the answer in place and knows nothing of `raw`."""
    class Stamp:
        def on_response(self, resp: Any) -> Any:
            if isinstance(resp.body, dict):
                resp.body["stamped"] = True
            return resp
    return Stamp()


@interceptor(affects_answers=True)
def async_tag() -> Any:
    """A user's async hooks: the chain is not plain, so the proxy sends through `chain.run`."""
    class Tag:
        async def on_request(self, req: Any) -> Any:
            req.body["tag"] = "async"
            req.raw = None
            return req

        async def on_response(self, resp: Any) -> Any:
            if isinstance(resp.body, dict):
                resp.body["tagged"] = True
                resp.raw = None
            return resp
    return Tag()


ROUTES: list[bool] = []  # per exchange: whether the proxy sent inline (a plain chain)


async def _exchange(interceptors: list[dict[str, Any]], agent_body: bytes, answer: bytes
                    ) -> tuple[bytes, bytes]:
    """(what the upstream received, what the agent received) for one request."""
    received: list[bytes] = []

    async def chat(request: web.Request) -> web.Response:
        received.append(await request.read())
        return web.Response(body=answer, content_type="application/json")

    async with serving("/v1/chat/completions", chat) as port:
        svc = ServiceConfig.model_validate({"type": "api", "url": f"http://127.0.0.1:{port}/v1",
                                            "model": "tiny", "max_retries": 0,
                                            "interceptors": interceptors})
        proxy = ProxyServer(client_for_service(svc))
        ROUTES.append(proxy._direct is not None)
        await proxy.open()
        listener = await start_server(proxy.handle, 0)
        proxy_port = listener.sockets[0].getsockname()[1]
        try:
            async with ClientSession() as agent, agent.post(
                    f"http://127.0.0.1:{proxy_port}/v1/chat/completions", data=agent_body,
                    headers={"Content-Type": "application/json"}) as resp:
                assert resp.status == 200
                got = await resp.read()
        finally:
            listener.close()
            await proxy.close()
    [sent] = received
    return sent, got


def _run(interceptors: list[dict[str, Any]], agent_body: bytes = AGENT_BODY,
         answer: bytes = PLAIN_ANSWER) -> tuple[bytes, bytes]:
    return asyncio.run(_exchange(interceptors, agent_body, answer))


@pytest.mark.parametrize("interceptors", [[], READ_ONLY], ids=["no-interceptors", "read-only"])
def test_unchanged_bodies_pass_byte_identical(interceptors: list[dict[str, Any]]) -> None:
    sent, got = _run(interceptors)
    assert sent == AGENT_BODY
    assert got == PLAIN_ANSWER


def test_a_request_a_hook_changes_is_encoded_again() -> None:
    sent, got = _run([{"name": "system_message", "config": {"system_message": "Be brief."}},
                      *READ_ONLY])
    body = orjson.loads(sent)
    assert body["messages"] == [{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": "café?"}]
    assert body["temperature"] == 0.5
    assert got == PLAIN_ANSWER  # the answer, untouched, still passes as it came


def test_a_dropped_param_and_a_filled_in_model_are_sent() -> None:
    agent = b'{"messages": [{"role": "user", "content": "q"}], "junk": 1}'
    sent, _ = _run(READ_ONLY, agent)
    assert orjson.loads(sent) == {"messages": [{"role": "user", "content": "q"}], "model": "tiny"}
    sent, _ = _run([], b'{"messages": [] }')
    assert orjson.loads(sent) == {"messages": [], "model": "tiny"}


def test_an_answer_a_reporting_hook_changes_is_encoded_again() -> None:
    """`reasoning` keeps the fast path on for the chain, and drops it for the answer it splits."""
    sent, got = _run(READ_ONLY, answer=THINK_ANSWER)
    assert sent == AGENT_BODY
    msg = orjson.loads(got)["choices"][0]["message"]
    assert msg == {"role": "assistant", "content": "café 4", "reasoning_content": "add them"}


def test_a_hook_that_does_not_report_its_changes_turns_the_fast_path_off() -> None:
    name = f"{__name__}:stamp"
    _, got = _run([*READ_ONLY, {"name": name}])
    answer = orjson.loads(got)
    assert answer["stamped"] is True
    assert answer["choices"][0]["message"]["content"] == "café 4"


def test_both_routes_through_the_proxy_carry_changes_both_ways() -> None:
    # A plain chain is run inline by the proxy; one with an async hook through `chain.run`:
    # either way a changed request arrives changed and a changed answer comes back changed.
    ROUTES.clear()
    sent, got = _run([{"name": "system_message", "config": {"system_message": "Be brief."}},
                      {"name": f"{__name__}:stamp"}])
    assert orjson.loads(sent)["messages"][0] == {"role": "system", "content": "Be brief."}
    assert orjson.loads(got)["stamped"] is True
    sent, got = _run([{"name": f"{__name__}:async_tag"}, *READ_ONLY])
    assert orjson.loads(sent)["tag"] == "async"
    assert orjson.loads(got)["tagged"] is True
    assert orjson.loads(got)["choices"][0]["message"]["content"] == "café 4"
    assert ROUTES == [True, False]
