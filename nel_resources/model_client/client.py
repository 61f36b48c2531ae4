"""`ModelClient`: OpenAI chat/completions/responses requests over one endpoint, with the
service's interceptor chain run around them (inline when it is plain, see `generate`)."""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson

from benchmarks.errors import NelError
from nel_resources.model_client.chain_binding import ChainBinding, ClientChain, CompiledStages
from nel_resources.model_client.errors import AuthError, ChainStopError, ModelError
from nel_resources.model_client.response import ModelResponse
from nel_resources.model_client.transport import RAW_TRANSPORT_ERRORS, RetryingTransport
from nel_resources.wire.adaptive_limit import AdaptiveLimit
from nel_resources.wire.deadlines import Deadlines
from nel_resources.wire.endpoint_url import split_url, url_secrets
from nel_resources.wire.hang_cut import HangCut
from nel_resources.wire.http_raw import RawHTTPPool
from nel_resources.wire.openai_fields import (
    normalize_base_url,
    responses_finish,
    sampling_params,
    total_tokens,
)
from nel_resources.wire.redact import Redactor, client_secrets, is_secret_header

if TYPE_CHECKING:
    import aiohttp


class ModelClient(RetryingTransport):
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
        self._headers = _request_headers(dict(headers or {}), api_key, endpoint.basic_auth)
        # Everything that leaves this client (replies, error text) is redacted here, once:
        # a server that echoes the key (in an error body, say) must not put it into
        # results, journals, Parquet, exports or the Dagster event log.
        self._redact = Redactor(client_secrets(api_key, self._headers) | url_secrets(base_url))
        self._session: aiohttp.ClientSession | None = None
        self._transport_errors: tuple[type[BaseException], ...] = RAW_TRANSPORT_ERRORS
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
        self.transport = _transport_for(transport, parsed.scheme)
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
        self.chain: ClientChain | None = None
        # The chain `generate` last found it can run inline (`_runs_inline`), and the
        # path its requests carry (sliced once here, not per request).
        self._inline_chain: ClientChain | None = None
        # That chain compiled (`proxy/compiled.py`), or None when it needs the generic path.
        self._compiled_chain: CompiledStages | None = None
        self._chain_path = path
        # What the last chain seen told this client (`ClientChain.bind_client`): whether it
        # runs inline, and the chain's request, response and refusal types.
        self._bound_chain: ClientChain | None = None
        self._binding: ChainBinding | None = None

    async def __aenter__(self) -> ModelClient:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


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
            binding = self._binding
            assert binding is not None
            compiled = self._compiled_chain
            if compiled is not None:
                # The chain compiled (`proxy/compiled.py`): what `Chain.before`, the endpoint
                # and `Chain.after` do, on the body and the answer themselves, in this
                # coroutine (a coroutine level more would cost at every suspension).
                if body is None:
                    body = self.encode(messages, prompt, overrides)
                try:
                    data = compiled.request(body, session_id)
                except binding.refusal as exc:
                    raise self._refused(exc) from None
                t0 = time.perf_counter()
                status, obj, attempts, _ = await self._post(data, compiled.path, compiled.headers)
                latency_ms = (time.perf_counter() - t0) * 1000.0
                if status != 200 and obj.__class__ is str:
                    obj = obj.encode()  # as the endpoint's `answer`: hooks see bytes
                try:
                    compiled.response(status, obj, latency_ms)
                except binding.refusal as exc:
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
            except binding.refusal as exc:
                raise self._refused(exc) from None
            if isinstance(req, binding.response_type):  # answered by a hook (a cache hit)
                resp = req
            else:
                data, headers = endpoint.wire(req)
                path, ctx = req.path, req.ctx
                # The request (its parsed body and what the hooks added) is not needed past
                # here: freed now, while it is still in the CPU's cache, not after the
                # exchange, when 63 others may have run through the loop.
                del req
                t0 = time.perf_counter()
                try:
                    status, obj, attempts, _ = await self._post(data, path, headers)
                except ModelError as exc:  # no answer: the hooks that record failures hear
                    chain.failed(ctx, exc)
                    raise
                resp = endpoint.answer(ctx, status, obj, attempts, t0)
            try:
                resp = chain.after(resp)
            except binding.refusal as exc:
                raise self._refused(exc) from None
            return self._chained_answer(resp)
        data = body if body is not None else self.encode(messages, prompt, overrides)
        t0 = time.perf_counter()
        status, obj, attempts, _ = await self._post(data, self._url[len(self.base_url):], None)
        if status != 200:
            raise ModelError(f"HTTP {status}: {obj}", "error", status, attempts)
        return self._from_obj(obj, (time.perf_counter() - t0) * 1000.0, attempts)

    def _runs_inline(self, chain: ClientChain) -> bool:
        """Whether `generate` runs `chain`'s stages itself (a plain chain around this
        client's own transport); remembered, so a request pays one identity test."""
        if chain is not self._bound_chain:
            # The chain says (`bind_client`, once per chain): this client imports nothing of
            # the proxy package, which is built on it. A chain that runs inline comes
            # compiled: its stages as two plain functions over the body and the answer
            # (`proxy/compiled.py`), or None when a hook needs the generic path.
            self._binding = chain.bind_client(self, self._chain_path)
            self._bound_chain = chain
        binding = self._binding
        assert binding is not None
        if binding.inline:
            self._inline_chain = chain
            self._compiled_chain = binding.compiled
            return True
        return False

    def _chain_request(self, messages: list[dict[str, Any]] | None, prompt: str | None,
                       overrides: dict[str, Any] | None, body: bytes | None,
                       repeat: int | None, session_id: str | None) -> Any:
        """A new request for the chain (a `ProxyRequest`), carrying the encoded body as its
        `raw` bytes: sent as they are when no hook changes the body (`types.py`)."""
        binding = self._binding
        assert binding is not None
        if body is None:
            body = self.encode(messages, prompt, overrides)
        # A fresh copy per request: interceptors edit bodies in place, and the loop shares
        # one encoded body between a problem's repeats. Every field by position: keyword
        # arguments and default factories cost the dataclass inits a third more.
        return binding.request_type(orjson.loads(body), {}, self._chain_path,
                                    binding.context_type(session_id, repeat, {}), False, body)

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
        except self._binding.refusal as exc:  # type: ignore[union-attr]
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


def _request_headers(given: dict[str, str], api_key: str | None,
                     basic_auth: str | None) -> dict[str, str]:
    """The headers every request carries: the content type, the service's own, the key
    (or the URL's user-info as Basic auth when no key or auth header is given)."""
    # A configured `content-type` (any case) replaces nel's, never goes beside it.
    own_type = {} if any(k.lower() == "content-type" for k in given) else {
        "Content-Type": "application/json"}
    out = {**own_type, **given}
    if api_key:
        out["Authorization"] = f"Bearer {api_key}"
    elif basic_auth and not any(is_secret_header(k) for k in given):
        out["Authorization"] = basic_auth
    return out


def _transport_for(transport: str, scheme: str) -> str:
    """`raw` or `aiohttp`, from the configured choice and the URL's scheme."""
    if transport not in ("auto", "raw", "aiohttp"):
        raise NelError(f"unknown transport {transport!r}: use auto, raw or aiohttp")
    if transport == "raw" and scheme != "http":
        raise NelError("transport raw speaks plain http only; use aiohttp for https")
    # Plain-HTTP endpoints get the lean keep-alive client (3x aiohttp's request rate
    # here); HTTPS, proxies and the rest stay with aiohttp.
    return "raw" if transport == "raw" or (transport == "auto" and scheme == "http") else "aiohttp"
