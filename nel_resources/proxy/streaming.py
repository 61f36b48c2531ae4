"""`streaming`: answer a streamed request with the whole answer, collected from the stream.

With this interceptor in a chain, a request with `"stream": true` still goes upstream as
a stream (asking for the usage chunk, so the answer carries real token counts), but the
proxy collects the upstream's chunks into the answer a non-streamed request would have
got (`streams.StreamAssembler`) and answers the client with that one JSON body; every
response hook sees it. An `error` event in the stream makes the answer that error, with
the error's own status when it gives one (4xx/5xx), else 502; an upstream that refuses
the stream keeps its status. In every whole chat answer, a `content: null` becomes `""`.
This is NeMo Evaluator 0.3.0's `streaming` interceptor (no config fields).

Unlike 0.3.0, a streamed text completion (`/v1/completions`, `choices[].text`) is
collected into a `text_completion` with its text: 0.3.0 drops the text and answers a chat
completion with empty content. Without this interceptor nel streams the answer back
chunk by chunk (the response hooks still see it whole once it has ended).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from time import perf_counter
from typing import Any

from nel_resources.proxy.env import ChainEnv
from nel_resources.proxy.fields import FieldSpec
from nel_resources.proxy.streams import StreamAssembler
from nel_resources.proxy.types import ProxyRequest, ProxyResponse

FIELDS: dict[str, FieldSpec] = {}
# The client gets one body instead of a stream (and an error event becomes an error
# status): what an agent reads changes, so it is fingerprinted.
AFFECTS_ANSWERS = True


def _error_status(error: Any) -> int:
    """The status of an error event: its own 4xx/5xx, else 502 (the upstream failed)."""
    if isinstance(error, dict):
        status = error.get("status") or error.get("status_code")
        if isinstance(status, int) and not isinstance(status, bool) and 400 <= status < 600:
            return status
    return 502


def _ask_for_usage(req: ProxyRequest) -> None:
    """A streamed chat request asks for the usage chunk unless it says otherwise."""
    if not req.path.endswith("/chat/completions"):
        return
    opts = req.body.get("stream_options")
    if opts is None:
        req.body["stream_options"] = {"include_usage": True}
    elif isinstance(opts, dict) and "include_usage" not in opts:
        req.body["stream_options"] = {**opts, "include_usage": True}


async def collect(stream: Callable[[ProxyRequest], AsyncIterator[dict[str, Any]]],
                  req: ProxyRequest) -> ProxyResponse:
    """The whole answer to the streamed request `req`, from the endpoint's `stream`."""
    import aiohttp

    from nel_resources.proxy.endpoint import UpstreamStreamError

    _ask_for_usage(req)
    whole = StreamAssembler(req.path)
    t0 = perf_counter()
    try:
        async with contextlib.aclosing(stream(req)) as chunks:  # type: ignore[type-var]
            async for chunk in chunks:
                if "error" in chunk:
                    return ProxyResponse(_error_status(chunk["error"]), chunk,
                                         (perf_counter() - t0) * 1000.0, 1, req.ctx)
                whole.add(chunk)
    except UpstreamStreamError as exc:
        return ProxyResponse(exc.status, exc.text.encode(), (perf_counter() - t0) * 1000.0,
                             1, req.ctx)
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:  # cut or unreachable
        return ProxyResponse(502, f"upstream stream failed: {type(exc).__name__}: {exc}".encode(),
                             (perf_counter() - t0) * 1000.0, 1, req.ctx)
    return whole.response((perf_counter() - t0) * 1000.0, req.ctx)


class Streaming:
    """Marks its chain as collecting streams (`Chain.run`); makes null contents empty."""

    collects_streams = True
    reports_changes = ("on_response",)

    def on_response(self, resp: ProxyResponse) -> ProxyResponse:
        body = resp.body
        if isinstance(body, dict):
            for choice in body.get("choices") or ():
                msg = choice.get("message") if isinstance(choice, dict) else None
                if isinstance(msg, dict) and "content" in msg and msg["content"] is None:
                    msg["content"] = ""
                    resp.raw = None
        return resp


def build(cfg: dict[str, Any], env: ChainEnv) -> Streaming:
    """The interceptor (it has no config)."""
    return Streaming()
