"""`caching`: answer a request from the disk cache when the same request was answered before.

The key is the request as it is finally sent upstream: the upstream's base URL (scheme,
host, port, path) and the API path, the headers sent with it (secrets left out: a new API
key does not empty the cache), and the whole body after every other interceptor and the
endpoint's `extra_body` (model, messages, generation settings, tools, extra fields) except
fields that only shape the transport (`stream`, `stream_options`, `user`), plus the
sample's repeat index. The chain runs this request stage after every other one
(`sees_final_request`), so what an interceptor adds (a system message, a payload edit)
is in the key wherever `caching` sits in the config, and its response stage runs first:
an entry is the upstream's answer as received, and a hit goes through the response hooks
(`reasoning`, ...) as a miss would. Two endpoints serving the same model name, or two
chains that send different requests, never share an entry; the store (one SQLite file
under `cache_dir`) is shared by every run. So a rerun (a changed scorer, a lost report)
costs no request, while the K repeats of a question stay K independent draws. With
`share_temperature_zero: true`, a request at temperature 0 ignores the repeat index
(greedy decoding gives the same answer anyway).

NeMo Evaluator 0.3.0 keys its cache per attempt and session, so its reruns never hit; here
the key is the request itself (see the README).
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import orjson

from nel_resources.proxy.cache_store import CacheStore
from nel_resources.proxy.env import LOG, ChainEnv
from nel_resources.proxy.fields import FieldSpec
from nel_resources.proxy.types import ProxyRequest, ProxyResponse
from nel_resources.wire.redact import is_secret_header

FIELDS = {
    "cache_dir": FieldSpec("str", None, nullable=True),
    "bypass": FieldSpec("bool", False),
    "share_temperature_zero": FieldSpec("bool", False),
}
AFFECTS_ANSWERS = False
_TRANSPORT_ONLY = ("stream", "stream_options", "user")
# 2: the upstream and the request as sent (1 keyed the body as `caching` first saw it).
KEY_VERSION = "nel-cache-2"


def cache_key(upstream: bytes, path: str, body: dict[str, Any], headers: dict[str, str],
              repeat: int | None, *, share_temperature_zero: bool = False) -> str:
    """The cache key of a request (hex sha256).

    Args:
        upstream: the endpoint's identity (`upstream_identity`).
        path: the API path below the upstream's base URL.
        body: the body as sent (after every interceptor and the endpoint's `extra_body`).
        headers: the request's own headers (those the interceptors set).
        repeat: the sample's repeat index.
        share_temperature_zero: a request at temperature 0 ignores `repeat`.
    """
    canon = {k: v for k, v in body.items() if k not in _TRANSPORT_ONLY}
    if share_temperature_zero and canon.get("temperature") == 0:
        repeat = None
    hdrs = {k.lower(): v for k, v in headers.items() if not is_secret_header(k)} if headers else None
    raw = orjson.dumps([KEY_VERSION, path, repeat, hdrs, canon], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(upstream + raw).hexdigest()


def upstream_identity(endpoint: Any) -> bytes | None:
    """What decides which model answers a request besides the request itself: the
    endpoint's `cache_identity()` (its base URL and the headers it sends with every
    request) encoded, or None for an endpoint that cannot say (its requests are not cached:
    an entry must never cross endpoints)."""
    identity = getattr(endpoint, "cache_identity", None)
    if identity is None:
        return None
    return orjson.dumps(identity(), option=orjson.OPT_SORT_KEYS) + b"\n"


class Caching:
    """The cache as an interceptor: a hit answers at the request stage, a miss is stored
    at the response stage (2xx answers only). The chain binds it to its endpoint
    (`bind_endpoint`) and runs its request stage last (`sees_final_request`)."""

    sees_final_request = True

    def __init__(self, cache_dir: Path, bypass: bool, share_temperature_zero: bool) -> None:
        self.store = CacheStore(cache_dir)
        self.bypass = bypass
        self.share_t0 = share_temperature_zero
        self._upstream: bytes | None = None
        self._extra_body: dict[str, Any] = {}
        self.hits = self.misses = 0
        self.saved_prompt_tokens = self.saved_completion_tokens = 0

    def bind_endpoint(self, endpoint: Any) -> None:
        """Key requests by `endpoint` (the chain calls this when it is built)."""
        self._upstream = upstream_identity(endpoint)
        if self._upstream is None:
            LOG.warning("caching: %s does not say which upstream it sends to; its requests "
                        "are not cached", type(endpoint).__name__)
        self._extra_body = dict(getattr(endpoint, "extra_body", None) or {})

    async def on_request(self, req: ProxyRequest) -> ProxyRequest | ProxyResponse:
        # A streamed request shares entries with plain ones (the key leaves `stream` out):
        # the chain replays a hit as a stream and stores a streamed answer assembled. The
        # Responses API's event streams are not replayed, so they stay out of the cache.
        upstream = self._upstream
        if upstream is None or self.bypass or (req.stream and req.path.endswith("/responses")):
            return req
        # The body as the endpoint will send it (`ClientEndpoint.wire` adds `extra_body`).
        body = {**req.body, **self._extra_body} if self._extra_body else req.body
        key = cache_key(upstream, req.path, body, req.headers, req.ctx.repeat,
                        share_temperature_zero=self.share_t0)
        raw = self.store.get(key)
        if raw is not None:
            try:
                body = orjson.loads(raw)
            except orjson.JSONDecodeError:
                body = None
            if isinstance(body, dict):
                self.hits += 1
                usage = body.get("usage") or {}
                self.saved_prompt_tokens += usage.get("prompt_tokens") or usage.get("input_tokens") or 0
                self.saved_completion_tokens += (usage.get("completion_tokens")
                                                 or usage.get("output_tokens") or 0)
                return ProxyResponse(200, body, 0.0, 0, req.ctx, cached=True)
        self.misses += 1
        req.ctx.extra["cache_key"] = key
        return req

    async def on_response(self, resp: ProxyResponse) -> ProxyResponse:
        key = resp.ctx.extra.pop("cache_key", None)
        if key is not None and resp.ok and isinstance(resp.body, dict) and not resp.cached:
            self.store.put(key, orjson.dumps(resp.body))
        return resp

    async def close(self) -> None:
        """Commit what is queued (off the event loop)."""
        await asyncio.to_thread(self.store.flush)

    def stats(self) -> dict[str, Any]:
        """Hits, misses and the tokens the hits saved."""
        return {"cache_hits": self.hits, "cache_misses": self.misses,
                "cache_saved_prompt_tokens": self.saved_prompt_tokens,
                "cache_saved_completion_tokens": self.saved_completion_tokens,
                "cache_saved_tokens": self.saved_prompt_tokens + self.saved_completion_tokens}


def build(cfg: dict[str, Any], env: ChainEnv) -> Caching:
    """The interceptor from its checked config."""
    cache_dir = Path(cfg["cache_dir"]).expanduser() if cfg["cache_dir"] else env.cache_dir
    return Caching(cache_dir, cfg["bypass"], cfg["share_temperature_zero"])
