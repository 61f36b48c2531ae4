"""NeMo Evaluator 0.3.0's interceptors `consolidate_system`, `reasoning_replay`, `streaming`
and `http_pairs_dump` in nel's chain, side by side with 0.3.0's own: the same requests go
through `nel proxy` and through 0.3.0's adapter proxy (its Python 3.12 venv), each in
front of the same reference server, and what reaches the server and the client is
compared. Where nel differs on purpose (docs/explanation/differences.md), the test says so.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nel_resources.proxy import registry
from nel_resources.proxy.server import start_proxy
from nel_resources.reference_server import start_reference_server
from tests.support.peer_adapter import peer_adapter_proxy
from tests.support.reference import http_json, reset_server_stats, server_stats
from tests.support.waiting import wait_for

SECRET = "sk-pairs-secret-5150"
ANSWERS = [
    {"match": "apples", "content": "Seven apples.", "reasoning": "Three plus four is seven."},
    {"match": "pears", "content": "Two pears.", "reasoning": "One and one make two."},
]


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    # Answers carry `reasoning_content`; a prompt with FAILME is refused with a 503.
    proc, url = start_reference_server(answers=ANSWERS, reasoning_mode="field", record_bodies=50,
                                       fault_match="FAILME", fail_rate=1.0, fail_status=503,
                                       fail_attempts=1000)
    try:
        yield url
    finally:
        proc.stop()


@dataclass
class Side:
    """One tool's proxy: where to post a path, optionally within a session."""

    name: str
    root: str  # the URL a path below `/v1` goes under (nel: `.../v1`; 0.3.0: its root)
    session_root: str  # the same with `{session}` to fill in

    def url(self, path: str, session: str | None = None) -> str:
        return (self.session_root.format(session=session) if session else self.root) + path


def _nel_config(tmp: Path, upstream: str, specs: list[dict[str, Any]]) -> Path:
    cfg = tmp / "nel.yaml"
    cfg.write_text(json.dumps({
        "services": {"m": {"type": "api", "url": upstream, "model": "tiny", "api_key": SECRET,
                           "max_retries": 0, "interceptors": specs}},
        "benchmarks": [{"name": "gsm8k"}]}))
    return cfg


@contextmanager
def both(tmp: Path, upstream: str, specs: list[dict[str, Any]],
         peer_specs: list[dict[str, Any]] | None = None) -> Iterator[tuple[Side, Side]]:
    """0.3.0's proxy and `nel proxy`, each running `specs`, in front of `upstream`."""
    with peer_adapter_proxy(upstream, peer_specs or specs, api_key=SECRET, cwd=tmp) as peer_url:
        proc, nel_url = start_proxy(_nel_config(tmp, upstream, specs), "m")
        try:
            nel_root = nel_url.removesuffix("/v1")
            yield (Side("nemo-evaluator", peer_url, peer_url + "/s/{session}"),
                   Side("nel", nel_url, nel_root + "/s/{session}/v1"))
        finally:
            proc.stop()


def _post(side: Side, path: str, body: dict[str, Any], session: str | None = None) -> tuple[int, Any]:
    status, _, data = http_json("POST", side.url(path, session), body, timeout=60)
    return status, data


def _through(side: Side, upstream: str, requests: list[tuple[str, dict[str, Any], str | None]]
             ) -> tuple[list[tuple[int, Any]], list[dict[str, Any]]]:
    """Each request through `side` in turn: the answers, and the bodies the server got."""
    reset_server_stats(upstream)
    answers = [_post(side, path, body, session) for path, body, session in requests]
    return answers, server_stats(upstream)["bodies"]


def _chat(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": "tiny", "messages": list(messages), **extra}


def _m(role: str, content: Any) -> dict[str, Any]:
    return {"role": role, "content": content}


def test_consolidate_system_sends_what_nemo_evaluator_sends(tmp_path: Path, upstream: str) -> None:
    requests = [
        ("/chat/completions", _chat(_m("system", "Be exact."), _m("user", "apples?"),
                                    _m("assistant", "Seven."), _m("system", "Now be brief."),
                                    _m("user", "pears?")), None),
        ("/chat/completions", _chat(_m("user", "apples?"), _m("system", [
            {"type": "text", "text": "Part one."}, {"type": "text", "text": "Part two."}]),
            _m("user", "pears?")), None),
        ("/chat/completions", _chat(_m("system", "Only first."), _m("user", "apples?")), None),
        ("/chat/completions", _chat(_m("user", "apples?"), _m("system", ""), _m("user", "pears?")), None),
    ]
    specs = [{"name": "consolidate_system", "config": {"separator": "\n--\n"}}]
    with both(tmp_path, upstream, specs) as (peer, nel):
        peer_answers, peer_bodies = _through(peer, upstream, requests)
        nel_answers, nel_bodies = _through(nel, upstream, requests)
    assert [s for s, _ in peer_answers] == [s for s, _ in nel_answers] == [200] * 4
    assert [b["messages"] for b in nel_bodies] == [b["messages"] for b in peer_bodies]
    first, second, third, fourth = (b["messages"] for b in nel_bodies)
    assert first == [_m("system", "Be exact.\n--\nNow be brief."), _m("user", "apples?"),
                     _m("assistant", "Seven."), _m("user", "pears?")]
    assert second[0] == _m("system", "Part one.\nPart two.") and len(second) == 3
    assert third == requests[2][1]["messages"]  # one system message, first: as sent
    assert fourth == [_m("user", "apples?"), _m("user", "pears?")]  # an empty one is dropped


@pytest.mark.parametrize("mode", ["think_tags", "native", "both"])
def test_reasoning_replay_sends_what_nemo_evaluator_sends(tmp_path: Path, upstream: str, mode: str) -> None:
    specs = [{"name": "reasoning_replay", "config": {"mode": mode}}]
    turn2 = _chat(_m("user", "apples?"), _m("assistant", "Seven apples."), _m("user", "and pears?"))
    requests = [
        ("/chat/completions", _chat(_m("user", "apples?")), "a1"),  # the answer's reasoning is kept
        ("/chat/completions", turn2, "a1"),  # the agent dropped it: put back
        ("/chat/completions", turn2, "b2"),  # another session: nothing to put back
    ]
    with both(tmp_path, upstream, specs) as (peer, nel):
        peer_answers, peer_bodies = _through(peer, upstream, requests)
        nel_answers, nel_bodies = _through(nel, upstream, requests)
    assert peer_answers[0][1]["choices"][0]["message"]["reasoning_content"] == "Three plus four is seven."
    assert [s for s, _ in nel_answers] == [s for s, _ in peer_answers] == [200] * 3
    assert [b["messages"] for b in nel_bodies] == [b["messages"] for b in peer_bodies]
    replayed = nel_bodies[1]["messages"][1]
    if mode in ("think_tags", "both"):
        assert replayed["content"] == "<think>Three plus four is seven.</think>\nSeven apples."
    if mode in ("native", "both"):
        assert replayed["reasoning_content"] == "Three plus four is seven."
    assert nel_bodies[2]["messages"][1] == _m("assistant", "Seven apples.")


def _whole(answer: dict[str, Any]) -> dict[str, Any]:
    """The parts of a whole answer both tools build from a stream."""
    return {"object": answer["object"], "model": answer["model"], "usage": answer.get("usage"),
            "choices": [{k: c[k] for k in ("index", "message", "finish_reason")}
                        for c in answer["choices"]]}


def test_streaming_answers_whole_as_nemo_evaluator_does(tmp_path: Path, upstream: str) -> None:
    requests = [
        ("/chat/completions", _chat(_m("user", "apples?"), stream=True), None),
        ("/chat/completions", _chat(_m("user", "pears?"), stream=True,
                                    stream_options={"include_usage": False}), "c3"),
        ("/chat/completions", _chat(_m("user", "FAILME please"), stream=True), None),
    ]
    with both(tmp_path, upstream, [{"name": "streaming"}]) as (peer, nel):
        peer_answers, peer_bodies = _through(peer, upstream, requests)
        nel_answers, nel_bodies = _through(nel, upstream, requests)
        # a streamed text completion: nel collects its text (0.3.0 drops it: a deliberate
        # difference), the same text a non-streamed request gets
        status, plain = _post(nel, "/completions", {"model": "tiny", "prompt": "apples?"})
        assert status == 200
        status, streamed = _post(nel, "/completions", {"model": "tiny", "prompt": "apples?", "stream": True})
        assert status == 200 and streamed["object"] == "text_completion"
        assert streamed["choices"][0]["text"] == plain["choices"][0]["text"] == "Seven apples."
        status, peer_text = _post(peer, "/completions", {"model": "tiny", "prompt": "apples?", "stream": True})
        assert status == 200 and peer_text["choices"][0]["message"]["content"] == ""
    # what the server got: the same streamed requests, asking for the usage chunk unless told not to
    assert nel_bodies == peer_bodies
    assert nel_bodies[0]["stream_options"] == {"include_usage": True}
    # what the client got: one JSON answer each, the same
    assert [s for s, _ in nel_answers] == [s for s, _ in peer_answers] == [200, 200, 503]
    for (_, mine), (_, theirs) in zip(nel_answers[:2], peer_answers[:2], strict=True):
        assert _whole(mine) == _whole(theirs)
    first = nel_answers[0][1]["choices"][0]["message"]
    assert first == {"role": "assistant", "content": "Seven apples.",
                     "reasoning_content": "Three plus four is seven."}
    assert nel_answers[0][1]["usage"]["completion_tokens"] > 0 and "usage" not in nel_answers[1][1]


def _read(path: Path, answers: int) -> dict[str, Any] | None:
    """The dump once it counts `answers` answers (the writer thread writes it behind)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if sum(data["metrics"].values()) == answers else None


def test_http_pairs_dump_writes_what_nemo_evaluator_writes(tmp_path: Path, upstream: str) -> None:
    def specs(name: str) -> list[dict[str, Any]]:
        return [{"name": "system_message", "config": {"system_message": "Be brief."}},
                {"name": "http_pairs_dump", "config": {"dump_path": str(tmp_path / name), "first_n": 2}}]

    requests = [("/chat/completions", _chat(_m("user", "apples?")), "d1"),
                ("/chat/completions", _chat(_m("user", "FAILME now")), None),
                ("/chat/completions", _chat(_m("user", "pears?")), None),
                ("/chat/completions", _chat(_m("user", f"pears? my key is {SECRET}")), None)]
    with both(tmp_path, upstream, specs("nel.json"), specs("peer.json")) as (peer, nel):
        _through(peer, upstream, requests)
        _through(nel, upstream, requests)
        theirs = wait_for(lambda: _read(tmp_path / "peer.json", 4), timeout=60, what="0.3.0's dump")
        mine = wait_for(lambda: _read(tmp_path / "nel.json", 4), timeout=60, what="nel's dump")
    # the same counts and the same pairs: the first two, then every failure
    assert mine["metrics"] == theirs["metrics"] == {"200": 3, "503": 1}
    assert [p["response"]["status"] for p in mine["pairs"]] == [200, 503]
    assert [p["response"]["status"] for p in theirs["pairs"]] == [200, 503]
    for m, t in zip(mine["pairs"], theirs["pairs"], strict=True):
        assert m["request"]["body"] == t["request"]["body"]  # as sent: the system message in
        assert m.get("session_id") == t.get("session_id")
        assert set(m) == set(t) and set(m["response"]) == set(t["response"])
    assert mine["pairs"][0]["request"]["body"]["messages"][0] == _m("system", "Be brief.")
    assert mine["pairs"][0]["session_id"] == "d1"
    assert mine["pairs"][0]["response"]["latency_ms"] > 0
    assert "HTTP 503" in mine["pairs"][1]["response"]["body"]  # the error, as nel's client saw it
    ok_mine, ok_theirs = mine["pairs"][0]["response"]["body"], theirs["pairs"][0]["response"]["body"]
    assert ok_mine["choices"] == ok_theirs["choices"]
    # no key in nel's file: not in headers (any secret header is left out), not in bodies
    text = (tmp_path / "nel.json").read_text()
    assert SECRET not in text
    assert all("authorization" not in {h.lower() for h in p["request"]["headers"]} for p in mine["pairs"])


def test_dump_masks_secrets_in_kept_bodies(tmp_path: Path, upstream: str) -> None:
    specs = [{"name": "http_pairs_dump", "config": {"dump_path": str(tmp_path / "d.json"), "first_n": 5}}]
    proc, url = start_proxy(_nel_config(tmp_path, upstream, specs), "m")
    try:
        status, _, _ = http_json("POST", url + "/chat/completions",
                                 _chat(_m("user", f"apples? {SECRET}")), timeout=60)
        assert status == 200
        data = wait_for(lambda: _read(tmp_path / "d.json", 1), timeout=60, what="nel's dump")
    finally:
        proc.stop()
    body = data["pairs"][0]["request"]["body"]
    assert SECRET not in json.dumps(data) and "apples?" in body["messages"][0]["content"]


def test_which_interceptors_change_answers() -> None:
    """Those that can change what the model answers go into the shard fingerprint."""
    assert registry.affects_answers("consolidate_system")
    assert registry.affects_answers("reasoning_replay")
    assert registry.affects_answers("streaming")
    assert not registry.affects_answers("http_pairs_dump")
    for name in ("consolidate_system", "reasoning_replay", "streaming"):
        registry.validate(name, {})  # no required field
    registry.validate("http_pairs_dump", {"dump_path": "x.json"})


def test_shard_fingerprint_follows_what_changes_answers(tmp_path: Path) -> None:
    from nel_resources.config import load_config
    from nel_resources.specs import service_fingerprint

    def fp(specs: list[dict[str, Any]]) -> str:
        (tmp_path / "x").mkdir(exist_ok=True)
        return service_fingerprint(load_config(_nel_config(tmp_path / "x", "http://127.0.0.1:9/v1",
                                                           specs)).services["m"])

    bare = fp([])
    assert fp([{"name": "http_pairs_dump", "config": {"dump_path": "p.json"}}]) == bare
    assert fp([{"name": "reasoning_replay"}]) != bare
    assert fp([{"name": "reasoning_replay", "config": {"mode": "native"}}]) != fp([{"name": "reasoning_replay"}])
    assert fp([{"name": "consolidate_system"}]) != bare and fp([{"name": "streaming"}]) != bare


@pytest.mark.parametrize(("name", "config", "field"), [
    ("reasoning_replay", {"mode": "tags"}, "mode"),
    ("reasoning_replay", {"tag_open": ""}, None),
    ("http_pairs_dump", {}, "dump_path"),
    ("http_pairs_dump", {"dump_path": "x", "first_n": -1}, "first_n"),
    ("consolidate_system", {"separator": 3}, "separator"),
    ("streaming", {"chunk": 1}, "chunk"),
])
def test_bad_fields_are_one_line(name: str, config: dict[str, Any], field: str | None) -> None:
    from nel_resources.proxy.env import ChainEnv
    from nel_resources.proxy.fields import InterceptorConfigError

    with pytest.raises(InterceptorConfigError) as err:
        registry.build(name, config, ChainEnv())
    assert err.value.field == field and "\n" not in str(err.value) and name in str(err.value)
    assert (field or "tag_open") in str(err.value)


def test_dump_in_process_records_answers_and_given_up_requests(tmp_path: Path, upstream: str) -> None:
    """nel's own requests run the chain in-process (no proxy): the dump sees each answer and
    each request the client gave up on after its retries, and is whole once the client closes."""
    import asyncio

    from nel_resources.config import load_config
    from nel_resources.model_client import ModelError
    from nel_resources.proxy.service_client import client_for_service

    dump = tmp_path / "pairs.json"
    cfg = load_config(_nel_config(tmp_path, upstream, [
        {"name": "consolidate_system"},
        {"name": "http_pairs_dump", "config": {"dump_path": str(dump), "first_n": 1}}]))

    async def run() -> BaseException | None:
        async with client_for_service(cfg.services["m"]) as client:
            await client.generate([_m("user", "apples?"), _m("system", "Late rule.")])
            await client.generate([_m("user", "pears?")])
            try:
                await client.generate([_m("user", "FAILME in process")])
            except ModelError as exc:
                return exc
        return None

    reset_server_stats(upstream)
    assert isinstance(asyncio.run(run()), ModelError)
    data = json.loads(dump.read_text())  # written whole when the client closed its chain
    assert data["metrics"] == {"200": 2, "503": 1}
    first, failed = data["pairs"]
    assert first["request"]["body"]["messages"][0] == _m("system", "Late rule.")  # as sent
    assert failed["response"]["status"] == 503 and failed["response"]["latency_ms"] is None
    assert failed["request"]["body"]["messages"] == [_m("user", "FAILME in process")]
    assert SECRET not in dump.read_text()


@pytest.fixture(scope="module")
def tool_upstream() -> Iterator[str]:
    # A thinking agent model: a tool call with its reasoning, then an answer.
    proc, url = start_reference_server(record_bodies=50, tool_script=[
        {"match": "weather", "turns": [
            {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}],
             "reasoning": "I should look the weather up."},
            {"content": "Sunny in Oslo."}]}])
    try:
        yield url
    finally:
        proc.stop()


TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]


def test_reasoning_replay_by_tool_call_id_as_nemo_evaluator(tmp_path: Path, tool_upstream: str) -> None:
    """An answer with tool calls is remembered by their ids; a streamed one too in nel
    (0.3.0 remembers nothing of a stream without `streaming`: a deliberate difference)."""
    call = {"id": "call_0_0", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}}
    turn2 = _chat(_m("user", "weather in Oslo?"), {"role": "assistant", "content": None, "tool_calls": [call]},
                  {"role": "tool", "tool_call_id": "call_0_0", "content": "sunny"}, tools=TOOLS)
    requests = [("/chat/completions", _chat(_m("user", "weather in Oslo?"), tools=TOOLS), "e5"),
                ("/chat/completions", turn2, "e5"),
                ("/chat/completions", _chat(_m("user", "weather in Oslo?"), tools=TOOLS, stream=True), "f6"),
                ("/chat/completions", turn2, "f6")]
    specs = [{"name": "reasoning_replay"}]
    with both(tmp_path, tool_upstream, specs) as (peer, nel):
        peer_answers, peer_bodies = _through(peer, tool_upstream, requests[:2])
        nel_answers, nel_bodies = _through(nel, tool_upstream, requests[:2])
        for answers in (nel_answers, peer_answers):
            assert answers[0][1]["choices"][0]["message"]["tool_calls"][0]["id"] == "call_0_0"
        assert [b["messages"] for b in nel_bodies] == [b["messages"] for b in peer_bodies]
        assert nel_bodies[1]["messages"][1]["content"] == "<think>I should look the weather up.</think>\n"
        # streamed first turn: nel remembers the assembled answer's reasoning
        _, peer_streamed = _through(peer, tool_upstream, requests[2:])
        status, _, text = http_json("POST", nel.url("/chat/completions", "f6"), requests[2][1], timeout=60)
        assert status == 200 and text.startswith("data: ")  # still streamed to the client
        _post(nel, "/chat/completions", turn2, "f6")
        replayed = server_stats(tool_upstream)["bodies"][-1]["messages"][1]
    assert replayed["content"] == "<think>I should look the weather up.</think>\n"
    assert peer_streamed[1]["messages"][1]["content"] is None  # 0.3.0: nothing remembered
