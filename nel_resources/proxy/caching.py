"""`caching`: answer a request from the disk cache when the same request was answered before.

The key covers everything that changes the answer: the API path and the whole request body
(model, messages, generation settings, tools, extra fields) except fields that only shape
the transport (`stream`, `stream_options`, `user`), plus the sample's repeat index. So a
rerun (a changed scorer, a lost report) costs no request, while the K repeats of a question
stay K independent draws. With `share_temperature_zero: true`, a request at temperature 0
ignores the repeat index (greedy decoding gives the same answer anyway).

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
from nel_resources.proxy.env import ChainEnv
from nel_resources.proxy.fields import FieldSpec
from nel_resources.proxy.types import ProxyRequest, ProxyResponse

FIELDS = {
    "cache_dir": FieldSpec("str", None, nullable=True),
    "bypass": FieldSpec("bool", False),
    "share_temperature_zero": FieldSpec("bool", False),
}
AFFECTS_ANSWERS = False
_TRANSPORT_ONLY = ("stream", "stream_options", "user")
KEY_VERSION = "nel-cache-1"


def cache_key(path: str, body: dict[str, Any], repeat: int | None, *,
              share_temperature_zero: bool = False) -> str:
    """The cache key of a request (hex sha256)."""
    canon = {k: v for k, v in body.items() if k not in _TRANSPORT_ONLY}
    if share_temperature_zero and canon.get("temperature") == 0:
        repeat = None
    raw = orjson.dumps([KEY_VERSION, path, repeat, canon], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(raw).hexdigest()


class Caching:
    """The cache as an interceptor: a hit answers at the request stage, a miss is stored
    at the response stage (2xx answers only)."""

    def __init__(self, cache_dir: Path, bypass: bool, share_temperature_zero: bool) -> None:
        self.store = CacheStore(cache_dir)
        self.bypass = bypass
        self.share_t0 = share_temperature_zero
        self.hits = self.misses = 0
        self.saved_prompt_tokens = self.saved_completion_tokens = 0

    async def on_request(self, req: ProxyRequest) -> ProxyRequest | ProxyResponse:
        # A streamed request shares entries with plain ones (the key leaves `stream` out):
        # the chain replays a hit as a stream and stores a streamed answer assembled. The
        # Responses API's event streams are not replayed, so they stay out of the cache.
        if self.bypass or (req.stream and req.path.endswith("/responses")):
            return req
        key = cache_key(req.path, req.body, req.ctx.repeat, share_temperature_zero=self.share_t0)
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
