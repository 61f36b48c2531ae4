"""The web search relay of one `openclaw` shard (`web_search_provider: tavily`).

OpenClaw's `web_search` tool (nel's Tavily plugin, `openclaw_tavily/`) posts Tavily's
`/search` body to this relay on 127.0.0.1, at its sample's session URL (`/s/<session>`).
The relay adds the API key, forwards to Tavily (or the Tavily-compatible server that
`TAVILY_BASE_URL` names) and records each search for the sample's trajectory. So the key
stays in nel: it is not in the agent's environment or its config files, where the shell
commands the agent runs could read it, and it is redacted from anything the relay records
or returns. The key is read from the environment by name (`TAVILY_API_KEY`, as NeMo
Evaluator 0.3.0 reads it) and never logged.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from nel_resources import web_search

__all__ = ["API_KEY_ENV", "BASE_URL_ENV", "DEFAULT_BASE_URL", "SearchRelay"]

#: Where the key and the provider's base URL come from (OpenClaw's own names for them).
API_KEY_ENV = web_search.KEY_ENV["tavily"]
BASE_URL_ENV = web_search.BASE_URL_ENV["tavily"]
DEFAULT_BASE_URL = web_search.DEFAULT_BASE_URL["tavily"]
# Seconds for one search upstream (OpenClaw's Tavily default).
_TIMEOUT = 30.0
# Largest request body the relay takes from the agent (a search body is a few hundred bytes).
_MAX_BODY = 64 * 1024


class SearchRelay:
    """An aiohttp server on 127.0.0.1 that forwards each session's searches upstream.

    Args:
        api_key: the provider's key (sent upstream as a bearer token, never stored).
        base_url: the provider's base URL (`.../search` is posted to).
    """

    def __init__(self, api_key: str, base_url: str) -> None:
        self._key = api_key
        self.base_url = base_url.rstrip("/")
        self._searches: dict[str, list[dict[str, Any]]] = {}
        self._runner: Any = None
        self._client: Any = None
        self._port: int | None = None

    @classmethod
    def from_env(cls) -> SearchRelay:
        """The relay for the key and base URL in the environment (the key must be set)."""
        return cls(os.environ.get(API_KEY_ENV, ""),
                   os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL)

    @property
    def running(self) -> bool:
        return self._port is not None

    def session_url(self, session: str) -> str:
        """The base URL a sample's plugin posts to."""
        assert self._port is not None, "start() the relay first"
        return f"http://127.0.0.1:{self._port}/s/{session}"

    def searches(self, session: str) -> list[dict[str, Any]]:
        """The searches session `session` made: query, status, result count, latency, error."""
        return list(self._searches.get(session, []))

    async def start(self) -> None:
        """Bind a free port on 127.0.0.1 and serve."""
        import aiohttp
        from aiohttp import web

        app = web.Application(client_max_size=_MAX_BODY)
        app.router.add_post("/s/{session}/search", self._search)
        self._client = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=_TIMEOUT))
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        """Stop serving and close the upstream client (safe to call twice)."""
        if self._runner is not None:
            await self._runner.cleanup()
        if self._client is not None:
            await self._client.close()
        self._runner = self._client = self._port = None

    def _redact(self, text: str) -> str:
        return text.replace(self._key, "***") if self._key else text

    async def _search(self, request: Any) -> Any:
        import aiohttp
        from aiohttp import web

        session = request.match_info["session"]
        record: dict[str, Any] = {"query": None, "status": None, "results": 0, "error": None}
        self._searches.setdefault(session, []).append(record)
        started = time.perf_counter()
        try:
            body = await request.json()
        except ValueError:
            record["error"] = "the search body is not JSON"
            return web.json_response({"detail": record["error"]}, status=400)
        if not isinstance(body, dict) or not isinstance(body.get("query"), str):
            record["error"] = "the search body has no query"
            return web.json_response({"detail": record["error"]}, status=400)
        body.pop("api_key", None)  # the relay's key is the one sent
        record["query"] = body["query"]
        try:
            async with self._client.post(
                    f"{self.base_url}/search", json=body,
                    headers={"Authorization": f"Bearer {self._key}"}) as resp:
                raw = await resp.read()
                record["status"] = resp.status
        except (TimeoutError, aiohttp.ClientError) as exc:
            record["error"] = self._redact(f"{type(exc).__name__}: {exc}")[:300]
            return web.json_response({"detail": f"search upstream failed: {record['error']}"},
                                     status=502)
        finally:
            record["latency_ms"] = round((time.perf_counter() - started) * 1000.0, 2)
        text = self._redact(raw.decode("utf-8", "replace"))
        if resp.status >= 400:
            record["error"] = f"HTTP {resp.status}: {text[:300]}"
        else:
            try:
                record["results"] = len(json.loads(text).get("results") or [])
            except (ValueError, AttributeError):
                record["error"] = "the search answer is not a JSON object"
        return web.Response(text=text, status=resp.status, content_type="application/json")
