"""The retrying HTTP exchange under `ModelClient`: one keep-alive transport per run (the raw
HTTP/1.1 pool for plain http, aiohttp otherwise), the adaptive concurrency slot, retries
with backoff and full jitter honouring `Retry-After`, the hang cut and redaction."""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson

from nel_resources.model_client.errors import (
    AttemptCut,
    AuthError,
    BadBody,
    EndpointUnreachableError,
    ModelError,
)
from nel_resources.wire.adaptive_limit import AdaptiveLimit
from nel_resources.wire.deadlines import Deadlines
from nel_resources.wire.http_raw import RawHTTPPool, StaleConnectionError
from nel_resources.wire.openai_fields import retry_after_seconds
from nel_resources.wire.redact import Redactor

if TYPE_CHECKING:
    import aiohttp

# What a broken exchange raises on the raw transport: OSError covers the raw client's
# RawHTTPError and every socket error. A client on aiohttp adds aiohttp's errors (reset, EOF
# or an incomplete chunked read mid-body, malformed HTTP): `ModelClient._transport_errors`.
# aiohttp itself is imported only by a client that uses it (~0.12 s and ~6 MB otherwise
# spent on every plain-HTTP run).
RAW_TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (OSError, asyncio.IncompleteReadError)


class RetryingTransport:
    """The exchange half of `ModelClient` (which sets every attribute below in `__init__`)."""

    base_url: str
    transport: str
    timeout: float
    connect_timeout: float
    max_concurrent: int
    max_retries: int
    retry_backoff: float
    max_backoff: float
    requests_sent: int
    _query: str
    _headers: dict[str, str]
    _raw_headers: bytes
    _redact: Redactor
    _session: aiohttp.ClientSession | None
    _pool: RawHTTPPool | None
    _transport_errors: tuple[type[BaseException], ...]
    _limit: AdaptiveLimit
    _deadlines: Deadlines
    _auth_failed: AuthError | None
    _rng: random.Random
    models_reply: tuple[int, str | None, bytes] | None = None  # `check`'s GET /models answer
    _retry_status: frozenset[int] | None
    _host: str
    _port: int
    _base_path: str

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

            self._transport_errors = (aiohttp.ClientError, *RAW_TRANSPORT_ERRORS)
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


    def _with_query(self, target: str) -> str:
        """`target` with the URL's own query string (the user's `?api-key=...`) kept."""
        if not self._query:
            return target
        return f"{target}{'&' if '?' in target else '?'}{self._query}"


    async def check(self) -> None:
        """Fail fast when the endpoint is unreachable or rejects the key.

        Sends one GET to `/models`: any HTTP answer (even 404) proves the server is there.
        """
        await self.open()
        try:
            status, headers, body = await self._send("GET", "/models", b"", min(self.timeout, 30))
        except (TimeoutError, *self._transport_errors) as exc:
            raise EndpointUnreachableError(
                f"cannot reach the model endpoint {self.base_url} "
                f"({type(exc).__name__}: {str(exc) or 'timed out'}); is the server running?"
            ) from None
        # Kept for the run's provenance record (what the server says it serves), so it costs
        # no second request (nel_resources/services/provenance.py).
        self.models_reply = (status, (headers.get("server") if headers else None), body)
        if status in (401, 403):
            text = self._redact.text(body[:200].decode("utf-8", "replace").strip())
            raise AuthError(
                f"the endpoint {self.base_url} refused the API key (HTTP {status}: {text}); "
                "check the key or the api_key_env variable"
            )


    async def _send(self, method: str, subpath: str, data: bytes, timeout: float,
                    headers: dict[str, str] | None = None, cut: float = 0.0) -> tuple[int, Any, bytes]:
        """One HTTP exchange on the chosen transport: (status, headers, body). `cut` > 0
        lets the hang cut end it (raising AttemptCut) at `cut` times the learnt limit."""
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
                raise AttemptCut() from None
            raise TimeoutError(f"no answer within {timeout:g}s") from None


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
            except AttemptCut:
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
                    except BadBody as exc:  # cut short on the way: as retryable as a reset
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


    @staticmethod
    def _parse(raw: bytes) -> dict[str, Any]:
        """A 200's (redacted) body as a JSON object."""
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise BadBody(f"HTTP 200 with a truncated or invalid JSON body "
                           f"({len(raw)} bytes): {exc}") from None
        if not isinstance(obj, dict):
            raise BadBody(f"HTTP 200 with a JSON {type(obj).__name__} instead of an object")
        return obj

