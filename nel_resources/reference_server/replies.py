"""Building blocks of the reference server's replies: OpenAI-style error bodies, token
truncation and stop sequences, server-sent-event streams, usage blocks, and `Later` (an
outcome the transport carries out after a delay or a fault)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import orjson

from nel_resources.wire.http1 import JSON_HEADERS, SSE_HEADERS, Reply

TOKEN_RE = re.compile(r"\S+")


class BadRequest(Exception):
    """Raised inside handlers to answer 400 with this message."""


def text_of(content: Any) -> str:
    """Text of an OpenAI message ``content``: a string or a list of typed parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") in ("text", "input_text")
        )
    raise BadRequest("message content must be a string or a list of content parts")


def truncate_tokens(text: str, n_tokens: int) -> tuple[str, bool]:
    """Keep the first ``n_tokens`` whitespace tokens of ``text`` (original spacing kept)."""
    if n_tokens <= 0:
        return "", bool(text.strip())
    for i, match in enumerate(TOKEN_RE.finditer(text), 1):
        if i == n_tokens:
            end = match.end()
            return text[:end], bool(text[end:].strip())
    return text, False


def cut_at_stop(text: str, stops: Sequence[str]) -> tuple[str, bool]:
    best = -1
    for stop in stops:
        idx = text.find(stop) if stop else -1
        if idx >= 0 and (best < 0 or idx < best):
            best = idx
    return (text, False) if best < 0 else (text[:best], True)


def error_body(message: str, type_: str, code: str | int | None = None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": type_, "param": None, "code": code}})


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_denied",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_exceeded",
}


def error_response(status: int, message: str, extra: bytes = b"") -> Reply:
    type_ = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return Reply(status, error_body(message, type_, status), JSON_HEADERS + extra)


class Later(NamedTuple):
    """A deferred outcome: answer after ``delay`` seconds, drop or reset the connection,
    hang, send ``reply`` cut short (``eof``/``chunked``), or hold ``reply`` at the barrier."""

    action: str  # "reply" | "drop" | "reset" | "hang" | "eof" | "chunked" | "barrier" | "trickle"
    delay: float = 0.0
    reply: Reply | None = None



def include_usage(req: Mapping[str, Any]) -> bool:
    opts = req.get("stream_options")
    return isinstance(opts, dict) and bool(opts.get("include_usage"))


def sse_reply(
    events: list[dict[str, Any]], usage: dict[str, Any] | None, usage_base: dict[str, Any]
) -> Reply:
    # The whole stream is known up front, so it goes out with a Content-Length: valid HTTP,
    # and keeps the connection reusable without chunked encoding.
    parts = [b"data: " + orjson.dumps(e) + b"\n\n" for e in events]
    if usage is not None:
        parts.append(b"data: " + orjson.dumps({**usage_base, "usage": usage}) + b"\n\n")
    parts.append(b"data: [DONE]\n\n")
    return Reply(200, b"".join(parts), SSE_HEADERS)


def usage_of(prompt_tokens: int, completion_tokens: int, reasoning_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
    }

