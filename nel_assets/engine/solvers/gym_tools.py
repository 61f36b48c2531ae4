"""`resource_service` tools: a NeMo Gym resources server's endpoints as model tools.

A Gym resources server is a FastAPI app: every tool is a `POST /{tool}` route whose request
body model is the tool's parameters, and `/openapi.json` describes them all. Next to its tools
it serves Gym's own protocol endpoints (`/seed_session`, `/verify`, `/aggregate_metrics`,
`/mcp`), which are not tools and are never offered to the model.

Sessions: Gym keeps per-rollout state (a counter, a sandbox, a database) keyed by a session id
that lives in a signed cookie (Starlette's `SessionMiddleware`; the cookie is named after the
server class and instance). The server sets it on the first response; every later request of
the rollout must send it back, or the server starts a fresh session and the state is lost.
`GymResourceTools` therefore keeps one cookie set per sample (`SolveContext.sample_id`), seeds
it with `POST /seed_session` when the solver opens the sample (`open_session`), and sends it
with every tool call.

Unlike NeMo Evaluator 0.3.0's `HttpToolBackend`: it sends no `session_id` body field (Gym reads
the cookie, so each of 0.3.0's calls landed in a new session), it never calls `seed_session`
there, it offers `/aggregate_metrics` to the model as a tool, and a tool at a nested path
(`/a/b`, named `a_b`) was called at `/a_b`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson

from benchmarks.errors import NelError
from nel_assets.engine.solvers.base import SolveContext, ToolOutcome
from nel_assets.engine.solvers.output_cap import cap_text

if TYPE_CHECKING:
    import aiohttp

    from benchmarks._types import SeedResult

__all__ = ["GymResourceTools", "GymToolsError", "gym_run_body", "openapi_tools"]

# Gym's protocol endpoints and the framework's own pages: never tools. (NeMo Gym reserves
# verify, seed_session, aggregate_metrics and mcp; /run belongs to agents.)
_NOT_TOOLS = frozenset({"/seed_session", "/verify", "/aggregate_metrics", "/mcp", "/run",
                        "/health", "/openapi.json", "/docs", "/redoc"})
_EMPTY_PARAMS: dict[str, Any] = {"type": "object", "properties": {}}


class GymToolsError(NelError):
    """The resources server could not list its tools (down, not a Gym server, bad spec)."""


def _resolve(schema: Any, components: Mapping[str, Any], seen: tuple[str, ...] = ()) -> Any:
    """`schema` with every `#/components/schemas/X` reference inlined; a reference back into
    itself (a recursive model) becomes a plain object instead of recursing forever."""
    if isinstance(schema, list):
        return [_resolve(s, components, seen) for s in schema]
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        if name in seen or name not in components:
            return {"type": "object"}
        inlined = _resolve(components[name], components, (*seen, name))
        inlined.pop("title", None)
        return inlined
    return {k: _resolve(v, components, seen) for k, v in schema.items()}


def openapi_tools(spec: Mapping[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """The tools of a Gym resources server's OpenAPI document.

    Each `POST` path that is not one of Gym's own endpoints is a tool, named after its path
    (`/get_weather` -> `get_weather`; `/a/b` -> `a_b`), described by its summary or
    description, with its JSON request body schema (references inlined) as parameters.

    Returns:
        (name, path, OpenAI function-tool spec) per tool, in the document's order.
    """
    components = (spec.get("components") or {}).get("schemas") or {}
    tools: list[tuple[str, str, dict[str, Any]]] = []
    for path, methods in (spec.get("paths") or {}).items():
        if path in _NOT_TOOLS or not isinstance(methods, dict):
            continue
        post = methods.get("post")
        if not isinstance(post, dict):
            continue
        name = path.strip("/").replace("/", "_")
        if not name:
            continue
        body = (((post.get("requestBody") or {}).get("content") or {})
                .get("application/json") or {}).get("schema")
        params = _resolve(body, components) if isinstance(body, dict) and body else {}
        if not isinstance(params, dict) or not params:
            params = dict(_EMPTY_PARAMS)
        params.pop("title", None)
        params.setdefault("type", "object")
        description = post.get("summary") or post.get("description") or name
        tools.append((name, path, {"type": "function", "function": {
            "name": name, "description": str(description), "parameters": params}}))
    return tools


#: A Harbor seed's metadata only the verifier reads (its tests, where they go).
_VERIFIER_ONLY = ("tests", "tests_dir", "verifier_command", "reward_file", "dockerfile")


def gym_run_body(task: SeedResult) -> dict[str, Any]:
    """The body of a Gym rollout for `task` (what Gym agents send to `/run` and resources
    servers get at `/seed_session` and `/verify`): `responses_create_params` with the
    problem's messages (and the row's `tools` / `reasoning` when its metadata carries them),
    plus the item's other fields (`expected_count`, `instance_id`, ...) at the top level."""
    meta = dict(task.metadata or {})
    messages = task.messages or [{"role": "user", "content": task.prompt}]
    if task.system and not any(m.get("role") == "system" for m in messages):
        messages = [{"role": "system", "content": task.system}, *messages]
    rcp: dict[str, Any] = {"input": [dict(m) for m in messages]}
    for key in ("tools", "reasoning"):
        if key in meta:
            rcp[key] = meta.pop(key)
    meta.pop("gym_row", None)  # nel's own bookkeeping (a row index), not the row's
    if meta.get("verifier_command"):  # a Harbor task: its tests stay with nel's verifier
        for key in _VERIFIER_ONLY:  # (an agent that saw them could game them)
            meta.pop(key, None)
    return {"responses_create_params": rcp, **meta}


def _readable(raw: bytes) -> str:
    """A response body as the model should read it: JSON pretty-printed, text as is."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode("utf-8", "replace")
    if isinstance(data, dict | list):
        return orjson.dumps(data, option=orjson.OPT_INDENT_2).decode()
    return raw.decode("utf-8", "replace")


class GymResourceTools:
    """The tools of one NeMo Gym resources server, called per sample with its Gym session.

    A `ToolSource`: `specs()` lists the server's tools (read once from `/openapi.json`);
    `call()` posts the arguments to the tool's path with the sample's session cookie.
    Every failure (HTTP 4xx/5xx, timeout, connection refused, unknown tool) comes back as a
    `ToolOutcome` with `error` set, never as an exception: the model sees it.

    Args:
        base_url: The resources server, e.g. `http://127.0.0.1:8000`.
        timeout: Seconds per tool call (the solver's `tool_timeout`).
        max_output_chars: Longest text given back to the model; longer results keep their
            head and tail.
    """

    def __init__(self, base_url: str, *, timeout: float, max_output_chars: int) -> None:
        self.base_url = base_url.rstrip("/")
        self.name = f"the NeMo Gym resources server {self.base_url}"  # named in tool clashes
        self.timeout = timeout
        self.max_output_chars = max_output_chars
        self._tools: dict[str, tuple[str, dict[str, Any]]] | None = None
        self._cookies: dict[str, dict[str, str]] = {}
        self._http: aiohttp.ClientSession | None = None
        self._lock = asyncio.Lock()

    def _session(self) -> aiohttp.ClientSession:
        import aiohttp

        if self._http is None or self._http.closed:
            # Cookies are kept per sample by hand: one shared jar would mix the sessions of
            # concurrent samples (and aiohttp's jar ignores cookies set by an IP address).
            self._http = aiohttp.ClientSession(
                cookie_jar=aiohttp.DummyCookieJar(),
                connector=aiohttp.TCPConnector(limit=0, force_close=False),
            )
        return self._http

    async def _load(self) -> dict[str, tuple[str, dict[str, Any]]]:
        import aiohttp

        if self._tools is not None:
            return self._tools
        async with self._lock:
            if self._tools is not None:
                return self._tools
            url = f"{self.base_url}/openapi.json"
            try:
                async with self._session().get(
                        url, timeout=aiohttp.ClientTimeout(total=self.timeout)) as resp:
                    raw = await resp.read()
                    if resp.status != 200:
                        raise GymToolsError(f"NeMo Gym resources server {self.base_url}: GET "
                                            f"/openapi.json answered HTTP {resp.status}")
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                raise GymToolsError(f"NeMo Gym resources server {self.base_url} did not answer "
                                    f"GET /openapi.json ({type(exc).__name__}: {exc}); is it "
                                    "running?") from None
            try:
                spec = orjson.loads(raw)
            except orjson.JSONDecodeError:
                raise GymToolsError(f"NeMo Gym resources server {self.base_url}: /openapi.json "
                                    "is not JSON") from None
            if not isinstance(spec, dict) or not isinstance(spec.get("paths"), dict):
                raise GymToolsError(f"NeMo Gym resources server {self.base_url}: /openapi.json "
                                    "has no `paths` (not an OpenAPI document)")
            self._tools = {name: (path, fn) for name, path, fn in openapi_tools(spec)}
            return self._tools

    async def specs(self, ctx: SolveContext | None = None) -> list[dict[str, Any]]:
        """The server's tools as OpenAI function-tool specs.

        Raises:
            GymToolsError: when the server cannot be reached or serves no OpenAPI document.
        """
        return [fn for _, fn in (await self._load()).values()]

    async def open_session(self, task: SeedResult, ctx: SolveContext) -> ToolOutcome:
        """Start the sample's Gym session: `POST /seed_session` with the rollout body of
        `task`, keeping the session cookie the server sets for the sample's tool calls.

        Returns:
            The server's answer; `error` is set when seeding failed (the sample's tools would
            run against an unseeded session, so the solver should fail the sample).
        """
        self._cookies.pop(ctx.sample_id, None)
        return await self._post("/seed_session", gym_run_body(task), ctx, "seed_session")

    def end_session(self, ctx: SolveContext) -> None:
        """Forget the sample's session cookie (the sample is done)."""
        self._cookies.pop(ctx.sample_id, None)

    async def call(self, name: str, arguments: dict[str, Any], ctx: SolveContext) -> ToolOutcome:
        """Call tool `name` with `arguments` in the sample's session."""
        started = time.perf_counter()
        try:
            tools = await self._load()
        except GymToolsError as exc:
            return self._failed(str(exc), started)
        entry = tools.get(name)
        if entry is None:
            known = ", ".join(sorted(tools)) or "none"
            return self._failed(f"unknown tool {name!r}; this server's tools: {known}", started)
        if not isinstance(arguments, dict):
            return self._failed(f"{name}: arguments must be a JSON object, got "
                                f"{type(arguments).__name__}", started)
        return await self._post(entry[0], arguments, ctx, name)

    async def _post(self, path: str, body: dict[str, Any], ctx: SolveContext,
                    name: str) -> ToolOutcome:
        import aiohttp

        started = time.perf_counter()
        jar = self._cookies.setdefault(ctx.sample_id, {})
        try:
            async with self._session().post(
                    f"{self.base_url}{path}", data=orjson.dumps(body, default=str),
                    headers={"Content-Type": "application/json"}, cookies=jar or None,
                    timeout=aiohttp.ClientTimeout(total=self.timeout)) as resp:
                raw = await resp.read()
                # The server (re)sets its session cookie on every answer: keep the newest.
                jar.update({k: m.value for k, m in resp.cookies.items()})
                status = resp.status
        except TimeoutError:
            return self._failed(f"{name}: no answer within {self.timeout:g}s (tool_timeout)",
                                started)
        except (aiohttp.ClientError, OSError) as exc:
            return self._failed(f"{name}: resources server {self.base_url} unreachable "
                                f"({type(exc).__name__}: {exc})", started)
        text = _readable(raw)
        if status >= 400:  # the model sees the server's complaint (a 422 names the field)
            text = f"HTTP {status}: {text}"
        text, truncated = cap_text(text, self.max_output_chars)
        latency = (time.perf_counter() - started) * 1000
        return ToolOutcome(content=text, error=f"{name}: HTTP {status}" if status >= 400 else None,
                           latency_ms=latency, truncated=truncated)

    def _failed(self, message: str, started: float) -> ToolOutcome:
        content, truncated = cap_text(message, self.max_output_chars)
        return ToolOutcome(content=content, error=message,
                           latency_ms=(time.perf_counter() - started) * 1000, truncated=truncated)

    async def close(self) -> None:
        """Close the HTTP connections and forget every session."""
        self._cookies.clear()
        if self._http is not None and not self._http.closed:
            await self._http.close()
        self._http = None
