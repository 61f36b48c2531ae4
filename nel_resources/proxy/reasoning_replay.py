"""`reasoning_replay`: give an agent's replayed assistant turns back their reasoning.

Agent SDKs (OpenHands, pi-ai) drop `reasoning_content` when they send the conversation
again, so the model loses its own chain of thought from one turn to the next. This
interceptor remembers the reasoning of each answer, keyed by the answer's tool-call ids
(or, for an answer without tool calls, by a hash of the first 256 characters of its
text), within the request's session, and puts it back into the matching assistant
message of later requests:

- `mode: think_tags` (default): as `<think>...</think>\\n` before the content (the tags are
  `tag_open` / `tag_close`), unless the content already starts with `tag_open`;
- `mode: native`: as the message's `reasoning_content` (a message that has one is left
  alone);
- `mode: both`: both.

At most `cache_max_entries` answers are remembered (the least recently used go first);
`log_misses` counts assistant turns it found nothing for. NeMo Evaluator 0.3.0's semantics
and keys. Unlike 0.3.0, the reasoning of a streamed answer is remembered too (the chain
assembles streamed answers for the response hooks: `streams.py`), where 0.3.0 sees a
stream's raw bytes and remembers nothing unless `streaming` is also configured.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any

from nel_resources.proxy.env import ChainEnv
from nel_resources.proxy.fields import FieldSpec
from nel_resources.proxy.types import ProxyRequest, ProxyResponse

FIELDS = {
    "mode": FieldSpec("str", "think_tags", choices=("think_tags", "native", "both")),
    "tag_open": FieldSpec("str", "<think>"),
    "tag_close": FieldSpec("str", "</think>"),
    "cache_max_entries": FieldSpec("int", 10_000),
    "log_misses": FieldSpec("bool", False),
}
AFFECTS_ANSWERS = True
_KEY_CHARS = 256  # characters of an answer's text its hash key covers


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(t for t in (p.get("text", "") for p in content if isinstance(p, dict))
                       if isinstance(t, str))
    return ""


def _keys(msg: dict[str, Any], scope: str) -> list[str]:
    """The remembered-reasoning keys of an assistant message: one per tool-call id, else
    one for its text (none for a message with neither)."""
    keys = [f"{scope}|c:{tc['id']}" for tc in msg.get("tool_calls") or ()
            if isinstance(tc, dict) and isinstance(tc.get("id"), str) and tc["id"]]
    if keys:
        return keys
    head = _text(msg.get("content"))[:_KEY_CHARS]
    if not head.strip():
        return []
    return [f"{scope}|h:" + hashlib.sha256(head.encode()).hexdigest()[:16]]


def _has(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


class ReasoningReplay:
    """Remembers answers' reasoning and replays it into later turns of the session."""

    reports_changes = ("on_request", "on_response")

    def __init__(self, mode: str, tag_open: str, tag_close: str, max_entries: int,
                 log_misses: bool) -> None:
        if not tag_open or not tag_close:
            raise ValueError("tag_open and tag_close must not be empty")
        self.native = mode in ("native", "both")
        self.tags = mode in ("think_tags", "both")
        self.only_native = mode == "native"
        self.tag_open, self.tag_close = tag_open, tag_close
        self.max_entries = max(max_entries, 1)
        self.log_misses = log_misses
        self.memory: OrderedDict[str, str] = OrderedDict()
        self.hits = self.misses = 0

    def on_response(self, resp: ProxyResponse) -> ProxyResponse:
        body = resp.body
        if not isinstance(body, dict):
            return resp
        scope = resp.ctx.session_id or ""
        for choice in body.get("choices") or ():
            msg = choice.get("message") if isinstance(choice, dict) else None
            if not isinstance(msg, dict) or not _has(msg.get("reasoning_content")):
                continue
            for key in _keys(msg, scope):
                self._remember(key, msg["reasoning_content"])
        return resp

    def on_request(self, req: ProxyRequest) -> ProxyRequest:
        messages = req.body.get("messages")
        if not isinstance(messages, list) or not (self.memory or self.log_misses):
            return req  # nothing remembered yet: nothing to find (or to count as missed)
        scope = req.ctx.session_id or ""
        hits = misses = 0
        for msg in messages:
            if not isinstance(msg, dict) or msg.get("role") != "assistant":
                continue
            if self.only_native and _has(msg.get("reasoning_content")):
                continue
            found = next((r for r in map(self._recall, _keys(msg, scope)) if r), None)
            if found is None:
                if self.log_misses and (msg.get("tool_calls") or _text(msg.get("content"))):
                    misses += 1
                continue
            if self._apply(msg, found):
                hits += 1
        if hits:
            req.raw = None
        if hits or misses:
            req.ctx.extra["reasoning_replay_hits"] = hits
            req.ctx.extra["reasoning_replay_misses"] = misses
            self.hits += hits
            self.misses += misses
        return req

    def _remember(self, key: str, reasoning: str) -> None:
        self.memory[key] = reasoning
        self.memory.move_to_end(key)
        while len(self.memory) > self.max_entries:
            self.memory.popitem(last=False)

    def _recall(self, key: str) -> str | None:
        found = self.memory.get(key)
        if found is not None:
            self.memory.move_to_end(key)
        return found

    def _apply(self, msg: dict[str, Any], reasoning: str) -> bool:
        changed = False
        if self.native and not _has(msg.get("reasoning_content")):
            msg["reasoning_content"] = reasoning
            changed = True
        content = msg.get("content")
        if self.tags and not _text(content).lstrip().startswith(self.tag_open):
            tagged = f"{self.tag_open}{reasoning}{self.tag_close}\n"
            if isinstance(content, list):
                msg["content"] = [{"type": "text", "text": tagged}, *content]
            else:
                msg["content"] = tagged + content if isinstance(content, str) else tagged
            changed = True
        return changed

    def stats(self) -> dict[str, Any]:
        """Turns given their reasoning back, and (with `log_misses`) turns not found."""
        out: dict[str, Any] = {"reasoning_replay_hits": self.hits}
        if self.log_misses:
            out["reasoning_replay_misses"] = self.misses
        return out


def build(cfg: dict[str, Any], env: ChainEnv) -> ReasoningReplay:
    """The interceptor from its checked config."""
    return ReasoningReplay(cfg["mode"], cfg["tag_open"], cfg["tag_close"],
                           cfg["cache_max_entries"], cfg["log_misses"])
