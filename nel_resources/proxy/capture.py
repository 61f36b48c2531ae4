"""Captured agent traffic: what an agent nel does not drive said to the model, and heard back.

An agent pointed at the standalone proxy (`nel proxy --capture FILE`, or `InterceptorProxy`
with `capture_path`) has each exchange written as one JSON line of that file: its session
(`/s/<id>/v1`), turn, the request as the agent sent it (messages, tools, prompt or input;
before any interceptor changed it), the answer it got (message with tool calls, or text),
tokens, latency, HTTP status, and whether the cache or a stream delivered it. Secrets are
redacted from every line, as everywhere nel writes. Lines are flushed as they are written
(never fsynced: a crash may lose the tail), so a solver can read a session as soon as the
agent's last request has been answered.

`captured_steps(path, session_id)` turns one session's exchanges into ATIF-v1.6 steps (the
shape of `SolveResult.steps`): system and user messages, one agent step per model turn
(text, reasoning, tool calls, token metrics), tool results as the observation of the
agent step that called them. Delegated solvers (gym_delegation, harbor) use it to fill in
what the agent did.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import orjson

from nel_resources.proxy.streams import usage_of
from nel_resources.proxy.types import ProxyRequest, ProxyResponse, RequestContext

_SNAPSHOT = "capture_request"
_STARTED = "capture_started"
# The request fields kept: what the agent asked and with which tools, not transport knobs.
_REQUEST_KEYS = ("model", "messages", "tools", "tool_choice", "prompt", "input", "instructions")
_MAX_SESSIONS = 100_000


class Capture:
    """Writes one line per exchange; the first link of the proxy's chain (so its request
    hook sees the agent's request untouched and its response hook the final answer)."""

    # Both hooks only read (the request is snapshotted): bytes may pass through (`types.py`).
    reports_changes = ("on_request", "on_response")

    def __init__(self, path: str | os.PathLike[str], redact: Callable[[bytes], bytes]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[bytes] | None = open(self.path, "ab")  # closed in close()
        self._redact = redact
        self._lock = threading.Lock()
        self._turns: OrderedDict[str, int] = OrderedDict()
        self.written = 0

    def on_request(self, req: ProxyRequest) -> ProxyRequest:
        # A serialised snapshot: later hooks edit the body (and its messages) in place.
        req.ctx.extra[_SNAPSHOT] = (req.path, req.stream, orjson.dumps(
            {k: req.body[k] for k in _REQUEST_KEYS if k in req.body}))
        req.ctx.extra[_STARTED] = time.perf_counter()
        return req

    def on_response(self, resp: ProxyResponse) -> ProxyResponse:
        body = resp.body if isinstance(resp.body, dict) else None
        error = None
        if body is None:
            raw = resp.body if isinstance(resp.body, bytes) else b""
            error = raw[:2000].decode("utf-8", "replace")
        self._write(resp.ctx, resp.status, _answer(body) if body else None, usage_of(resp),
                    resp.latency_ms, resp.cached, error)
        return resp

    def failed(self, ctx: RequestContext, status: int, message: str) -> None:
        """Record an exchange the chain refused or the upstream failed (no answer)."""
        started = ctx.extra.get(_STARTED)
        latency = (time.perf_counter() - started) * 1000.0 if started is not None else 0.0
        self._write(ctx, status, None, None, latency, False, message)

    def _write(self, ctx: RequestContext, status: int, answer: dict[str, Any] | None,
               usage: dict[str, Any] | None, latency_ms: float, cached: bool,
               error: str | None) -> None:
        snap = ctx.extra.pop(_SNAPSHOT, None)
        if snap is None or self._file is None:
            return  # not a request this capture saw (or it is closed)
        path, stream, request = snap
        session = ctx.session_id or "default"
        turn = self._turns.get(session, 0) + 1
        if len(self._turns) >= _MAX_SESSIONS and session not in self._turns:
            self._turns.popitem(last=False)
        self._turns[session] = turn
        record = {"session_id": session, "turn": turn, "time": time.time(), "path": path,
                  "repeat": ctx.repeat, "request": orjson.Fragment(request),
                  "response": answer, "usage": usage, "latency_ms": round(latency_ms, 3),
                  "status": status, "cached": cached, "stream": stream, "error": error}
        line = self._redact(orjson.dumps(record)) + b"\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()  # whole lines for a reader in another process
        self.written += 1

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def stats(self) -> dict[str, Any]:
        """Exchanges written."""
        return {"captured_exchanges": self.written}


def _answer(body: dict[str, Any]) -> dict[str, Any]:
    """The part of an answer an agent acts on: the message (or text) and why it ended."""
    choices = body.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        ch = choices[0]
        if isinstance(ch.get("message"), dict):
            return {"message": ch["message"], "finish_reason": ch.get("finish_reason")}
        return {"text": ch.get("text"), "finish_reason": ch.get("finish_reason")}
    if "output" in body:  # the Responses API
        return {"output": body.get("output"), "status": body.get("status")}
    return {"body": body}


# ---------------------------------------------------------------------------- reading
def read_capture(path: str | os.PathLike[str], session_id: str | None = None
                 ) -> Iterator[dict[str, Any]]:
    """The exchanges of a capture file (of one session when given), in the order written.

    A torn last line (the proxy was killed mid-write) is skipped.
    """
    with open(path, "rb") as f:
        for raw in f:
            try:
                rec = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            if isinstance(rec, dict) and (session_id is None or rec.get("session_id") == session_id):
                yield rec


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            return raw  # the model wrote invalid JSON: kept as it said it
    return raw


def _agent_step(rec: dict[str, Any]) -> dict[str, Any]:
    resp = rec.get("response") or {}
    msg = resp.get("message") if isinstance(resp.get("message"), dict) else None
    step: dict[str, Any] = {"source": "agent",
                            "message": _text(msg.get("content")) if msg else _text(resp.get("text")),
                            "model_name": (rec.get("request") or {}).get("model")}
    if msg and (msg.get("reasoning_content") or msg.get("reasoning")):
        step["reasoning_content"] = msg.get("reasoning_content") or msg.get("reasoning")
    calls = [{"tool_call_id": tc.get("id"), "function_name": (tc.get("function") or {}).get("name"),
              "arguments": _arguments((tc.get("function") or {}).get("arguments"))}
             for tc in (msg.get("tool_calls") or [] if msg else []) if isinstance(tc, dict)]
    if calls:
        step["tool_calls"] = calls
    usage = rec.get("usage") or {}
    metrics = {k: usage[k] for k in ("prompt_tokens", "completion_tokens") if isinstance(usage.get(k), int)}
    if metrics:
        step["metrics"] = metrics
    extra: dict[str, Any] = {"turn": rec.get("turn"), "latency_ms": rec.get("latency_ms"),
                             "status": rec.get("status"), "cached": rec.get("cached"),
                             "finish_reason": resp.get("finish_reason")}
    if rec.get("error"):
        extra["error"] = rec["error"]
    step["extra"] = extra
    return step


def captured_steps(capture_path: str | os.PathLike[str], session_id: str) -> list[dict[str, Any]]:
    """One session's exchanges as ATIF-v1.6 steps, numbered from 1 (`SolveResult.steps`).

    Each request repeats the conversation so far: only the messages new since the previous
    request become steps (system and user messages as such, tool results as the
    observation of the agent step that called them); the assistant messages an agent
    sends back are the agent steps already taken from the answers. An agent that rewrote
    its history (a shorter conversation than before) starts over from its new messages.
    Failed exchanges are agent steps with an empty message and `extra.error`.
    """
    return steps_of(read_capture(capture_path, session_id))


def steps_of(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """`captured_steps` of one session's records, already read (`read_capture`)."""
    steps: list[dict[str, Any]] = []
    seen = 0
    for rec in records:
        request = rec.get("request") or {}
        messages = request.get("messages")
        if messages is None and request.get("prompt") is not None:
            messages = [{"role": "user", "content": request["prompt"]}]
        if not isinstance(messages, list):
            messages = []
        if len(messages) < seen:
            seen = 0
        first = not steps
        for m in messages[seen:]:
            if not isinstance(m, dict):
                continue
            role = m.get("role")
            if role == "tool":
                result = {"source_call_id": m.get("tool_call_id"), "content": _text(m.get("content"))}
                agent = next((s for s in reversed(steps) if s["source"] == "agent"), None)
                if agent is not None:
                    agent.setdefault("observation", {"results": []})["results"].append(result)
                else:
                    steps.append({"source": "system", "message": result["content"],
                                  "extra": {"tool_call_id": result["source_call_id"]}})
            elif role == "assistant":
                # Later requests send the answers back: those are the agent steps already
                # taken from the answers. Only the first request's are history (few-shot).
                if first:
                    steps.append({"source": "agent", "message": _text(m.get("content")),
                                  "extra": {"from_request": True}})
            elif role in ("system", "developer"):
                steps.append({"source": "system", "message": _text(m.get("content"))})
            else:
                steps.append({"source": "user", "message": _text(m.get("content"))})
        seen = len(messages)
        steps.append(_agent_step(rec))
    for i, s in enumerate(steps, start=1):
        s["step_id"] = i
    return steps


__all__ = ["Capture", "captured_steps", "read_capture", "steps_of"]
