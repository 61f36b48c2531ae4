"""The reference server as an agent's model: scripted tool-call turns answered as a stream
(OpenClaw streams every request), and `match_conversation` (OpenClaw appends a
runtime-context user message after the task, so the last user message is not the task)."""

from __future__ import annotations

from typing import Any

import orjson

from nel_resources.proxy.streams import StreamAssembler
from nel_resources.reference_server import ReferenceApp, ServerConfig, ToolScript

SCRIPT = [{"match": "capital of France", "turns": [
    {"tool_calls": [{"name": "exec", "arguments": {"command": "echo Paris"}}]},
    {"content": "It is {last_tool}."}]}]
CONTEXT = {"role": "user", "content": [{"type": "text", "text": "<runtime context>"}]}


def app(**opts: Any) -> ReferenceApp:
    a = ReferenceApp(ServerConfig(**opts))
    a.script = ToolScript(SCRIPT)
    return a


def post(a: ReferenceApp, messages: list[dict[str, Any]], stream: bool) -> Any:
    body = orjson.dumps({"model": "m", "messages": messages, "stream": stream,
                         "stream_options": {"include_usage": True}})
    reply = a.dispatch(b"POST", b"/v1/chat/completions", b"", b"", body)
    assert reply.status == 200
    if not stream:
        return orjson.loads(reply.body)
    assert b"text/event-stream" in reply.headers
    asm = StreamAssembler("/v1/chat/completions")
    for line in reply.body.split(b"\n\n"):
        if line.startswith(b"data: {"):
            asm.add(orjson.loads(line[6:]))
    assert reply.body.endswith(b"data: [DONE]\n\n")
    return asm.body()


def test_a_streamed_scripted_turn_assembles_to_the_unstreamed_one() -> None:
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    whole = post(app(), msgs, stream=False)
    streamed = post(app(), msgs, stream=True)
    for body in (whole, streamed):
        (choice,) = body["choices"]
        assert choice["finish_reason"] == "tool_calls"
        (call,) = choice["message"]["tool_calls"]
        assert call["function"] == {"name": "exec", "arguments": '{"command":"echo Paris"}'}
        assert body["usage"]["completion_tokens"] > 0


def test_match_conversation_finds_the_task_before_the_agent_s_context_message() -> None:
    first = [{"role": "system", "content": "agent"},
             {"role": "user", "content": "What is the capital of France?"}, CONTEXT]
    # by default the prompt is the last user message: no script matches, the default answer
    plain = post(app(), first, stream=True)["choices"][0]["message"]
    assert plain.get("tool_calls") is None and plain["content"] == "The answer is 42."
    a = app(match_conversation=True)
    call = post(a, first, stream=True)["choices"][0]["message"]["tool_calls"][0]
    # the next request: the call, its result, and the context message again at the end
    then = [*first[:2], {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "Paris"}, CONTEXT]
    answer = post(a, then, stream=True)["choices"][0]["message"]
    assert answer["content"] == "It is Paris." and not answer.get("tool_calls")
