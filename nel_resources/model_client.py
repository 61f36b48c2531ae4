"""The async model client: OpenAI chat/completions/responses over one aiohttp session.

Measured on this machine (DESIGN.md §5): httpx's default pool collapses at concurrency 64,
aiohttp does not, so the hot path is aiohttp with orjson bodies, one keep-alive connector
per run and an adaptive limit of `max_concurrent` requests in flight. Retries use
exponential backoff with full jitter on 429/5xx/timeouts and transport errors of any kind
(reset, EOF mid-body, a truncated or unparseable 200 body) and honour `Retry-After`; other
4xx are not retried, and 401/403 abort the run with one clear error.

A slot is held only while a request is on the wire: a sample waiting out its back-off
holds none, so other samples keep the endpoint busy. `requests_sent` counts every request
written to the wire (neither transport resends anything behind the client's back).
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson

from benchmarks.errors import NelError
from nel_resources.adaptive_limit import AdaptiveLimit
from nel_resources.config import ServiceConfig
from nel_resources.deadlines import Deadlines
from nel_resources.endpoint_url import split_url, url_secrets
from nel_resources.hang_cut import HangCut
from nel_resources.http_raw import RawHTTPPool, StaleConnectionError
from nel_resources.openai_fields import (
    normalize_base_url,
    responses_finish,
    retry_after_seconds,
    sampling_params,
    total_tokens,
)
from nel_resources.redact import Redactor, client_secrets, is_secret_header

if TYPE_CHECKING:
    import aiohttp

    from nel_resources.proxy import Chain
    from nel_resources.proxy.compiled import CompiledChain

# What a broken exchange raises on the raw transport: OSError covers the raw client's
# RawHTTPError and every socket error. A client on aiohttp adds aiohttp's errors (reset, EOF
# or an incomplete chunked read mid-body, malformed HTTP): `ModelClient._transport_errors`.
# aiohttp itself is imported only by a client that uses it (~0.12 s and ~6 MB otherwise
# spent on every plain-HTTP run).
_RAW_TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (OSError, asyncio.IncompleteReadError)


class _BadBody(Exception):
    """An HTTP 200 whose body is not a JSON object (cut short on the way, most likely)."""


class _AttemptCut(Exception):
    """The hang cut ended an attempt that went silent far past the run's answers."""


class ModelError(Exception):
    """A request that failed for good; `category` is a failure category."""

    def __init__(self, message: str, category: str, status: int | None = None,
                 attempts: int = 1):
        super().__init__(message)
        self.category = category
        self.status = status
        self.attempts = attempts


class ChainStopError(NelError):
    """An interceptor stopped the run (`raise_client_errors` on a 4xx)."""


class AuthError(NelError):
    """401/403 from the endpoint: the whole run stops, nothing is retried."""


class EndpointUnreachableError(NelError):
    """The endpoint did not answer at all (connection refused, DNS, timeout)."""


@dataclass(slots=True)
class ModelResponse:
    """What one model call produced (NeMo Evaluator's `ModelResponse` fields included).

    Attributes:
        content: The answer text.
        reasoning_content: Reasoning the server returned separately, if any.
        finish_reason: `stop`, `length`, ...
        prompt_tokens: Input tokens (server-reported).
        completion_tokens: Output tokens (server-reported).
        reasoning_tokens: Reasoning tokens, when the server reports them.
        latency_ms: Time from the first attempt to the answer.
        attempts: Requests it took (retries included).
        model: The model the server says answered.
        raw: The parsed response body (redacted).
        total_tokens: `usage.total_tokens`, or prompt + completion when only those are given.
    """

    content: str
    reasoning_content: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None
    latency_ms: float = 0.0
    attempts: int = 1
    model: str | None = None
    raw: dict[str, Any] | None = field(default=None, repr=False)
    total_tokens: int | None = None
    cached: bool = False

    @property
    def raw_response(self) -> dict[str, Any]:
        """The full response body (NeMo Evaluator's name for `raw`)."""
        return self.raw or {}


class ModelClient:
    """An OpenAI-compatible client bound to one endpoint and one set of generation params.

    Use as an async context manager (one aiohttp session per run). `timeout` bounds each
    attempt (a hung attempt costs one timeout, then is retried); `adapt_window` is the
    period, in seconds, over which 429s are judged and the concurrency grows back.
    An attempt silent far past the latencies answered so far is cut and retried well before
    `timeout` (`hang_cut`, see hang_cut.py; `False` turns it off).
    """

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        protocol: str = "chat_completions",
        api_key: str | None = None,
        generation: dict[str, Any] | None = None,
        timeout: float = 120.0,
        connect_timeout: float = 10.0,
        max_concurrent: int = 64,
        max_retries: int = 5,
        retry_backoff: float = 0.5,
        max_backoff: float = 30.0,
        headers: dict[str, str] | None = None,
        transport: str = "auto",
        adapt_window: float = 0.5,
        temperature: float | None = None,
        max_tokens: int | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: list[str] | None = None,
        frequency_penalty: float | None = None,
        presence_penalty: float | None = None,
        retry_on_status: list[int] | None = None,
        hang_cut: HangCut | bool = True,
    ) -> None:
        if not (isinstance(timeout, int | float) and timeout > 0):
            raise NelError(f"ModelClient: timeout must be a positive number of seconds, not {timeout!r}")
        if isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int) or max_concurrent < 1:
            raise NelError(f"ModelClient: max_concurrent must be an integer >= 1, not {max_concurrent!r}")
        # Credentials in the URL are sent as meant: the user-info as Basic auth (never in
        # the Host header), the query string (`?api-key=...`) on every request.
        endpoint = split_url(base_url)
        self.base_url = normalize_base_url(endpoint.base)
        self._query = endpoint.query
        self.model = model
        self.protocol = protocol
        # The sampling arguments (NeMo Evaluator's names) are checked and win over `generation`.
        self.generation = {**(generation or {}), **sampling_params(
            temperature=temperature, max_tokens=max_tokens, top_p=top_p, seed=seed, stop=stop,
            frequency_penalty=frequency_penalty, presence_penalty=presence_penalty)}
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.max_concurrent = max_concurrent
        self.max_retries = max_retries
        self.retry_backoff = retry_backoff
        self.max_backoff = max_backoff
        given = dict(headers or {})
        # A configured `content-type` (any case) replaces nel's, never goes beside it.
        own_type = {} if any(k.lower() == "content-type" for k in given) else {
            "Content-Type": "application/json"}
        self._headers = {**own_type, **given}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        elif endpoint.basic_auth and not any(is_secret_header(k) for k in given):
            self._headers["Authorization"] = endpoint.basic_auth
        # Everything that leaves this client (replies, error text) is redacted here, once:
        # a server that echoes the key (in an error body, say) must not put it into
        # results, journals, Parquet, exports or the Dagster event log.
        self._redact = Redactor(client_secrets(api_key, self._headers) | url_secrets(base_url))
        self._session: aiohttp.ClientSession | None = None
        self._transport_errors: tuple[type[BaseException], ...] = _RAW_TRANSPORT_ERRORS
        # Adaptive concurrency: shrinks when a window's answers are mostly 429s, grows
        # back with time (see adaptive_limit.py for why not with successes).
        self._limit = AdaptiveLimit(max_concurrent, window=adapt_window)
        self._auth_failed: AuthError | None = None
        self.requests_sent = 0
        self._rng = random.Random(0x5EED)
        path = {"chat_completions": "/chat/completions", "completions": "/completions",
                "responses": "/responses"}.get(protocol)
        if path is None:
            raise NelError(f"unknown protocol {protocol!r}: use chat_completions, completions or responses")
        self._url = self.base_url + path
        parsed = urlsplit(self.base_url)
        if transport not in ("auto", "raw", "aiohttp"):
            raise NelError(f"unknown transport {transport!r}: use auto, raw or aiohttp")
        if transport == "raw" and parsed.scheme != "http":
            raise NelError("transport raw speaks plain http only; use aiohttp for https")
        # Plain-HTTP endpoints get the lean keep-alive client (3x aiohttp's request rate
        # here); HTTPS, proxies and the rest stay with aiohttp.
        self.transport = "raw" if transport == "raw" or (transport == "auto" and parsed.scheme == "http") \
            else "aiohttp"
        self._host = parsed.hostname or "127.0.0.1"
        self._port = parsed.port or (443 if parsed.scheme == "https" else 80)
        self._path = parsed.path + path
        self._base_path = parsed.path
        self._deadlines = Deadlines(hang=HangCut() if hang_cut is True else hang_cut or None)
        self._raw_headers = b"".join(
            f"{k}: {v}\r\n".encode("latin-1") for k, v in self._headers.items())
        self._pool: RawHTTPPool | None = None
        # Statuses retried with backoff: 429 and 5xx unless a chain's endpoint names them.
        self._retry_status = frozenset(retry_on_status) if retry_on_status is not None else None
        # The service's interceptor chain (nel_resources/proxy), run around every request.
        self.chain: Chain | None = None
        # The chain `generate` last found it can run inline (`_runs_inline`), and the
        # path its requests carry (sliced once here, not per request).
        self._inline_chain: Chain | None = None
        # That chain compiled (`proxy/compiled.py`), or None when it needs the generic path.
        self._compiled_chain: CompiledChain | None = None
        self._chain_path = path

    async def __aenter__(self) -> ModelClient:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Create the HTTP session (keep-alive connections sized to `max_concurrent`)."""
        if self.transport == "raw":
            if self._pool is None:
                self._pool = RawHTTPPool(self._host, self._port, limit=self.max_concurrent,
                                         connect_timeout=self.connect_timeout,
                                         host_header=urlsplit(self.base_url).netloc)  # no user-info
            return
        if self._session is None:
            import aiohttp

            self._transport_errors = (aiohttp.ClientError, *_RAW_TRANSPORT_ERRORS)
            conn = aiohttp.TCPConnector(limit=self.max_concurrent, ttl_dns_cache=300,
                                        enable_cleanup_closed=True)
            # Session-level headers and no cookie jar: per-request header merging and
            # cookie handling were a measurable share of aiohttp's cost per call.
            self._session = aiohttp.ClientSession(
                connector=conn,
                headers=self._headers,
                cookie_jar=aiohttp.DummyCookieJar(),
                timeout=aiohttp.ClientTimeout(total=self.timeout, sock_connect=self.connect_timeout),
                json_serialize=lambda o: orjson.dumps(o).decode(),
                skip_auto_headers=("User-Agent",),
            )

    async def close(self) -> None:
        """Close the session and the chain (and stop the concurrency window's timer)."""
        if self.chain is not None:
            await self.chain.close()
        self._limit.close()
        self._deadlines.close()
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _with_query(self, target: str) -> str:
        """`target` with the URL's own query string (the user's `?api-key=...`) kept."""
        if not self._query:
            return target
        return f"{target}{'&' if '?' in target else '?'}{self._query}"

    @property
    def base_headers(self) -> dict[str, str]:
        """The headers every request carries (content type, the key, the service's own)."""
        return dict(self._headers)

    def redact_text(self, text: str) -> str:
        """`text` with this client's secrets masked."""
        return self._redact.text(text)

    def redact_bytes(self, raw: bytes) -> bytes:
        """`raw` with this client's secrets masked."""
        return self._redact.bytes(raw) if self._redact else raw

    # ------------------------------------------------------------------ preflight
    async def check(self) -> None:
        """Fail fast when the endpoint is unreachable or rejects the key.

        Sends one GET to `/models`: any HTTP answer (even 404) proves the server is there.
        """
        await self.open()
        try:
            status, _, body = await self._send("GET", "/models", b"", min(self.timeout, 30))
        except (TimeoutError, *self._transport_errors) as exc:
            raise EndpointUnreachableError(
                f"cannot reach the model endpoint {self.base_url} "
                f"({type(exc).__name__}: {str(exc) or 'timed out'}); is the server running?"
            ) from None
        if status in (401, 403):
            text = self._redact.text(body[:200].decode("utf-8", "replace").strip())
            raise AuthError(
                f"the endpoint {self.base_url} refused the API key (HTTP {status}: {text}); "
                "check the key or the api_key_env variable"
            )

    async def _send(self, method: str, subpath: str, data: bytes, timeout: float,
                    headers: dict[str, str] | None = None, cut: float = 0.0) -> tuple[int, Any, bytes]:
        """One HTTP exchange on the chosen transport: (status, headers, body). `cut` > 0
        lets the hang cut end it (raising _AttemptCut) at `cut` times the learnt limit."""
        if self._pool is not None:
            raw_headers = self._raw_headers
            if headers:
                merged = {**self._headers, **headers}
                raw_headers = b"".join(f"{k}: {v}\r\n".encode("latin-1") for k, v in merged.items())
            # A shared deadline check, not asyncio.timeout (~10 us a request: deadlines.py).
            deadline = self._deadlines.arm(timeout, cut)
            try:
                r = await self._pool.request(method, self._with_query(self._base_path + subpath),
                                             raw_headers, data, deadline)
            except asyncio.CancelledError:
                self._timed_out(deadline, timeout)
                raise
            finally:
                self._deadlines.disarm(deadline)
            if r.status == 200:
                self._deadlines.answered(deadline)
            return r.status, r.headers, r.body
        assert self._session is not None
        import aiohttp  # loaded by `open` already

        # aiohttp keeps the timeout; the deadline (after it) is there for the hang cut only.
        deadline = self._deadlines.arm(timeout + 1.0, cut)
        try:
            async with self._session.request(
                method, self._with_query(self.base_url + subpath), data=data or None, headers=headers or None,
                timeout=aiohttp.ClientTimeout(total=timeout, sock_connect=self.connect_timeout),
            ) as resp:
                deadline.scale = 0.0  # its head arrived: answering, not hung (no byte counts here)
                out = resp.status, resp.headers, await resp.read()
        except asyncio.CancelledError:
            self._timed_out(deadline, timeout)
            raise
        finally:
            self._deadlines.disarm(deadline)
        if out[0] == 200:
            self._deadlines.answered(deadline)
        return out

    @staticmethod
    def _timed_out(deadline: Any, timeout: float) -> None:
        """A cancelled exchange: raise what a fired deadline or a hang cut means."""
        if deadline.fired or deadline.cut:
            deadline.task.uncancel()
            if deadline.cut:
                raise _AttemptCut() from None
            raise TimeoutError(f"no answer within {timeout:g}s") from None

    # ------------------------------------------------------------------ requests
    def build_payload(self, messages: list[dict[str, Any]] | None, prompt: str | None,
                      overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        """The JSON body for one request."""
        body: dict[str, Any] = {}
        if self.model:
            body["model"] = self.model
        if self.protocol == "chat_completions":
            body["messages"] = messages
        elif self.protocol == "completions":
            body["prompt"] = prompt
        else:  # responses
            body["input"] = messages
            gen = dict(self.generation)
            if "max_tokens" in gen:
                gen["max_output_tokens"] = gen.pop("max_tokens")
            body.update(gen)
            if overrides:
                body.update(overrides)
            return body
        body.update(self.generation)
        if overrides:
            body.update(overrides)
        return body

    def encode(self, messages: list[dict[str, Any]] | None = None, prompt: str | None = None,
               overrides: dict[str, Any] | None = None) -> bytes:
        """The serialised request body (the loop encodes each problem once for all repeats)."""
        return orjson.dumps(self.build_payload(messages, prompt, overrides))

    async def generate(self, messages: list[dict[str, Any]] | None = None,
                       prompt: str | None = None,
                       overrides: dict[str, Any] | None = None, *,
                       body: bytes | None = None, repeat: int | None = None,
                       session_id: str | None = None) -> ModelResponse:
        """One model call with retries; raises ModelError (per sample) or AuthError (run).

        `body` is a pre-encoded request (from `encode`); otherwise it is built here.
        `repeat` and `session_id` reach the interceptor chain (the cache keeps repeats
        apart; `turn_counter` counts turns per session); without a chain they are unused.
        """
        if self._auth_failed is not None:
            raise self._auth_failed
        if self._session is None and self._pool is None:
            await self.open()
        chain = self.chain
        if chain is not None:
            if chain is not self._inline_chain and not self._runs_inline(chain):
                return await self._generate_chained(messages, prompt, overrides, body, repeat,
                                                    session_id)
            compiled = self._compiled_chain
            if compiled is not None:
                # The chain compiled (`proxy/compiled.py`): what `Chain.before`, the endpoint
                # and `Chain.after` do, on the body and the answer themselves, in this
                # coroutine (a coroutine level more would cost at every suspension).
                if body is None:
                    body = self.encode(messages, prompt, overrides)
                try:
                    data = compiled.request(body, session_id)
                except _chain_types()[0] as exc:
                    raise self._refused(exc) from None
                t0 = time.perf_counter()
                status, obj, attempts, _ = await self._post(data, compiled.path, compiled.headers)
                latency_ms = (time.perf_counter() - t0) * 1000.0
                if status != 200 and obj.__class__ is str:
                    obj = obj.encode()  # as the endpoint's `answer`: hooks see bytes
                try:
                    compiled.response(status, obj, latency_ms)
                except _chain_types()[0] as exc:
                    raise self._refused(exc) from None
                if status != 200 or obj.__class__ is not dict:
                    raise self._chain_error(status, obj, attempts)
                return self._from_obj(obj, latency_ms, attempts)
            endpoint = chain.endpoint
            # A plain chain around this client's own transport: its stages run here as
            # plain calls, so the wait on the wire suspends and resumes through no extra
            # coroutine levels (each one costs at every suspension), as `Chain.run` would.
            try:
                req = chain.before(self._chain_request(messages, prompt, overrides, body,
                                                       repeat, session_id))
            except _chain_types()[0] as exc:
                raise self._refused(exc) from None
            if isinstance(req, _proxy_response()):  # answered by a hook (a cache hit)
                resp = req
            else:
                data, headers = endpoint.wire(req)
                path, ctx = req.path, req.ctx
                # The request (its parsed body and what the hooks added) is not needed past
                # here: freed now, while it is still in the CPU's cache, not after the
                # exchange, when 63 others may have run through the loop.
                del req
                t0 = time.perf_counter()
                status, obj, attempts, _ = await self._post(data, path, headers)
                resp = endpoint.answer(ctx, status, obj, attempts, t0)
            try:
                resp = chain.after(resp)
            except _chain_types()[0] as exc:
                raise self._refused(exc) from None
            return self._chained_answer(resp)
        data = body if body is not None else self.encode(messages, prompt, overrides)
        t0 = time.perf_counter()
        status, obj, attempts, _ = await self._post(data, self._url[len(self.base_url):], None)
        if status != 200:
            raise ModelError(f"HTTP {status}: {obj}", "error", status, attempts)
        return self._from_obj(obj, (time.perf_counter() - t0) * 1000.0, attempts)

    def _runs_inline(self, chain: Chain) -> bool:
        """Whether `generate` runs `chain`'s stages itself (a plain chain around this
        client's own transport); remembered, so a request pays one identity test."""
        endpoint = chain.endpoint
        if chain.plain and isinstance(endpoint, _client_endpoint()) and endpoint.client is self:
            from nel_resources.proxy.compiled import compile_chain

            self._inline_chain = chain
            # Compiled once per chain: its stages as two plain functions over the body and
            # the answer (`proxy/compiled.py`), or None when a hook needs the generic path.
            self._compiled_chain = compile_chain(chain, self._chain_path)
            return True
        return False

    def _chain_request(self, messages: list[dict[str, Any]] | None, prompt: str | None,
                       overrides: dict[str, Any] | None, body: bytes | None,
                       repeat: int | None, session_id: str | None) -> Any:
        """A new request for the chain (a `ProxyRequest`), carrying the encoded body as its
        `raw` bytes: sent as they are when no hook changes the body (`types.py`)."""
        _, ProxyRequest, RequestContext = _chain_types()
        if body is None:
            body = self.encode(messages, prompt, overrides)
        # A fresh copy per request: interceptors edit bodies in place, and the loop shares
        # one encoded body between a problem's repeats. Every field by position: keyword
        # arguments and default factories cost the dataclass inits a third more.
        return ProxyRequest(orjson.loads(body), {}, self._chain_path,
                            RequestContext(session_id, repeat, {}), False, body)

    def _refused(self, exc: Exception) -> Exception:
        """What an interceptor's refusal becomes: the run's stop, or the sample's error."""
        if getattr(exc, "fatal", False):
            return ChainStopError(self._redact.text(str(exc)))
        return ModelError(self._redact.text(str(exc)), "interceptor", None, 0)

    async def _generate_chained(self, messages: list[dict[str, Any]] | None, prompt: str | None,
                                overrides: dict[str, Any] | None, body: bytes | None,
                                repeat: int | None, session_id: str | None) -> ModelResponse:
        """One request through a chain that awaits (an async hook, or another endpoint)."""
        assert self.chain is not None
        req = self._chain_request(messages, prompt, overrides, body, repeat, session_id)
        try:
            resp = await self.chain.run(req)
        except _chain_types()[0] as exc:
            raise self._refused(exc) from None
        return self._chained_answer(resp)

    def _chained_answer(self, resp: Any) -> ModelResponse:
        """The chain's response as nel's answer, or the error it is."""
        if resp.status != 200 or not isinstance(resp.body, dict):
            raise self._chain_error(resp.status, resp.body, resp.attempts)
        out = self._from_obj(resp.body, resp.latency_ms, resp.attempts)
        out.cached = resp.cached
        return out

    def _chain_error(self, status: int, body: Any, attempts: int) -> ModelError:
        """The error a chain's answer that is not a 200 with a JSON object is."""
        text = body if isinstance(body, str | bytes) else orjson.dumps(body)
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        return ModelError(f"HTTP {status}: {self._redact.text(text)[:300]}", "error",
                          status, attempts)

    async def exchange(self, body: dict[str, Any], path: str, headers: dict[str, str] | None
                       ) -> tuple[int, dict[str, Any] | bytes, int, float]:
        """One request of the chain's endpoint: (status, parsed body or error text, attempts,
        latency in ms). Retryable failures are retried here; a 4xx comes back as an answer."""
        t0 = time.perf_counter()
        status, obj, attempts, _ = await self._post(orjson.dumps(body), path, headers)
        if status != 200:
            obj = obj.encode() if isinstance(obj, str) else obj
        return status, obj, attempts, (time.perf_counter() - t0) * 1000.0

    async def _post(self, data: bytes, subpath: str, headers: dict[str, str] | None
                    ) -> tuple[int, Any, int, bytes]:
        """POST with retries: (200, parsed body, attempts, the redacted bytes it was parsed
        from), or (status, redacted error text, attempts, b"") for a 4xx that retrying cannot
        fix. Raises ModelError after the last retry."""
        attempt = cuts = 0
        while True:
            attempt += 1
            status: int | None = None
            retry_after: float | None = None
            stale = False
            # The slot covers one attempt on the wire, never the back-off sleep below.
            await self._limit.acquire(retry=attempt > 1)
            try:
                self.requests_sent += 1
                status, resp_headers, raw = await self._send("POST", subpath, data, self.timeout,
                                                             headers, 2.0 ** cuts)
            except _AttemptCut:
                # Hung, by the run's own latencies: resent at once, with a cut twice as late
                # (a genuinely long answer gets its time), and no retry used up.
                cuts += 1
                continue
            except TimeoutError:
                # First: TimeoutError is an OSError, and aiohttp's read timeouts are
                # connection errors too.
                category, message = "timeout", f"request timed out after {self.timeout:g}s"
            except self._transport_errors as exc:
                stale = isinstance(exc, StaleConnectionError)
                category, message = "error", f"connection error: {type(exc).__name__}: {exc}"
            else:
                self._limit.record(throttled=status == 429)
                if status == 200:
                    if self._redact:
                        raw = self._redact.bytes(raw)
                    try:
                        return 200, self._parse(raw), attempt, raw
                    except _BadBody as exc:  # cut short on the way: as retryable as a reset
                        category, message = "error", str(exc)
                else:
                    retry_after = retry_after_seconds(resp_headers)
                    # Redact before cutting, so no prefix of a key survives at the cut.
                    text = self._redact.text(raw.decode("utf-8", "replace"))[:300].strip()
                    if status in (401, 403):
                        self._auth_failed = AuthError(
                            f"the endpoint {self.base_url} refused the request "
                            f"(HTTP {status}: {text}); check the API key"
                        )
                        raise self._auth_failed
                    retryable = (status in self._retry_status if self._retry_status is not None
                                 else status == 429 or status >= 500)
                    if not retryable:  # the request itself is wrong, retrying cannot help
                        return status, text, attempt, b""
                    if status == 429:
                        category, message = "rate_limit", f"HTTP 429: {text}"
                    else:
                        category, message = "error", f"HTTP {status}: {text}"
            finally:
                self._limit.release()
            if attempt - cuts > self.max_retries:
                # Transport error text can quote a URL or header too: redacted like replies.
                raise ModelError(self._redact.text(message), category, status, attempt)
            if stale:
                continue  # a dead idle connection says nothing about the server: resend now
            # Full jitter keeps many workers from retrying in lockstep.
            delay = min(self.max_backoff, self.retry_backoff * (2 ** (attempt - 1)))
            delay = self._rng.uniform(0, delay)
            if retry_after is not None:
                delay = max(delay, min(retry_after, self.max_backoff * 4))
            await asyncio.sleep(delay)

    async def chat(self, prompt: str | None = None, system: str | None = None,
                   messages: list[dict[str, Any]] | None = None) -> ModelResponse:
        """One chat request (NeMo Evaluator's `ModelClient.chat`), with nel's retries.

        Args:
            prompt: The user message (ignored when `messages` is given).
            system: A system message put before it.
            messages: A whole conversation instead of `prompt`/`system`.

        Raises:
            ModelError: the request failed for good (after retries).
            AuthError: the endpoint refused the key.
            NelError: the client speaks the completions protocol (no chat messages).
        """
        if self.protocol == "completions":
            raise NelError("ModelClient.chat needs the chat_completions or responses protocol "
                           "(this client speaks completions)")
        if messages is None:
            messages = ([{"role": "system", "content": system}] if system else []) + [
                {"role": "user", "content": prompt or ""}]
        return await self.generate(list(messages))

    @property
    def effective_concurrency(self) -> int:
        """Requests allowed in flight now (below `max_concurrent` after 429s)."""
        return self._limit.limit

    @property
    def in_flight(self) -> int:
        """Requests on the wire now."""
        return self._limit.in_flight

    @property
    def attempts_cut(self) -> int:
        """How many hung attempts the hang cut ended (each one retried)."""
        hang = self._deadlines.hang
        return hang.cuts if hang is not None else 0

    @property
    def concurrency_cuts(self) -> int:
        """How many times 429s shrank the concurrency."""
        return self._limit.cuts

    @staticmethod
    def _parse(raw: bytes) -> dict[str, Any]:
        """A 200's (redacted) body as a JSON object."""
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise _BadBody(f"HTTP 200 with a truncated or invalid JSON body "
                           f"({len(raw)} bytes): {exc}") from None
        if not isinstance(obj, dict):
            raise _BadBody(f"HTTP 200 with a JSON {type(obj).__name__} instead of an object")
        return obj

    def _from_obj(self, obj: dict[str, Any], latency_ms: float, attempts: int) -> ModelResponse:
        usage = obj.get("usage") or {}
        details = usage.get("completion_tokens_details") or usage.get("output_tokens_details") or {}
        if self.protocol == "responses":
            texts, reasoning = [], []
            for item in obj.get("output") or []:
                kind = item.get("type")
                for c in item.get("content") or []:
                    t = c.get("text")
                    if t:
                        (reasoning if kind == "reasoning" else texts).append(t)
                for s in item.get("summary") or []:
                    if s.get("text"):
                        reasoning.append(s["text"])
            return ModelResponse(
                content="".join(texts), reasoning_content="\n".join(reasoning) or None,
                finish_reason=responses_finish(obj),
                prompt_tokens=usage.get("input_tokens"), completion_tokens=usage.get("output_tokens"),
                reasoning_tokens=details.get("reasoning_tokens"), latency_ms=latency_ms,
                attempts=attempts, model=obj.get("model"), raw=obj,
                total_tokens=total_tokens(usage, usage.get("input_tokens"), usage.get("output_tokens")),
            )
        choices = obj.get("choices") or []
        if not choices:
            raise ModelError("model server returned no choices", "error", 200, attempts)
        ch = choices[0]
        if self.protocol == "chat_completions":
            msg = ch.get("message") or {}
            content = msg.get("content") or ""
            reasoning = msg.get("reasoning_content") or msg.get("reasoning")
        else:
            content = ch.get("text") or ""
            reasoning = None
        return ModelResponse(
            content=content, reasoning_content=reasoning, finish_reason=ch.get("finish_reason"),
            prompt_tokens=usage.get("prompt_tokens"), completion_tokens=usage.get("completion_tokens"),
            reasoning_tokens=details.get("reasoning_tokens"), latency_ms=latency_ms,
            attempts=attempts, model=obj.get("model"), raw=obj,
            total_tokens=total_tokens(usage, usage.get("prompt_tokens"), usage.get("completion_tokens")),
        )


class NemoModelClient(ModelClient):
    """`ModelClient` with NeMo Evaluator 0.3.0's constructor: its parameter order and defaults.

    What `from nemo_evaluator.engine import ModelClient` gives a user's code. The defaults
    are the ones its API reference documents (its endpoint and model, at most 8 requests in
    flight); `api_key=None` reads `NEMO_API_KEY`, as documented. Everything else (retries,
    redaction, the transport) is nel's ModelClient.
    """

    def __init__(
        self,
        base_url: str = "https://inference-api.nvidia.com/v1",
        model: str = "azure/openai/gpt-5.2",
        api_key: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: list[str] | None = None,
        frequency_penalty: float | None = None,
        presence_penalty: float | None = None,
        timeout: float = 120.0,
        max_concurrent: int = 8,
        **nel_options: Any,
    ) -> None:
        for key in ("cache_dir", "retry", "reasoning_pattern"):
            if nel_options.get(key) is not None:
                raise NelError(f"ModelClient: {key}= (response caching, retry configs and "
                               "reasoning patterns of NeMo Evaluator) is not supported yet in nel")
            nel_options.pop(key, None)
        super().__init__(
            base_url, model, api_key=api_key if api_key is not None else os.environ.get("NEMO_API_KEY"),
            temperature=temperature, max_tokens=max_tokens, top_p=top_p, seed=seed, stop=stop,
            frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
            timeout=timeout, max_concurrent=max_concurrent, **nel_options,
        )


@functools.cache
def _proxy_response() -> type:
    """The chain's response type, imported on first use (plain runs never load it)."""
    from nel_resources.proxy.types import ProxyResponse

    return ProxyResponse


@functools.cache
def _client_endpoint() -> type:
    """The endpoint that sends through a `ModelClient`, imported on first use."""
    from nel_resources.proxy.endpoint import ClientEndpoint

    return ClientEndpoint


@functools.cache
def _chain_types() -> tuple[Any, Any, Any]:
    """The chain's request types, imported once on first use (plain runs never load them)."""
    from nel_resources.proxy.types import InterceptorError, ProxyRequest, RequestContext

    return InterceptorError, ProxyRequest, RequestContext


def client_for_service(service: ServiceConfig, base_url: str | None = None, *,
                       timeout: float | None = None) -> ModelClient:
    """A client for a configured service (a launched service passes its own URL).

    `timeout` (seconds per attempt) overrides the service's, e.g. a benchmark's `timeout`.
    A service with `interceptors:` / `proxy:` gets its chain, run in-process around the
    client's transport; the `proxy:` settings and an `endpoint` entry tune the transport.
    """
    url = base_url or service.url
    if not url:
        raise NelError("the service has no url: set `url:` (or use a launched service type)")
    specs = service_interceptors(service)
    proxy = service.proxy
    ep: dict[str, Any] = {}
    if proxy is not None:
        given = proxy.model_fields_set
        ep = {k: getattr(proxy, k) for k in ("request_timeout", "max_retries", "retry_on_status",
                                              "extra_body", "extra_headers") if k in given}
        if "max_concurrent_upstream" in given:
            ep["max_concurrent"] = proxy.max_concurrent_upstream
    if specs:
        from nel_resources.proxy import endpoint_settings

        ep.update(endpoint_settings(specs))
    headers = service.resolved_headers()
    api_key = ep.get("api_key") or service.resolved_api_key()
    # A benchmark's own `timeout` wins, then the proxy's `request_timeout`, then the service's.
    per_attempt = timeout if timeout is not None else ep.get("request_timeout", service.timeout)
    client = ModelClient(
        ep.get("upstream_url") or url, model=service.model, protocol=service.protocol,
        api_key=api_key, generation=service.generation.to_request(),
        timeout=per_attempt,
        connect_timeout=service.connect_timeout,
        max_concurrent=min(service.max_concurrent, ep.get("max_concurrent", service.max_concurrent)),
        max_retries=ep.get("max_retries", service.max_retries), retry_backoff=service.retry_backoff,
        headers=headers, transport=service.transport, retry_on_status=ep.get("retry_on_status"),
    )
    verbose = service.proxy_verbose or bool(proxy is not None and proxy.verbose)
    if specs or verbose or ep.get("extra_body") or ep.get("extra_headers"):
        from nel_resources.proxy import Chain, ChainEnv, chain_links
        from nel_resources.proxy.endpoint import ClientEndpoint

        env = ChainEnv(service=service.model or "model",
                       redactor=Redactor(client_secrets(api_key, {**headers, **ep.get("extra_headers", {})})
                                          | url_secrets(url)))
        client.chain = Chain(chain_links(specs, env, verbose=verbose),
                             ClientEndpoint(client, ep.get("extra_body"), ep.get("extra_headers")))
    return client


def service_interceptors(service: ServiceConfig) -> list[tuple[str, dict[str, Any]]]:
    """The service's chain as (name, config) pairs: `interceptors:`, then `proxy.interceptors`."""
    items = [*service.interceptors, *(service.proxy.interceptors if service.proxy else ())]
    return [(i.name, dict(i.config)) for i in items]
