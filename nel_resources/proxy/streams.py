"""Streamed answers as whole answers and back: what lets the response hooks see a stream.

A streamed answer reaches the client chunk by chunk, so the interceptors that look at the
whole answer (`log_tokens`, `response_stats`, `caching`, ...) see it once the stream has
ended: `StreamAssembler` rebuilds the answer a non-streamed request would have got (a
`chat.completion` or `text_completion` object) from the upstream's chunks, before any chunk
hook changed them. The other way, `replay_chunks` turns a whole answer (a cache hit) into
the chunks of a stream, so a streamed request answered from the cache still gets a stream.

Usage comes from the stream's usage chunk when the server sent one (`stream_options:
{include_usage: true}`); otherwise the assembler counts the chunks that carried text or a
tool call (one token each for llama.cpp, vLLM and OpenAI's streams): `counted_tokens`.
Counted numbers are an estimate, so they never go into the answer's `usage` (nor into a
cached body): they reach the hooks as `resp.ctx.extra["counted_usage"]` (see `usage_of`).
"""

from __future__ import annotations

from typing import Any

from nel_resources.proxy.types import ProxyResponse

COUNTED_USAGE = "counted_usage"


class _Choice:
    __slots__ = ("content", "finish", "logprobs", "reasoning", "role", "tools")

    def __init__(self) -> None:
        self.role = "assistant"
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.tools: dict[int, dict[str, Any]] = {}
        self.finish: str | None = None
        self.logprobs: list[Any] = []


class StreamAssembler:
    """Collects the chunks of one streamed chat or text completion into a whole answer."""

    def __init__(self, path: str) -> None:
        self.text = path.endswith("/completions") and not path.endswith("/chat/completions")
        self.choices: dict[int, _Choice] = {}
        self.meta: dict[str, Any] = {}
        self.usage: dict[str, Any] | None = None
        self.counted_tokens = 0
        self.responses_final: dict[str, Any] | None = None

    def add(self, chunk: dict[str, Any]) -> None:
        """Take one parsed `data:` object (call it before any hook edits the chunk)."""
        if chunk.get("type") == "response.completed":  # the Responses API's last event
            final = chunk.get("response")
            if isinstance(final, dict):
                self.responses_final = final
            return
        if not self.meta:
            self.meta = {k: chunk[k] for k in ("id", "created", "model", "system_fingerprint")
                         if k in chunk}
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        for ch in chunk.get("choices") or ():
            if isinstance(ch, dict):
                self._add_choice(ch)

    def _add_choice(self, ch: dict[str, Any]) -> None:
        idx = ch.get("index", 0)
        c = self.choices.get(idx)
        if c is None:
            c = self.choices[idx] = _Choice()
        if ch.get("finish_reason"):
            c.finish = ch["finish_reason"]
        logprobs = ch.get("logprobs")
        if isinstance(logprobs, dict) and isinstance(logprobs.get("content"), list):
            c.logprobs.extend(logprobs["content"])
        if self.text:
            piece = ch.get("text")
            if isinstance(piece, str) and piece:
                c.content.append(piece)
                self.counted_tokens += 1
            return
        delta = ch.get("delta")
        if not isinstance(delta, dict):
            return
        counted = False
        if isinstance(delta.get("role"), str):
            c.role = delta["role"]
        piece = delta.get("content")
        if isinstance(piece, str) and piece:
            c.content.append(piece)
            counted = True
        piece = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(piece, str) and piece:
            c.reasoning.append(piece)
            counted = True
        for tc in delta.get("tool_calls") or ():
            if isinstance(tc, dict):
                self._add_tool_call(c, tc)
                counted = True
        self.counted_tokens += counted

    @staticmethod
    def _add_tool_call(c: _Choice, tc: dict[str, Any]) -> None:
        # A call arrives in pieces: id, type and name first, then its arguments in parts.
        idx = tc.get("index", len(c.tools))
        call = c.tools.get(idx)
        if call is None:
            call = c.tools[idx] = {"id": None, "type": "function",
                                   "function": {"name": "", "arguments": ""}}
        if tc.get("id"):
            call["id"] = tc["id"]
        if tc.get("type"):
            call["type"] = tc["type"]
        fn = tc.get("function")
        if isinstance(fn, dict):
            if fn.get("name"):
                call["function"]["name"] += fn["name"]
            if isinstance(fn.get("arguments"), str):
                call["function"]["arguments"] += fn["arguments"]

    def body(self) -> dict[str, Any]:
        """The whole answer, shaped like the non-streamed one."""
        if self.responses_final is not None:
            return self.responses_final
        choices = []
        for idx in sorted(self.choices):
            c = self.choices[idx]
            out: dict[str, Any] = {"index": idx, "finish_reason": c.finish,
                                   "logprobs": {"content": c.logprobs} if c.logprobs else None}
            if self.text:
                out["text"] = "".join(c.content)
            else:
                msg: dict[str, Any] = {"role": c.role, "content": "".join(c.content)}
                if c.reasoning:
                    msg["reasoning_content"] = "".join(c.reasoning)
                if c.tools:
                    msg["tool_calls"] = [c.tools[i] for i in sorted(c.tools)]
                    if not msg["content"]:
                        msg["content"] = None
                out["message"] = msg
            choices.append(out)
        body: dict[str, Any] = {**self.meta,
                                "object": "text_completion" if self.text else "chat.completion",
                                "choices": choices}
        if self.usage is not None:
            body["usage"] = self.usage
        return body

    def response(self, latency_ms: float, ctx: Any) -> ProxyResponse:
        """The assembled answer for the response hooks (counted usage in `ctx.extra`)."""
        body = self.body()
        if "usage" not in body:
            ctx.extra[COUNTED_USAGE] = {"completion_tokens": self.counted_tokens}
        return ProxyResponse(200, body, latency_ms, 1, ctx)


def usage_of(resp: ProxyResponse) -> dict[str, Any] | None:
    """The answer's `usage`, else the tokens counted on its stream, else None."""
    body = resp.body
    usage = body.get("usage") if isinstance(body, dict) else None
    if isinstance(usage, dict):
        return usage
    return resp.ctx.extra.get(COUNTED_USAGE)


def replay_chunks(body: dict[str, Any], path: str, include_usage: bool) -> list[dict[str, Any]]:
    """The chunks of a stream that delivers `body` (a whole chat or text completion)."""
    text = path.endswith("/completions") and not path.endswith("/chat/completions")
    base = {k: body[k] for k in ("id", "created", "model", "system_fingerprint") if k in body}
    base["object"] = "text_completion" if text else "chat.completion.chunk"
    out: list[dict[str, Any]] = []
    for i, ch in enumerate(body.get("choices") or ()):
        if not isinstance(ch, dict):
            continue
        idx = ch.get("index", i)
        if text:
            out.append({**base, "choices": [{"index": idx, "text": ch.get("text") or "",
                                             "finish_reason": None}]})
        else:
            msg = ch.get("message") or {}
            out.append({**base, "choices": [{"index": idx, "finish_reason": None,
                                             "delta": {"role": msg.get("role", "assistant"),
                                                       "content": ""}}]})
            delta: dict[str, Any] = {}
            if msg.get("reasoning_content"):
                delta["reasoning_content"] = msg["reasoning_content"]
            if msg.get("content"):
                delta["content"] = msg["content"]
            if msg.get("tool_calls"):
                delta["tool_calls"] = [{**tc, "index": n} for n, tc in enumerate(msg["tool_calls"])]
            if delta:
                out.append({**base, "choices": [{"index": idx, "delta": delta,
                                                 "finish_reason": None}]})
        last: dict[str, Any] = {"index": idx, "finish_reason": ch.get("finish_reason")}
        if text:
            last["text"] = ""
        else:
            last["delta"] = {}
        out.append({**base, "choices": [last]})
    if include_usage and isinstance(body.get("usage"), dict):
        out.append({**base, "choices": [], "usage": body["usage"]})
    return out


def wants_usage(body: dict[str, Any]) -> bool:
    """Whether a streamed request asked for the usage chunk."""
    opts = body.get("stream_options")
    return isinstance(opts, dict) and bool(opts.get("include_usage"))


__all__ = ["COUNTED_USAGE", "StreamAssembler", "replay_chunks", "usage_of", "wants_usage"]
