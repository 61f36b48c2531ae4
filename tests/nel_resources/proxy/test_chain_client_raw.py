"""nel's client through an in-process chain sends the caller's encoded body as it is when
no hook changes it, and an encoding of the changed body when one does.

A real upstream (aiohttp on 127.0.0.1) records the exact bytes it receives; the caller's
body has formatting orjson would not write back (spaces, a `\\u00e9` escape, `0.50`), so
byte-identical means nobody re-encoded it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from aiohttp import web

from nel_resources.config import ServiceConfig
from nel_resources.proxy import interceptor
from nel_resources.proxy.env import ChainEnv
from nel_resources.proxy.registry import build, validate
from nel_resources.proxy.service_client import client_for_service
from nel_resources.proxy.types import ProxyRequest
from tests.support.aiohttp_app import serving

CALLER_BODY = (b'{ "model": "tiny", "messages": [ {"role": "user", "content": "caf\\u00e9?"} ],'
               b' "temperature": 0.50, "junk": 1 }')
ANSWER = {"id": "a", "model": "tiny", "usage": {"prompt_tokens": 3, "completion_tokens": 1,
                                                 "total_tokens": 4},
          "choices": [{"index": 0, "message": {"role": "assistant", "content": "4"},
                       "finish_reason": "stop"}]}

# Hooks that read the request, or change nothing in this one, and every response-only one.
READ_ONLY = [
    {"name": "drop_params", "config": {"params": ["absent"]}},
    {"name": "payload_modifier", "config": {"params_to_rename": {"old": "new"}}},
    {"name": "modify_tools", "config": {"strip_properties": ["x"]}},
    {"name": "turn_counter", "config": {"max_turns": 1000}},
    {"name": "reasoning"},
    {"name": "response_stats"},
    {"name": "log_tokens"},
    {"name": "progress_tracking"},
]


@interceptor(affects_answers=True)
def client_raw_stamp() -> Any:
    """A user's request hook that edits the body in place and knows nothing of `raw`."""
    class Stamp:
        def on_request(self, req: Any) -> Any:
            req.body["stamped"] = True
            return req
    return Stamp()


def _send(interceptors: list[dict[str, Any]]) -> tuple[bytes, bool]:
    """The bytes the upstream received for `CALLER_BODY`, and whether the chain keeps
    `raw` bytes through its request stage."""
    seen: list[bytes] = []

    async def go() -> bool:
        async def chat(request: web.Request) -> web.Response:
            seen.append(await request.read())
            return web.json_response(ANSWER)
        async with serving("/v1/chat/completions", chat) as port:
            svc = ServiceConfig.model_validate({
                "type": "api", "url": f"http://127.0.0.1:{port}/v1", "model": "tiny",
                "max_retries": 0, "interceptors": interceptors})
            async with client_for_service(svc) as client:
                assert client.chain is not None and client.chain.plain
                resp = await client.generate(body=CALLER_BODY, repeat=0, session_id="s")
                assert resp.content == "4" and resp.total_tokens == 4
                return client.chain.raw_requests

    keeps_raw = asyncio.run(go())
    [got] = seen
    return got, keeps_raw


def test_an_unchanged_body_reaches_the_server_byte_identical() -> None:
    got, keeps_raw = _send(READ_ONLY)
    assert keeps_raw and got == CALLER_BODY


@pytest.mark.parametrize(("hook", "check"), [
    # system_message changes every body (and reports it: the chain still keeps raw)
    ({"name": "system_message", "config": {"system_message": "Be brief."}},
     lambda b: b["messages"][0] == {"role": "system", "content": "Be brief."}),
    # a reporting hook that changes this body: a present key dropped
    ({"name": "drop_params", "config": {"params": ["junk"]}}, lambda b: "junk" not in b),
    # a turn notice (turn 1 of 1 gets the last reminder)
    ({"name": "turn_counter", "config": {"max_turns": 1}},
     lambda b: b["messages"][-1]["role"] == "system" and "Turn 1 of 1" in b["messages"][-1]["content"]),
    # a user's hook that does not report its changes: the chain drops raw for it
    ({"name": f"{__name__}:client_raw_stamp"}, lambda b: b["stamped"] is True),
])
def test_a_changed_body_reaches_the_server_changed(hook: dict[str, Any], check: Any) -> None:
    got, _ = _send([hook, *READ_ONLY])
    assert got != CALLER_BODY
    body = orjson.loads(got)
    assert check(body)
    # everything no hook touched arrives as the caller wrote it
    assert body["temperature"] == 0.5 and {"role": "user", "content": "café?"} in body["messages"]


def _system(body: dict[str, Any], strategy: str) -> dict[str, Any]:
    hook = build("system_message", validate("system_message", {"system_message": "S",
                                                                "strategy": strategy}), ChainEnv())
    req = hook.on_request(ProxyRequest(body, raw=b"{}"))
    assert req.raw is None  # every body it sees changes
    return req.body


def test_system_message_puts_its_message_by_strategy_and_body_shape() -> None:
    sys_s = {"role": "system", "content": "S"}
    old = {"role": "system", "content": "old"}
    user = {"role": "user", "content": "q"}
    assert _system({"messages": [old, user]}, "prepend") == {"messages": [sys_s, old, user]}
    assert _system({"messages": [old, user]}, "append") == {"messages": [old, user, sys_s]}
    assert _system({"messages": [old, user]}, "replace") == {"messages": [sys_s, user]}
    # the Responses API: `input` as a list or a plain string
    assert _system({"input": [user]}, "prepend") == {"input": [sys_s, user]}
    assert _system({"input": "q"}, "append") == {"input": [user, sys_s]}
    # `messages` wins over `input`; a body with neither (or a non-list) gets a new list
    assert _system({"input": "x", "messages": [user]}, "prepend") == {"input": "x", "messages": [sys_s, user]}
    assert _system({"model": "m"}, "prepend") == {"model": "m", "messages": [sys_s]}
    assert _system({"messages": None}, "prepend") == {"messages": [sys_s]}


@pytest.mark.parametrize(("later", "check"), [
    ({"name": "turn_counter", "config": {"max_turns": 1}},
     lambda b: "Turn 1 of 1" in b["messages"][-1]["content"]),
    ({"name": "drop_params", "config": {"params": ["junk"]}}, lambda b: "junk" not in b),
    ({"name": f"{__name__}:client_raw_stamp"}, lambda b: b["stamped"] is True),
])
def test_a_change_after_payload_modifier_encoded_the_body_still_arrives(
        later: dict[str, Any], check: Any) -> None:
    """payload_modifier leaves its encoding of the (changed) body as `raw`; a later hook
    that changes the body again, reporting it or not, is not lost to those bytes."""
    got, _ = _send([{"name": "system_message", "config": {"system_message": "Be brief."}},
                    {"name": "payload_modifier", "config": {"params_to_rename": {"old": "new"}}},
                    later])
    body = orjson.loads(got)
    assert body["messages"][0] == {"role": "system", "content": "Be brief."} and check(body)


def test_payload_modifier_leaves_its_encoding_only_for_a_body_it_keeps() -> None:
    def pm(cfg: dict[str, Any]) -> Any:
        return build("payload_modifier", validate("payload_modifier", cfg), ChainEnv())

    rename = pm({"params_to_rename": {"old": "new"}})
    body = {"model": "m", "messages": [{"role": "user", "content": "q"}]}
    assert rename.on_request(ProxyRequest(dict(body))).raw == orjson.dumps(body)
    # bytes the request already has (an agent's) stay: they encode the body as well
    assert rename.on_request(ProxyRequest(dict(body), raw=b"{ }")).raw == b"{ }"
    # a body it changes has no bytes left
    assert rename.on_request(ProxyRequest({**body, "old": 1})).raw is None
    added = pm({"params_to_rename": {"old": "new"}, "params_to_add": {"seed": 1}})
    assert added.on_request(ProxyRequest(dict(body))).raw is None
