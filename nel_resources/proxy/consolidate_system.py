"""`consolidate_system`: one system message, first, however many the conversation carries.

Some agents put system messages in the middle of a conversation, and chat templates such
as Qwen3's refuse them ("System message must be at the beginning"). When a chat request
has a system message anywhere but first, or more than one, their texts are joined with
`separator` into one system message at the front; the other messages keep their order.
A conversation with at most one system message, already first, is sent as it came.

As in NeMo Evaluator 0.3.0: a content given as a list of parts counts by its text parts
(joined by a newline), and system messages without text are dropped. Unlike it, an entry
of `messages` that is not an object is kept where it is (0.3.0 fails the request), and the
warning logged for each fix has the run's secrets masked.
"""

from __future__ import annotations

from typing import Any

from nel_resources.proxy.env import ChainEnv, proxy_logger
from nel_resources.proxy.fields import FieldSpec
from nel_resources.proxy.types import ProxyRequest
from nel_resources.wire.redact import Redactor

FIELDS = {"separator": FieldSpec("str", "\n\n")}
AFFECTS_ANSWERS = True
_PREVIEW = 300  # characters of a displaced system message shown in the warning


def text_of(content: Any) -> str:
    """The text of a message's content: a string, or the text parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = (p.get("text", "") if isinstance(p, dict) else p
                 for p in content if isinstance(p, dict | str))
        return "\n".join(p if isinstance(p, str) else "" for p in parts)
    return str(content) if content else ""


def _is_system(msg: Any) -> bool:
    return isinstance(msg, dict) and msg.get("role") == "system"


class ConsolidateSystem:
    """Merges the system messages of each chat request into the first message."""

    reports_changes = ("on_request",)

    def __init__(self, separator: str, redactor: Redactor) -> None:
        self.separator = separator
        self.redactor = redactor
        self.fixed = 0

    def on_request(self, req: ProxyRequest) -> ProxyRequest:
        messages = req.body.get("messages")
        if not isinstance(messages, list) or not messages:
            return req
        at = [i for i, m in enumerate(messages) if _is_system(m)]
        if not at or at == [0]:
            return req  # the common case: nothing to move
        self.fixed += 1
        self._warn(req, messages, at)
        texts = [t for t in (text_of(messages[i].get("content", "")) for i in at) if t]
        rest = [m for m in messages if not _is_system(m)]
        merged = [{"role": "system", "content": self.separator.join(texts)}] if texts else []
        req.body["messages"] = merged + rest
        req.raw = None
        return req

    def _warn(self, req: ProxyRequest, messages: list[Any], at: list[int]) -> None:
        roles = [m.get("role", "?") if isinstance(m, dict) else "?" for m in messages]
        where = []
        for i in (i for i in at if i > 0):
            window = " ".join(f"[{j}]={roles[j]}" for j in range(max(0, i - 2), min(len(roles), i + 3)))
            preview = text_of(messages[i].get("content", ""))[:_PREVIEW]
            where.append(f"system@{i} window=({window}) content_preview={preview!r}")
        line = (f"consolidate_system: fix #{self.fixed} session={req.ctx.session_id or '?'} "
                f"n_msgs={len(messages)} system_at={at} roles_head={roles[:8]} | "
                + (" | ".join(where) or "system missing from pos 0"))
        proxy_logger().warning(self.redactor.text(line))

    def stats(self) -> dict[str, Any]:
        """How many requests had their system messages merged."""
        return {"consolidate_system_fixes": self.fixed}


def build(cfg: dict[str, Any], env: ChainEnv) -> ConsolidateSystem:
    """The interceptor from its checked config."""
    return ConsolidateSystem(cfg["separator"], env.redactor)
