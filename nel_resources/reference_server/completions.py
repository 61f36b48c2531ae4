"""The completion endpoints of the reference server: chat, completions and responses
(plain, streamed and scripted tool calls), and the deterministic generation behind them.

`Completions` is the half of `ReferenceApp` that writes answers; the app (`app.py`) owns
routing, statistics and faults, and provides `_fault` and the counters used here.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import orjson

from nel_resources.reference_server.answers import (
    Answer,
    AnswerBook,
    ToolScript,
    chat_state,
    responses_state,
    script_calls,
)
from nel_resources.reference_server.config import ServerConfig
from nel_resources.reference_server.logprobs import logprobs_block, requested_top_n
from nel_resources.reference_server.replies import (
    BadRequest,
    Later,
    cut_at_stop,
    include_usage,
    sse_reply,
    text_of,
    truncate_tokens,
    usage_of,
)
from nel_resources.reference_server.vision import answer_from, image_parts, look
from nel_resources.wire.http1 import Reply

_TOOL_ITEMS = ("function_call", "function_call_output")


class Completions:
    """Answers to `/v1/chat/completions`, `/v1/completions` and `/v1/responses` bodies."""

    config: ServerConfig
    answers: AnswerBook
    script: ToolScript | None
    models: dict[str, int]
    prompts: dict[str, int]
    system_count: int
    image_details: dict[str, int]  # images received, by their `detail`
    last_system: str | None
    _seq: int

    def _fault(self, prompt: str, seed: Any) -> Reply | Later | None:
        """This attempt's injected fault, if any (the app decides; see `ReferenceApp`)."""
        raise NotImplementedError

    def _answer_for(self, prompt: str, seen: str | None = None) -> Answer:
        hit = (
            self.answers.lookup(prompt) if (self.answers.by_sha or self.answers.by_match) else None
        )
        if hit is not None:
            return hit
        if seen is not None:  # the answer read from the request's images
            return Answer(seen)
        if self.config.echo:
            return Answer(prompt)
        return Answer(self.config.default_content)

    def _generate(
        self, prompt: str, req: Mapping[str, Any], completion: bool, seen: str | None = None
    ) -> tuple[str, str | None, str, int, int]:
        """Produce ``(content, reasoning_field, finish_reason, completion_tokens, reasoning_tokens)``."""
        answer = self._answer_for(prompt, seen)
        mode = self.config.reasoning_mode
        reasoning = None
        # /v1/completions has no reasoning field, so "field" mode emits no reasoning there.
        if mode == "think" or (mode == "field" and not completion):
            reasoning = (
                answer.reasoning if answer.reasoning is not None else self.config.default_reasoning
            )
        content = answer.content
        max_tokens = req.get("max_completion_tokens")
        if max_tokens is None:
            max_tokens = req.get("max_tokens")
        if max_tokens is not None and (
            not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1
        ):
            raise BadRequest("max_tokens must be a positive integer")
        stops = req.get("stop")
        if isinstance(stops, str):
            stops = [stops]
        elif stops is not None and not (
            isinstance(stops, list) and all(isinstance(s, str) for s in stops)
        ):
            raise BadRequest("stop must be a string or a list of strings")

        if reasoning is not None and mode == "think":
            content = f"<think>\n{reasoning}\n</think>\n\n{content}"
            r_total = len(reasoning.split())
            reasoning = None
            think = True
        else:
            think = False
        finish = "stop"
        if stops:
            content, _ = cut_at_stop(content, stops)
        r_tokens = 0
        if reasoning is not None:
            r_tokens = len(reasoning.split())
            if max_tokens is not None and r_tokens > max_tokens:
                reasoning, _ = truncate_tokens(reasoning, max_tokens)
                r_tokens = max_tokens
        if max_tokens is not None:
            content, cut = truncate_tokens(content, max_tokens - r_tokens)
            if cut:
                finish = "length"
        c_tokens = len(content.split())
        if think:
            # Tags count as tokens; reasoning is what precedes the closing tag.
            r_tokens = r_total if "</think>" in content else max(0, c_tokens - 1)
            return content, None, finish, c_tokens, r_tokens
        return content, reasoning, finish, c_tokens + r_tokens, r_tokens

    def _next_id(self, prefix: str) -> str:
        self._seq += 1
        return f"{prefix}-ref{self._seq:08x}"

    def _observe_messages(self, req: Mapping[str, Any], messages: list[Any]) -> tuple[Any, str, int]:
        """Count the request (model, last user prompt, system message); return
        ``(model, prompt, prompt_tokens)``."""
        prompt, system, prompt_tokens = "", None, 0
        users: list[str] = []
        for msg in messages:
            if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
                raise BadRequest("each message must be an object with a string 'role'")
            text = text_of(msg.get("content"))
            prompt_tokens += len(text.split())
            if msg["role"] == "user":
                prompt = text
                users.append(text)
            elif msg["role"] in ("system", "developer"):
                system = text
        if self.config.match_conversation:
            prompt = "\n".join(users)
        model = req.get("model") or self.config.model_name
        self.models[str(model)] = self.models.get(str(model), 0) + 1
        self._observe_prompt(prompt)
        if system is not None:
            self.system_count += 1
            self.last_system = system
        return model, prompt, prompt_tokens

    def _seen(self, messages: list[Any], prompt: str) -> str | None:
        """The answer the last user message's images give (None without images); counts
        the images and their details for `/stats`."""
        user = next((m for m in reversed(messages) if isinstance(m, dict) and m.get("role") == "user"), None)
        parts = image_parts(user.get("content")) if user is not None else []
        if not parts:
            return None
        sights = [look(url) for url, _ in parts]
        for _, detail in parts:
            self.image_details[detail] = self.image_details.get(detail, 0) + 1
        return answer_from(prompt, sights)

    def _observe_prompt(self, prompt: str) -> None:
        self.prompts[prompt] = self.prompts.get(prompt, 0) + 1

    def _chat(self, req: dict[str, Any]) -> Reply | Later:
        messages = req.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("'messages' must be a non-empty list")
        model, prompt, prompt_tokens = self._observe_messages(req, messages)
        fault = self._fault(prompt, req.get("seed"))
        if fault is not None:
            return fault
        if self.script is not None:
            done, last_tool = chat_state(messages, self.config.match_conversation)
            turn = self.script.turn(prompt, done)
            if turn is not None:
                return self._scripted_chat(model, turn, done, last_tool, prompt_tokens,
                                           req)
        n = self._n_choices(req)
        seen = self._seen(messages, prompt)
        content, reasoning, finish, c_tokens, r_tokens = self._generate(prompt, req, False, seen)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if reasoning is not None:
            message["reasoning_content"] = reasoning
        usage = usage_of(prompt_tokens, c_tokens * n, r_tokens * n)
        rid, created = self._next_id("chatcmpl"), int(time.time())
        if req.get("stream"):
            return self._chat_stream(req, rid, created, model, n, content, reasoning, finish, usage)
        choices = [
            {"index": i, "message": message, "logprobs": None, "finish_reason": finish}
            for i in range(n)
        ]
        return Reply(
            200,
            orjson.dumps(
                {
                    "id": rid,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": choices,
                    "usage": usage,
                    "system_fingerprint": None,
                }
            ),
        )

    def _responses(self, req: dict[str, Any]) -> Reply | Later:
        """The OpenAI Responses API (`input` as a string or messages; `instructions`)."""
        raw = req.get("input")
        if isinstance(raw, str):
            messages: list[Any] = [{"role": "user", "content": raw}]
        elif isinstance(raw, list) and raw:
            messages = raw
        else:
            raise BadRequest("'input' must be a string or a non-empty list of messages")
        if isinstance(req.get("instructions"), str):
            messages = [{"role": "system", "content": req["instructions"]}, *messages]
        # Tool-call items (`function_call`, `function_call_output`) carry no role.
        said = [m for m in messages if not (isinstance(m, dict) and m.get("type") in _TOOL_ITEMS)]
        model, prompt, prompt_tokens = self._observe_messages(req, said)
        fault = self._fault(prompt, req.get("seed"))
        if fault is not None:
            return fault
        if self.script is not None:
            done, last_tool = responses_state(messages)
            turn = self.script.turn(prompt, done)
            if turn is not None:
                return self._scripted_responses(model, turn, done, last_tool, prompt_tokens)
        gen_req = dict(req)
        if "max_output_tokens" in req:
            gen_req["max_tokens"] = req["max_output_tokens"]
        seen = self._seen(said, prompt)
        content, reasoning, finish, c_tokens, r_tokens = self._generate(prompt, gen_req, False, seen)
        output: list[dict[str, Any]] = []
        if reasoning is not None:
            output.append({"type": "reasoning", "id": self._next_id("rs"),
                           "summary": [{"type": "summary_text", "text": reasoning}]})
        output.append({"type": "message", "id": self._next_id("msg"), "role": "assistant",
                       "status": "completed",
                       "content": [{"type": "output_text", "text": content, "annotations": []}]})
        return Reply(200, orjson.dumps({
            "id": self._next_id("resp"), "object": "response", "created_at": int(time.time()),
            "model": model, "status": "completed" if finish == "stop" else "incomplete",
            "output": output,
            # Fields OpenAI's Response type requires (NeMo Gym validates replies against it).
            "tools": [], "tool_choice": "auto", "parallel_tool_calls": True,
            "usage": {"input_tokens": prompt_tokens, "output_tokens": c_tokens,
                      "total_tokens": prompt_tokens + c_tokens,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": r_tokens}},
        }))

    def _scripted_chat(self, model: Any, turn: Mapping[str, Any], turn_no: int, last_tool: str,
                       prompt_tokens: int, req: Mapping[str, Any] | None = None) -> Reply:
        content = str(turn.get("content") or "").replace("{last_tool}", last_tool)
        calls = script_calls(turn, turn_no)
        message: dict[str, Any] = {"role": "assistant", "content": content or None}
        if turn.get("reasoning"):  # a thinking model's reasoning for this turn
            message["reasoning_content"] = str(turn["reasoning"])
        if calls:
            message["tool_calls"] = [{"id": cid, "type": "function",
                                      "function": {"name": name, "arguments": args}}
                                     for cid, name, args in calls]
        c_tokens = len(content.split()) + sum(len(a.split()) for _, _, a in calls)
        rid, created, finish = self._next_id("chatcmpl"), int(time.time()), (
            "tool_calls" if calls else "stop")
        usage = usage_of(prompt_tokens, c_tokens, 0)
        if req is not None and req.get("stream"):
            # One delta with the text and every call (each with its `index`), as a
            # streaming server sends a turn it has finished.
            base = {"id": rid, "object": "chat.completion.chunk", "created": created,
                    "model": model}
            delta: dict[str, Any] = {"role": "assistant", "content": content or None}
            if "reasoning_content" in message:
                delta["reasoning_content"] = message["reasoning_content"]
            if calls:
                delta["tool_calls"] = [{"index": i, **tc}
                                       for i, tc in enumerate(message["tool_calls"])]
            events = [{**base, "choices": [{"index": 0, "delta": d, "logprobs": None,
                                            "finish_reason": f}]}
                      for d, f in ((delta, None), ({}, finish))]
            return sse_reply(events, usage if include_usage(req) else None, {**base, "choices": []})
        return Reply(200, orjson.dumps({
            "id": rid, "object": "chat.completion",
            "created": created, "model": model,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": finish}],
            "usage": usage, "system_fingerprint": None,
        }))

    def _scripted_responses(self, model: Any, turn: Mapping[str, Any], turn_no: int,
                            last_tool: str, prompt_tokens: int) -> Reply:
        content = str(turn.get("content") or "").replace("{last_tool}", last_tool)
        calls = script_calls(turn, turn_no)
        output: list[dict[str, Any]] = []
        if content:
            output.append({"type": "message", "id": self._next_id("msg"), "role": "assistant",
                           "status": "completed",
                           "content": [{"type": "output_text", "text": content, "annotations": []}]})
        output.extend({"type": "function_call", "id": self._next_id("fc"), "call_id": cid,
                       "name": name, "arguments": args, "status": "completed"}
                      for cid, name, args in calls)
        c_tokens = len(content.split()) + sum(len(a.split()) for _, _, a in calls)
        return Reply(200, orjson.dumps({
            "id": self._next_id("resp"), "object": "response", "created_at": int(time.time()),
            "model": model, "status": "completed", "output": output,
            "tools": [], "tool_choice": "auto", "parallel_tool_calls": True,
            "usage": {"input_tokens": prompt_tokens, "output_tokens": c_tokens,
                      "total_tokens": prompt_tokens + c_tokens,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}},
        }))

    def _completion(self, req: dict[str, Any]) -> Reply | Later:
        raw = req.get("prompt")
        if isinstance(raw, str):
            prompts = [raw]
        elif isinstance(raw, list) and raw and all(isinstance(p, str) for p in raw):
            prompts = raw
        else:
            raise BadRequest("'prompt' must be a string or a non-empty list of strings")
        model = req.get("model") or self.config.model_name
        self.models[str(model)] = self.models.get(str(model), 0) + 1
        for p in prompts:
            self._observe_prompt(p)
        fault = self._fault("\x1e".join(prompts), req.get("seed"))
        if fault is not None:
            return fault
        n = self._n_choices(req)
        choices = []
        p_tokens = c_total = r_total = 0
        top_n = requested_top_n(req) if not self.config.no_logprobs else None
        for i, prompt in enumerate(prompts):
            generated, _, finish, c_tokens, r_tokens = self._generate(prompt, req, True)
            text = prompt + generated if req.get("echo") else generated
            logprobs = None if top_n is None else logprobs_block(
                prompt, generated, top_n, bool(req.get("echo")))
            p_tokens += len(prompt.split())
            c_total += c_tokens * n
            r_total += r_tokens * n
            for j in range(n):
                choices.append(
                    {"index": i * n + j, "text": text, "logprobs": logprobs,
                     "finish_reason": finish}
                )
        usage = usage_of(p_tokens, c_total, r_total)
        rid, created = self._next_id("cmpl"), int(time.time())
        if req.get("stream"):
            events = [
                {
                    "id": rid,
                    "object": "text_completion",
                    "created": created,
                    "model": model,
                    "choices": [c],
                }
                for c in choices
            ]
            return sse_reply(
                events,
                usage if include_usage(req) else None,
                {
                    "id": rid,
                    "object": "text_completion",
                    "created": created,
                    "model": model,
                    "choices": [],
                },
            )
        return Reply(
            200,
            orjson.dumps(
                {
                    "id": rid,
                    "object": "text_completion",
                    "created": created,
                    "model": model,
                    "choices": choices,
                    "usage": usage,
                }
            ),
        )

    @staticmethod
    def _n_choices(req: Mapping[str, Any]) -> int:
        n = req.get("n", 1)
        if n is None:
            return 1
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 128:
            raise BadRequest("'n' must be an integer between 1 and 128")
        return n

    @staticmethod
    def _chat_stream(
        req: Mapping[str, Any],
        rid: str,
        created: int,
        model: Any,
        n: int,
        content: str,
        reasoning: str | None,
        finish: str,
        usage: dict[str, Any],
    ) -> Reply:
        base = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model}
        events: list[dict[str, Any]] = []
        for i in range(n):
            deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
            if reasoning:
                deltas.append({"reasoning_content": reasoning})
            if content:
                deltas.append({"content": content})
            events.extend(
                {
                    **base,
                    "choices": [{"index": i, "delta": d, "logprobs": None, "finish_reason": None}],
                }
                for d in deltas
            )
            events.append(
                {
                    **base,
                    "choices": [
                        {"index": i, "delta": {}, "logprobs": None, "finish_reason": finish}
                    ],
                }
            )
        return sse_reply(events, usage if include_usage(req) else None, {**base, "choices": []})
