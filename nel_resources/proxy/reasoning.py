"""`reasoning`: move a leading `<think>...</think>` block (or a `reasoning` field) into the
message's `reasoning_content`, so the answer text is the answer only.

An unclosed `<think>` (the model ran out of tokens while thinking) is all reasoning: the
answer is empty rather than the half-finished thoughts.
"""

from __future__ import annotations

import re
from typing import Any

from nel_resources.proxy.env import ChainEnv
from nel_resources.proxy.fields import FieldSpec
from nel_resources.proxy.types import ProxyResponse

FIELDS: dict[str, FieldSpec] = {}
AFFECTS_ANSWERS = True
_OPEN = re.compile(r"^\s*<think>")


def _split(msg: dict[str, Any]) -> bool:
    if msg.get("reasoning_content"):
        return False
    if msg.get("reasoning"):
        msg["reasoning_content"] = msg.pop("reasoning")
        return True
    content = msg.get("content")
    # The substring test (C, no regex machinery) turns away the common answer without
    # a think block; the anchored regex then decides on the few that mention one.
    if not isinstance(content, str) or "<think>" not in content:
        return False
    m = _OPEN.match(content)
    if m is None:
        return False
    end = content.find("</think>", m.end())  # str.find: linear on any input
    if end < 0:
        msg["reasoning_content"], msg["content"] = content[m.end():].strip(), ""
    else:
        msg["reasoning_content"] = content[m.end():end].strip()
        msg["content"] = content[end + len("</think>"):].lstrip()
    return True


class Reasoning:
    """Splits reasoning from the answer in each choice."""

    # An answer it splits loses its upstream bytes (`types.py`); the others keep them.
    reports_changes = ("on_response",)

    def __init__(self) -> None:
        self.split = 0

    def on_response(self, resp: ProxyResponse) -> ProxyResponse:
        if self.seen(resp.status, resp.body, resp.latency_ms):
            resp.raw = None
        return resp

    def seen(self, status: int, body: dict[str, Any] | bytes, latency_ms: float,
             extra: dict[str, Any] | None = None, cached: bool = False) -> bool:
        """The response stage on the body alone (`compiled.py`): splits in place; whether
        any choice was split."""
        split = False
        # `x.__class__ is dict or isinstance(x, dict)`: the exact type (what orjson makes)
        # answers without a global lookup and a call; a subclass still passes.
        if body.__class__ is dict or isinstance(body, dict):
            for ch in body.get("choices") or ():
                msg = ch.get("message") if ch.__class__ is dict or isinstance(ch, dict) else None
                if msg.__class__ is not dict and not isinstance(msg, dict):
                    continue
                # `_split`'s own first tests, inline: most answers have no `reasoning`
                # field and no think tag, and return here without a call.
                content = msg.get("content")
                if (not msg.get("reasoning") and content.__class__ is str
                        and "<think>" not in content):
                    continue
                if _split(msg):
                    self.split += 1
                    split = True
        return split

    def inline_seen(self, p: str) -> tuple[list[str], dict[str, Any]]:
        """`seen` as source lines for a compiled response function (`compiled.py`), and
        the names they use (each starting with `p`): the common answer (a dict body whose
        choices are dicts with a dict message, no `reasoning` and a string content without
        a think tag) is told apart inline; anything else goes to `seen` whole."""
        return [f"{p}plain = body.__class__ is dict",
                f"if {p}plain:",
                f"    {p}choices = body.get('choices')",
                f"    if {p}choices.__class__ is list:",
                f"        for {p}ch in {p}choices:",
                f"            {p}msg = {p}ch.get('message') if {p}ch.__class__ is dict else None",
                f"            if {p}msg.__class__ is not dict:",
                f"                {p}plain = False",
                "                break",
                f"            {p}c = {p}msg.get('content')",
                f"            if {p}msg.get('reasoning') or {p}c.__class__ is not str or '<think>' in {p}c:",
                f"                {p}plain = False",
                "                break",
                f"    elif {p}choices:",
                f"        {p}plain = False",
                f"if not {p}plain:",
                f"    {p}seen(status, body, latency_ms)"], {f"{p}seen": self.seen}

    def on_chunk(self, chunk: dict[str, Any], ctx: Any) -> dict[str, Any]:
        # Streamed deltas are split by the caller once the message is whole; a `reasoning`
        # delta is renamed here so clients that read `reasoning_content` see it.
        for ch in chunk.get("choices") or ():
            d = ch.get("delta") if isinstance(ch, dict) else None
            if isinstance(d, dict) and "reasoning" in d and "reasoning_content" not in d:
                d["reasoning_content"] = d.pop("reasoning")
        return chunk

    def stats(self) -> dict[str, Any]:
        """Answers whose reasoning was moved."""
        return {"reasoning_split": self.split}


def build(cfg: dict[str, Any], env: ChainEnv) -> Reasoning:
    """The interceptor (it has no config)."""
    return Reasoning()
