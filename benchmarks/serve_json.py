"""JSON in and out for `nel serve`: bodies read within limits, errors as structured 4xx.

Bodies are parsed by hand with orjson rather than through pydantic models: it is faster on
the hot path (an RL loop calls this millions of times) and lets every error name its field.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

__all__ = ["DEFAULT_BODY_TIMEOUT", "ApiError", "body_timed_out", "check_body_head", "dumps",
           "invalid", "json_response", "loads", "parse_json_object", "read_body",
           "read_json_object", "too_large"]

# A body must arrive completely within this (a client sending it byte by byte is cut off).
DEFAULT_BODY_TIMEOUT = 30.0
JSON_HEADERS = {"content-type": "application/json"}


# --------------------------------------------------------------------------- errors


class ApiError(Exception):
    """A client error with an HTTP status, a stable code and the offending field."""

    def __init__(self, status: int, code: str, detail: str, field: str | None = None):
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.field = field

    def to_dict(self) -> dict[str, Any]:
        """The JSON error body: `{error, detail, field}`."""
        return {"error": self.code, "detail": self.detail, "field": self.field}


def invalid(field: str, detail: str) -> ApiError:
    return ApiError(422, "invalid_request", f"{field}: {detail}", field)


# --------------------------------------------------------------------------- JSON


def _json_default(obj: Any) -> Any:
    # Scorers put numpy scalars, sets, paths... into metadata; never fail on them.
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    item = getattr(obj, "item", None)
    if callable(item):
        try:
            return item()
        except Exception:
            pass
    return str(obj)


def dumps(obj: Any) -> bytes:
    """Serialise to JSON bytes; falls back to the stdlib for ints orjson cannot hold."""
    try:
        return orjson.dumps(
            obj, default=_json_default, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
        )
    except TypeError:
        # orjson refuses integers beyond 64 bits (a client may echo one back to us).
        return json.dumps(obj, default=_json_default).encode()


def loads(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        first_error = exc
    # orjson rejects valid JSON with integers beyond 64 bits; the stdlib accepts them. Deep
    # nesting makes the stdlib recurse, hence RecursionError.
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise ApiError(
            422, "invalid_json", f"body: not valid JSON ({first_error})", "body"
        ) from None


def json_response(obj: Any, status: int = 200) -> Response:
    from starlette.responses import Response

    return Response(dumps(obj), status_code=status, headers=JSON_HEADERS)


# --------------------------------------------------------------------------- body reading


def _check_content_type(ctype: str | None) -> None:
    """Refuse a declared content type other than JSON (415); none at all is accepted."""
    if ctype is None or not ctype.strip():  # an empty header declares nothing either
        return
    media = ctype.split(";", 1)[0].strip().lower()
    if media != "application/json" and not (
        media.startswith("application/") and media.endswith("+json")
    ):
        raise ApiError(
            415,
            "unsupported_media_type",
            f"content-type {media or ctype!r} is not JSON; send application/json",
            "content-type",
        )


def require_json(request: Request) -> None:
    """Refuse a declared content type other than JSON (415); none at all is accepted."""
    _check_content_type(request.headers.get("content-type"))


def _body_headers(scope: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The first Content-Type and Content-Length of a request, read from the raw ASGI headers
    in one pass (Starlette's `Headers` decodes and scans the list per lookup)."""
    ctype = length = None
    for name, value in scope["headers"]:
        if ctype is None and name == b"content-type":
            ctype = value.decode("latin-1")
        elif length is None and name == b"content-length":
            length = value.decode("latin-1")
    return ctype, length


async def _receive_body(request: Request, limit: int, timeout: float) -> bytes:
    """The body, at most `limit` bytes, all of it within `timeout` s (408 after)."""
    from starlette.requests import ClientDisconnect

    # A timer that cancels this task, rather than `asyncio.timeout`: the same effect for a
    # fraction of its cost on every request. `fired` tells our cancel from the server's.
    task = asyncio.current_task()
    assert task is not None
    fired = False

    def expire() -> None:
        nonlocal fired
        fired = True
        task.cancel()

    timer = asyncio.get_running_loop().call_later(timeout, expire)
    receive = request.receive
    chunks: list[bytes] = []
    received = 0
    try:
        while True:
            message = await receive()
            if message["type"] != "http.request":
                raise ClientDisconnect()
            chunk = message.get("body", b"")
            if chunk:
                # Counted while streaming: chunked bodies carry no Content-Length, and a
                # client can lie.
                received += len(chunk)
                if received > limit:
                    raise too_large(limit)
                chunks.append(chunk)
            if not message.get("more_body", False):
                break
    except asyncio.CancelledError:
        if not fired:
            raise
        task.uncancel()
        raise body_timed_out(timeout) from None
    finally:
        timer.cancel()
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def check_body_head(ctype: str | None, declared: str | None, limit: int) -> None:
    """Refuse a request from its head alone: a non-JSON content type (415), a Content-Length
    that is no integer (400) or over `limit` (413, before any of the body is read)."""
    _check_content_type(ctype)
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise ApiError(
                400, "bad_request", "Content-Length is not an integer", "content-length"
            ) from None
        if size > limit:
            raise ApiError(
                413,
                "body_too_large",
                f"body of {size} bytes exceeds the {limit}-byte limit",
                "body",
            )


def too_large(limit: int) -> ApiError:
    """The 413 for a body that grew past `limit` while streaming (chunked, or a lying client)."""
    return ApiError(413, "body_too_large", f"body exceeds the {limit}-byte limit", "body")


def body_timed_out(timeout: float) -> ApiError:
    """The 408 for a body that did not arrive within `timeout` s."""
    return ApiError(408, "body_timeout", f"body not received within {timeout:g} s", "body")


def parse_json_object(raw: bytes, *, allow_empty: bool = False) -> dict[str, Any]:
    """A request body as a JSON object (422 naming `body` otherwise).

    With `allow_empty`, an empty body reads as `{}` (NeMo Evaluator's `/seed_session` takes
    one); otherwise an empty body is a 422.
    """
    if not raw.strip():
        if allow_empty:
            return {}
        raise ApiError(422, "invalid_request", "body: empty; a JSON object is required", "body")
    data = loads(raw)
    if not isinstance(data, dict):
        raise ApiError(
            422,
            "invalid_request",
            f"body: expected a JSON object, got {type(data).__name__}",
            "body",
        )
    return data


async def read_body(request: Request, limit: int,
                    timeout: float = DEFAULT_BODY_TIMEOUT) -> bytes:
    """The raw body of a JSON request, checked as `check_body_head` says, at most `limit`
    bytes, all of it within `timeout` s."""
    ctype, declared = _body_headers(request.scope)
    check_body_head(ctype, declared, limit)
    return await _receive_body(request, limit, timeout)


async def read_json_object(
    request: Request,
    limit: int,
    timeout: float = DEFAULT_BODY_TIMEOUT,
    *,
    allow_empty: bool = False,
) -> dict[str, Any]:
    """Read the body (at most `limit` bytes, within `timeout` s) and parse a JSON object
    (`parse_json_object`)."""
    return parse_json_object(await read_body(request, limit, timeout), allow_empty=allow_empty)
