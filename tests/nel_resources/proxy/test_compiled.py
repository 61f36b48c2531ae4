"""The compiled in-process chain (`proxy/compiled.py`) does what the generic one does.

Every case runs the same requests twice through nel's client against a real upstream
(aiohttp on 127.0.0.1, recording the exact bytes and headers it receives): once on the
compiled path, once with compiling turned off (the generic `Chain.before` / `Chain.after`
path), and compares what the server received, what the client got (answers and errors),
the chain's stats, the turn counts and the `nel.proxy` log lines.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import orjson
import pytest
from aiohttp import web

from nel_resources.config import ServiceConfig
from nel_resources.model_client import ChainStopError, ModelError
from nel_resources.proxy import compiled, interceptor
from nel_resources.proxy.service_client import client_for_service
from tests.support.aiohttp_app import serving

# The bench's chain (`bench/bench_interceptors.py`): every cheap interceptor on.
BENCH_CHAIN = [
    {"name": "drop_params", "config": {"params": ["junk"]}},
    {"name": "system_message", "config": {"system_message": "Be brief."}},
    {"name": "payload_modifier", "config": {"params_to_rename": {"old": "new"}}},
    {"name": "modify_tools", "config": {"strip_properties": ["x"]}},
    {"name": "turn_counter", "config": {"max_turns": 1000000}},
    {"name": "reasoning"},
    {"name": "response_stats", "config": {"every": 1000000}},
    {"name": "log_tokens"},
    {"name": "progress_tracking", "config": {"every": 1000000}},
]

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"x": {"type": "string"}, "y": {"type": "integer"}},
    "required": ["x", "y"]}}}]


def _chat(content: str, **extra: Any) -> bytes:
    return orjson.dumps({"model": "tiny", "messages": [{"role": "user", "content": content}],
                         **extra})


# Request bodies (the caller's encoded bytes) and the session each is sent under. The
# first is formatted as orjson would never write it (spaces, a `\u00e9` escape, `0.50`):
# a hook that leaves it alone must let it reach the server byte-identical.
ODD = (b'{ "model": "tiny", "messages": [ {"role": "user", "content": "caf\\u00e9?"} ],'
       b' "temperature": 0.50 }')
REQUESTS: list[tuple[bytes, str | None]] = [
    (ODD, "a"),
    (_chat("plain"), "a"),
    (_chat("with junk", junk=1, keep=2), "b"),
    (_chat("nested old", extra_body={"old": 1, "deep": [{"old": 2}]}, old=3), "b"),
    (_chat("tools", tools=TOOLS), "a"),
    (orjson.dumps({"model": "tiny", "messages": [
        {"role": "system", "content": "be kind"},
        {"role": "user", "content": [{"type": "text", "text": "parts"}]}]}), None),
    (_chat("think"), "c"),
    (_chat("unclosed"), "a"),
    (_chat("reasoning field"), None),
    (_chat("no usage"), "c"),
    (_chat("bad request"), "a"),
    (ODD, "d"),
    (_chat("plain"), None),
    (_chat("plain"), None),
    (_chat("null tools", tools=None), "e"),  # modify_tools passes them by (`is not None`)
    (_chat("tools not a list", tools={"x": 1}), "e"),
]

USAGE = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}


def _answer(last: str) -> tuple[int, bytes]:
    """The upstream's answer to a request whose last user message is `last`."""
    msg: dict[str, Any] = {"role": "assistant", "content": "4"}
    usage: dict[str, Any] | None = USAGE
    if "bad request" in last:
        return 400, b'{"error": {"message": "no such parameter"}}'
    if "think" in last:
        msg["content"] = "<think> let me see </think> 4"
    elif "unclosed" in last:
        msg["content"] = "<think> still going"
    elif "reasoning field" in last:
        msg["reasoning"] = "because"
    elif "no usage" in last:
        usage = None
    body: dict[str, Any] = {"id": "x", "model": "tiny", "choices": [
        {"index": 0, "message": msg, "finish_reason": "stop"}]}
    if usage is not None:
        body["usage"] = usage
    return 200, orjson.dumps(body)


def _last_user_text(body: dict[str, Any]) -> str:
    for m in reversed(body.get("messages") or []):
        if m.get("role") == "user":
            c = m.get("content")
            return c if isinstance(c, str) else orjson.dumps(c).decode()
    return ""


def _outcome(x: Any) -> Any:
    """What the caller got, comparable across runs (latency left out: it is timing)."""
    if isinstance(x, Exception):
        return (type(x).__name__, str(x), getattr(x, "category", None))
    return (x.content, x.reasoning_content, x.finish_reason, x.prompt_tokens,
            x.completion_tokens, x.total_tokens, x.attempts, x.cached, x.model, x.raw)


_LATENCY = re.compile(r"latency_ms=[0-9.]+")


def _run(interceptors: list[dict[str, Any]], compile_it: bool,
         monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
         requests: list[tuple[bytes, str | None]] = REQUESTS, **svc: Any) -> dict[str, Any]:
    """Everything observable of `requests` through a client with `interceptors`."""
    received: list[tuple[bytes, dict[str, str]]] = []

    async def chat(request: web.Request) -> web.Response:
        data = await request.read()
        received.append((data, {k.lower(): v for k, v in request.headers.items()
                                if k.lower() not in ("host", "content-length")}))
        status, body = _answer(_last_user_text(orjson.loads(data)))
        return web.Response(status=status, body=body, content_type="application/json")

    async def go() -> tuple[list[Any], dict[str, Any], Any, dict[str, int]]:
        async with serving("/v1/chat/completions", chat) as port:
            cfg = ServiceConfig.model_validate({
                "type": "api", "url": f"http://127.0.0.1:{port}/v1", "model": "tiny",
                "max_retries": 0, "interceptors": interceptors, **svc})
            async with client_for_service(cfg) as client:
                assert client.chain is not None
                out: list[Any] = []
                for body, session in requests:
                    try:
                        out.append(await client.generate(body=body, repeat=0, session_id=session))
                    except (ModelError, ChainStopError) as exc:
                        out.append(exc)
                # Which path ran: a case that compiles on neither would prove nothing.
                assert (client._compiled_chain is not None) is compile_it
                counter = next((lk.impl for lk in client.chain.links if lk.name == "turn_counter"),
                               None)
                turns = dict(counter.turns) if counter is not None else {}
                return out, client.chain.stats(), client.chain.names, turns

    if not compile_it:
        monkeypatch.setattr(compiled, "compile_chain", lambda chain, path: None)
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="nel.proxy"):
        out, stats, names, turns = asyncio.run(go())
    monkeypatch.undo()
    stats.pop("mean_latency_ms", None)  # timing
    logs = [_LATENCY.sub("latency_ms=*", r.getMessage()) for r in caplog.records
            if r.name == "nel.proxy"]
    return {"received": received, "answers": [_outcome(x) for x in out], "stats": stats,
            "names": names, "turns": turns, "logs": logs}


def _same(interceptors: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch,
          caplog: pytest.LogCaptureFixture, **kw: Any) -> dict[str, Any]:
    generic = _run(interceptors, False, monkeypatch, caplog, **kw)
    fast = _run(interceptors, True, monkeypatch, caplog, **kw)
    for key in generic:
        assert fast[key] == generic[key], key
    return fast


CASES: dict[str, list[dict[str, Any]]] = {
    "drop_params": [{"name": "drop_params", "config": {"params": ["junk", "keep"]}}],
    "drop_params_absent": [{"name": "drop_params", "config": {"params": ["absent"]}}],
    "system_prepend": [{"name": "system_message", "config": {"system_message": "S"}}],
    "system_append": [{"name": "system_message",
                       "config": {"system_message": "S", "strategy": "append"}}],
    "system_replace": [{"name": "system_message",
                        "config": {"system_message": "S", "strategy": "replace"}}],
    "payload_rename": [{"name": "payload_modifier", "config": {"params_to_rename": {"old": "new"}}}],
    "payload_remove_rename": [{"name": "payload_modifier", "config": {
        "params_to_remove": ["keep"], "params_to_rename": {"old": "new", "deep": "deeper"}}}],
    "payload_remove_add_headers": [{"name": "payload_modifier", "config": {
        "params_to_remove": ["old", "keep"], "params_to_add": {"extra_body": {"added": [1]}},
        "headers_to_add": {"X-Added": "1"}}}],
    "payload_headers_only": [
        {"name": "payload_modifier", "config": {"headers_to_add": {"X-A": "a", "X-B": "b"}}},
        {"name": "payload_modifier", "config": {"headers_to_remove": ["x-a"],
                                                "headers_to_rename": {"X-B": "X-C"}}}],
    "modify_tools": [{"name": "modify_tools", "config": {
        "strip_properties": ["x"], "add_properties": {"z": {"type": "number"}}}}],
    "turns_threshold_system": [{"name": "turn_counter", "config": {"max_turns": 4}}],
    "turns_periodic_user": [{"name": "turn_counter", "config": {
        "max_turns": 5, "trigger": "periodic", "interval": 2, "position": "user_message",
        "every": 2}}],
    "turns_unbounded": [{"name": "turn_counter", "config": {}}],
    "reasoning": [{"name": "reasoning"}],
    "observers": [{"name": "response_stats", "config": {"every": 3}}, {"name": "log_tokens"},
                  {"name": "progress_tracking", "config": {"every": 2}}],
    "raise_client_errors": [{"name": "raise_client_errors"}, {"name": "log_tokens"}],
    "bench_chain": BENCH_CHAIN,
    "endpoint_extras": [{"name": "endpoint", "config": {"extra_body": {"seed": 7},
                                                        "extra_headers": {"X-Ep": "e"}}},
                        {"name": "payload_modifier", "config": {"headers_to_add": {"X-Ep": "hook"}}},
                        {"name": "response_stats"}],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_compiled_and_generic_paths_agree(case: str, monkeypatch: pytest.MonkeyPatch,
                                          caplog: pytest.LogCaptureFixture) -> None:
    _same(CASES[case], monkeypatch, caplog)


def test_the_cases_exercise_what_they_compare(monkeypatch: pytest.MonkeyPatch,
                                              caplog: pytest.LogCaptureFixture) -> None:
    """The comparisons above are not of runs where nothing happens: the bench's chain
    changes bodies and leaves one byte-identical, splits reasoning, counts and refuses."""
    out = _same(BENCH_CHAIN, monkeypatch, caplog)
    sent = [data for data, _ in out["received"]]
    first = orjson.loads(sent[0])
    assert first["messages"][0] == {"role": "system", "content": "Be brief."}
    assert b'"junk":' not in sent[2] and b'"keep":2' in sent[2]
    assert b'"old"' not in sent[3] and sent[3].count(b'"new"') == 3
    assert b'"x"' not in sent[4]
    assert out["answers"][6][:2] == ("4", "let me see")
    assert out["stats"]["reasoning_split"] == 3 and out["stats"]["responses"] == len(REQUESTS)
    assert out["stats"]["logged_total_tokens"] == 7 * (len(REQUESTS) - 2)
    assert out["turns"]["a"] == 5

    # A chain that leaves the odd body alone sends it byte-identical on both paths.
    out = _same(CASES["drop_params_absent"], monkeypatch, caplog)
    assert out["received"][0][0] == ODD and out["received"][11][0] == ODD
    # ... and one that changes it sends the change.
    out = _same(CASES["drop_params"], monkeypatch, caplog)
    assert out["received"][0][0] == ODD
    assert out["received"][2][0] != REQUESTS[2][0] and b'"junk":' not in out["received"][2][0]

    # Tools that are null or not a list: modify_tools leaves the body alone (sent as is).
    out = _same(CASES["modify_tools"], monkeypatch, caplog)
    assert [data for data, _ in out["received"][-2:]] == [b for b, _ in REQUESTS[-2:]]
    assert b'"x"' not in out["received"][4][0]

    # Turn budgets: reminders go into bodies, and the fifth turn of `a` is refused.
    out = _same(CASES["turns_threshold_system"], monkeypatch, caplog)
    assert any(b"turn(s) left" in data for data, _ in out["received"])
    assert out["answers"][10][0] == "ModelError" and "turn budget exhausted" in out["answers"][10][1]
    assert out["stats"]["turns_refused"] == 1 and out["logs"]

    out = _same(CASES["raise_client_errors"], monkeypatch, caplog)
    assert out["answers"][10][0] == "ChainStopError"

    out = _same(CASES["endpoint_extras"], monkeypatch, caplog)
    data, headers = out["received"][0]
    assert orjson.loads(data)["seed"] == 7 and headers["x-ep"] == "hook"

    out = _same(CASES["payload_headers_only"], monkeypatch, caplog)
    _, headers = out["received"][0]
    assert "x-a" not in headers and headers["x-c"] == "b" and "x-b" not in headers


@interceptor("compiled_test_stamp", affects_answers=True)
def _stamp() -> Any:
    """A user interceptor: the chain keeps the generic path."""
    class Stamp:
        def on_request(self, req: Any) -> Any:
            req.body["stamped"] = True
            return req
    return Stamp()


def test_what_cannot_be_compiled_keeps_the_generic_path(monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    # A user's hook, and `logging` (no `edit`/`seen`): compile_chain returns None, so both
    # runs take the generic path and agree.
    for chain in ([{"name": "compiled_test_stamp"}, {"name": "reasoning"}],
                  [{"name": "logging"}, {"name": "drop_params", "config": {"params": ["junk"]}}]):
        out = _run(chain, False, monkeypatch, caplog)
        assert out["answers"][0][0] == "4"

    from nel_resources.proxy.drop_params import DropParams

    class Loud(DropParams):  # overrides the hook only: its edit is not what runs
        def on_request(self, req: Any) -> Any:
            req.body["loud"] = True
            req.raw = None
            return req

    from nel_resources.model_client import ModelClient
    from nel_resources.proxy.chain import Chain, Link
    from nel_resources.proxy.endpoint import ClientEndpoint

    client = ModelClient("http://127.0.0.1:9/v1", model="tiny")
    ep = ClientEndpoint(client)
    assert compiled.compile_chain(Chain([Link("d", DropParams(["a"]))], ep), "/x") is not None
    assert compiled.compile_chain(Chain([Link("d", Loud(["a"]))], ep), "/x") is None
    patched = DropParams(["a"])
    patched.on_request = lambda req: req  # type: ignore[method-assign]
    assert compiled.compile_chain(Chain([Link("d", patched)], ep), "/x") is None


def test_usage_counters_keep_their_reading_of_odd_usage() -> None:
    """`total_tokens` present but null counts nothing (not the completion tokens), absent
    falls back to them; a non-int count is skipped; a dict subclass body still counts."""
    from nel_resources.proxy.log_tokens import LogTokens
    from nel_resources.proxy.response_stats import ResponseStats

    class Body(dict):  # type: ignore[type-arg]
        pass

    stats, tokens = ResponseStats(1000), LogTokens()
    for usage in ({"total_tokens": None, "completion_tokens": 3},
                  {"completion_tokens": 4, "prompt_tokens": "5"},
                  {"total_tokens": 6, "prompt_tokens": 2, "completion_tokens": 4}):
        for body in ({"usage": usage}, Body(usage=usage)):
            stats.seen(200, body, 1.0)
            tokens.seen(200, body, 1.0)
    assert stats.stats()["response_tokens"] == 2 * (4 + 6)
    assert tokens.stats() == {"logged_prompt_tokens": 2 * 2, "logged_completion_tokens": 2 * (3 + 4 + 4),
                              "logged_total_tokens": 2 * 6}


def test_both_paths_agree_under_concurrency(monkeypatch: pytest.MonkeyPatch) -> None:
    """64 requests in flight at once, sessions sharing turn budgets: the same bodies reach
    the server, the same requests are refused and the counters end the same."""
    chain = [*BENCH_CHAIN[:4], {"name": "turn_counter", "config": {"max_turns": 12}}, *BENCH_CHAIN[5:]]

    def run(compile_it: bool) -> tuple[list[bytes], list[str], dict[str, Any], dict[str, int]]:
        received: list[bytes] = []

        async def chat(request: web.Request) -> web.Response:
            data = await request.read()
            received.append(data)
            await asyncio.sleep(0)  # let others in while this one is "on the wire"
            status, body = _answer(_last_user_text(orjson.loads(data)))
            return web.Response(status=status, body=body, content_type="application/json")

        async def go() -> tuple[list[str], dict[str, Any], dict[str, int]]:
            async with serving("/v1/chat/completions", chat) as port:
                cfg = ServiceConfig.model_validate({
                    "type": "api", "url": f"http://127.0.0.1:{port}/v1", "model": "tiny",
                    "max_retries": 0, "max_concurrent": 64, "interceptors": chain})
                async with client_for_service(cfg) as client:
                    async def one(i: int) -> str:
                        try:
                            r = await client.generate(body=_chat(f"q{i % 5} think"), repeat=0,
                                                      session_id=f"s{i % 8}")
                            return f"{r.content}|{r.reasoning_content}"
                        except ModelError as exc:
                            return str(exc)
                    out = await asyncio.gather(*(one(i) for i in range(160)))
                    assert (client._compiled_chain is not None) is compile_it
                    counter = next(lk.impl for lk in client.chain.links if lk.name == "turn_counter")
                    return list(out), client.chain.stats(), dict(counter.turns)

        if not compile_it:
            monkeypatch.setattr(compiled, "compile_chain", lambda chain, path: None)
        out, stats, turns = asyncio.run(go())
        monkeypatch.undo()
        stats.pop("mean_latency_ms")
        return sorted(received), out, stats, turns

    generic, fast = run(False), run(True)
    assert fast == generic
    _, answers, stats, turns = fast
    assert stats["turns_refused"] == 160 - 8 * 12 and turns == {f"s{i}": 20 for i in range(8)}
    assert answers.count("4|let me see") == 8 * 12


def _dict_materialized(obj: Any) -> bool:
    """Whether CPython 3.11 keeps `obj`'s attributes in a dict object of its own (after
    someone read `obj.__dict__`) rather than inline: then `gc.get_referents` lists that
    dict (the attribute names as keys, their values as values) instead of the values."""
    import gc

    return any(type(r) is dict and r and all(
        type(k) is str and getattr(obj, k, r) is v for k, v in r.items())
        for r in gc.get_referents(obj))


def test_compiling_leaves_the_hooks_attributes_inline() -> None:
    """compile_chain tells a hook set on the instance from the class's own without reading
    the instance's `__dict__` (that read makes every later attribute access on it, the
    counters the compiled stages update per answer, slower for good)."""
    cfg = ServiceConfig.model_validate({"type": "api", "url": "http://127.0.0.1:9/v1",
                                        "model": "tiny", "interceptors": BENCH_CHAIN})
    client = client_for_service(cfg)
    assert client.chain is not None
    impls = [lk.impl for lk in client.chain.links]
    probe = impls[0]
    assert not _dict_materialized(probe)
    probe.__dict__  # noqa: B018 (the read this guards against)
    assert _dict_materialized(probe)  # the check can tell
    impls = impls[1:]
    assert client._runs_inline(client.chain) and client._compiled_chain is not None
    stateful = [i for i in impls if type(i).__name__ in ("ResponseStats", "LogTokens",
                                                         "ProgressTracking", "TurnCounter")]
    assert len(stateful) == 4
    assert not any(_dict_materialized(i) for i in impls)
