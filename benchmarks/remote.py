"""`gym://host:port`: an EvalEnvironment whose problems and scorer live behind HTTP.

Two protocols, as in NeMo Evaluator 0.3.0 (`gym://host:port?protocol=...&data=...`):

- `evaluator` (the default): the protocol `nel serve` serves: `/dataset_size`,
  `/seed_session`, `/verify`, and `/health` when the server has it.
- `native`: `/verify` gets NeMo Gym's body (`benchmarks.gym_rows`): the problem's
  `responses_create_params`, its per-item fields, and the answer wrapped as a Responses-API
  object. The problems are the rows of a Gym JSONL file (`data=rows.jsonl`), or without one,
  as in NeMo Evaluator 0.3.0, the server's own (`/dataset_size`, `/seed_session`): a
  `nel serve` environment server has them; a real NeMo Gym resources server holds none, and
  `prepare()` says so in one line (0.3.0 fails on it too: "invalid dataset_size=-1").

`data=` also works with `evaluator` (problems from the file, scoring by the server). Any
other query parameter is refused in one line. nel still calls the model itself, so
trajectories, tokens and latency are captured as for a local benchmark.

Unlike NeMo Evaluator 0.3.0's client, `verify` always sends the expected answer (in the
evaluator form with the item metadata; in the native form as the row's `expected_answer`):
its native client drops `expected_answer` from every row it forwards, and its response
envelope lacks fields NeMo Gym validates, so real Gym servers cannot score its requests.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import random
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

import orjson

from benchmarks._types import EvalEnvironment, SeedResult, VerifyResult
from benchmarks.errors import NelError
from benchmarks.gym_rows import ROW_KEY, gym_response, load_gym_rows, native_body, row_seed
from benchmarks.gym_rows import row_generation_keys as row_generation_keys

if TYPE_CHECKING:
    import aiohttp

__all__ = [
    "GymEnvironment",
    "RemoteEnvironmentError",
    "check_gym_benchmark",
    "load_gym_rows",
    "parse_gym_query",
    "parse_gym_url",
]

# Statuses worth retrying: overload and server-side failures. Any other 4xx is the
# request's fault and would fail the same way again.
_RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
_SEED_FIELDS = ("prompt", "expected_answer", "metadata", "messages", "system", "sandbox_spec")
PROTOCOLS = ("evaluator", "native")
_QUERY_KEYS = ("protocol", "data")


class RemoteEnvironmentError(NelError):
    """A remote environment refused a request (4xx) or stayed unreachable after retries.

    Attributes:
        status: The HTTP status, or None when no response arrived at all.
        retryable: True when the failure was transient (5xx, timeout, connection).
    """

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False):
        super().__init__(message)
        self.status = status
        self.retryable = retryable


def parse_gym_url(url: str) -> tuple[str, str, int]:
    """Split `gym://host:port[/prefix]` into (http base URL, host, port).

    `gyms://` means https; plain `http(s)://` URLs are accepted too. The port defaults to
    9090 (`nel serve`'s default).

    Raises:
        NelError: for a URL without a host or with a bad port.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise NelError(f"not a gym URL: {url!r} (expected gym://host:port)")
    http_scheme = {"gym": "http", "http": "http", "gyms": "https", "https": "https"}.get(
        scheme.lower()
    )
    if http_scheme is None:
        raise NelError(f"not a gym URL: {url!r} (expected gym://host:port)")
    parts = urlsplit(f"{http_scheme}://{rest}")
    try:
        port = parts.port or 9090
    except ValueError:
        raise NelError(f"bad port in {url!r}") from None
    if not parts.hostname:
        raise NelError(f"no host in {url!r} (expected gym://host:port)")
    host = parts.hostname
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return f"{http_scheme}://{netloc}{parts.path.rstrip('/')}", host, port


def parse_gym_query(url: str) -> tuple[str, dict[str, str]]:
    """Split `gym://host:port?protocol=native&data=rows.jsonl` into (URL, query options).

    Raises:
        NelError: for a query parameter other than `protocol` and `data`, one given twice,
            or a protocol other than `evaluator` / `native`.
    """
    base, sep, query = url.partition("?")
    options: dict[str, str] = {}
    if not sep:
        return base, options
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key not in _QUERY_KEYS:
            raise NelError(
                f"unknown query parameter {key!r} in {url!r}: gym:// takes "
                "protocol=evaluator|native and data=ROWS.jsonl"
            )
        if key in options:
            raise NelError(f"query parameter {key!r} given twice in {url!r}")
        options[key] = value
    protocol = options.get("protocol")
    if protocol is not None and protocol not in PROTOCOLS:
        raise NelError(f"protocol={protocol!r} in {url!r}: expected evaluator or native")
    if options.get("data") == "":
        raise NelError(f"data= in {url!r} names no file (expected data=ROWS.jsonl)")
    return base, options


def check_gym_benchmark(name: str, params: Mapping[str, Any] | None = None) -> list[str]:
    """Check a `gym://` benchmark before a run: its query, its parameters, its rows file.

    Sends no request (the server may not be up yet); only reads the data file.

    Returns:
        The generation settings the rows carry in `responses_create_params` (temperature,
        max_output_tokens, ...), which nel does not apply per row: the caller warns.

    Raises:
        NelError: one line naming what to fix.
    """
    try:
        env = GymEnvironment(name, **dict(params or {}))
    except TypeError as exc:
        raise NelError(f"{name}: {exc}") from None
    return row_generation_keys(env._rows or [])


def _detail(raw: bytes) -> str:
    """The server's error message, short, from a JSON or text error body."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw[:300].decode("utf-8", "replace")
    if isinstance(body, dict):
        detail = body.get("detail", body)
        return str(detail)[:300]
    return str(body)[:300]


def _dumps(payload: Any) -> bytes:
    try:
        return orjson.dumps(payload, default=str, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        # orjson refuses integers beyond 64 bits; item metadata may hold one.
        return json.dumps(payload, default=str).encode()


class GymEnvironment(EvalEnvironment):
    """A benchmark served over HTTP by `nel serve` (or anything speaking its protocol).

    Call `await env.prepare()` once before use (the engine does when the method exists):
    it fetches the dataset size and the remote benchmark's identity. `len(env)` also works
    without it, through one blocking request.

    Args:
        url: `gym://host:port` (http), `gyms://host:port` (https) or an http(s) URL.
        timeout: Seconds per request attempt.
        retries: Extra attempts after a 5xx, 408/429, timeout or connection error, with
            exponential backoff and jitter (honouring Retry-After). 4xx are not retried.
        backoff_base: First backoff delay in seconds (doubles per attempt).
        backoff_max: Cap on one backoff delay.
        max_connections: Size of the keep-alive connection pool.
        name: Override the environment name (default `gym_<host>_<port>`).
        headers: Extra headers sent with every request (e.g. an auth token).
        protocol: `evaluator` (default) or `native` (a NeMo Gym resources server); also
            `?protocol=` in the URL.
        data: A NeMo Gym JSONL file whose rows are the problems (without it the server's
            own problems, for `native` too, as in NeMo Evaluator 0.3.0);
            also `?data=` in the URL.
    """

    version = "1"

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 60.0,
        retries: int = 3,
        backoff_base: float = 0.5,
        backoff_max: float = 20.0,
        max_connections: int = 256,
        name: str | None = None,
        headers: dict[str, str] | None = None,
        protocol: str | None = None,
        data: str | Path | None = None,
    ):
        self.url = url
        address, options = parse_gym_query(url)
        for key, given in (("protocol", protocol), ("data", data)):
            if given is not None and key in options and str(given) != options[key]:
                raise NelError(f"{key} is given twice for {url!r}: {given!r} and {options[key]!r}")
        self.gym_protocol = str(protocol or options.get("protocol") or "evaluator")
        if self.gym_protocol not in PROTOCOLS:
            raise NelError(f"protocol={self.gym_protocol!r}: expected evaluator or native")
        data = data if data is not None else options.get("data")
        # Read the rows now: a bad file is one line before any request is sent.
        self.data_path = None if data is None else Path(data).expanduser().resolve()
        self._rows = None if self.data_path is None else load_gym_rows(self.data_path)
        self.base_url, self.host, self.port = parse_gym_url(address)
        safe_host = "".join(c if c.isalnum() else "_" for c in self.host)
        # A stable name from the address: results are keyed by it before prepare() runs.
        self.name = name or f"gym_{safe_host}_{self.port}"
        self.timeout = float(timeout)
        self.retries = max(0, int(retries))
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.max_connections = max_connections
        self.headers = {"content-type": "application/json", **(headers or {})}
        self.remote_benchmark: str | None = None
        self.remote_version: str | None = None
        self.protocol: str | None = None
        self._size: int | None = None if self._rows is None else len(self._rows)
        self._session: aiohttp.ClientSession | None = None
        self._session_loop: asyncio.AbstractEventLoop | None = None
        # Native problems the server seeded, by index: verify() sends their prompt back.
        self._seeded: dict[int, SeedResult] = {}

    def __repr__(self) -> str:
        return f"GymEnvironment({self.url!r}, benchmark={self.remote_benchmark!r})"

    # ------------------------------------------------------------------ metadata

    async def prepare(self) -> None:
        """Fetch the dataset size and the remote benchmark's name and version (cached)."""
        if self._size is not None:
            return
        try:
            health = await self._request("GET", "/health")
        except RemoteEnvironmentError as exc:
            if exc.status != 404:  # servers without /health (plain Gym ones) are fine
                raise
            health = {}
        try:
            size = await self._request("GET", "/dataset_size")
        except RemoteEnvironmentError as exc:
            raise self._no_problems(exc) from None
        self._apply_meta(health, size)

    def _no_problems(self, exc: RemoteEnvironmentError) -> RemoteEnvironmentError:
        """A native server without `/dataset_size` is a NeMo Gym resources server: it holds
        no problems, so the config must give them (NeMo Evaluator 0.3.0 fails on it too)."""
        if exc.status != 404 or self.gym_protocol != "native":
            return exc
        return RemoteEnvironmentError(
            f"{self.base_url} has no /dataset_size, so it serves no problems (a "
            "NeMo Gym resources server holds none; NeMo Evaluator 0.3.0 stops on it with "
            "\"invalid dataset_size=-1\"): add data=ROWS.jsonl with its problems, or point "
            "it at a server that serves them (`nel serve`)", status=404)

    def _apply_meta(self, health: Any, size: Any) -> None:
        if isinstance(health, dict):
            if isinstance(health.get("benchmark"), str):
                self.remote_benchmark = health["benchmark"]
            if health.get("version") is not None:
                self.remote_version = str(health["version"])
            if isinstance(health.get("protocol"), str):
                self.protocol = health["protocol"]
        value = size.get("size") if isinstance(size, dict) else None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise RemoteEnvironmentError(
                f"{self.base_url}/dataset_size answered {size!r}; expected {{'size': N}}"
            )
        self._size = value

    def _get_sync(self, path: str) -> Any:
        """Blocking GET with the same retry policy (for `len()` before `prepare()`)."""
        url = f"{self.base_url}{path}"
        for attempt in range(self.retries + 1):
            try:
                req = urllib.request.Request(url, headers=self.headers)
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    return json.loads(resp.read())
            except urllib.error.HTTPError as exc:
                raw = exc.read()
                if exc.code not in _RETRY_STATUSES or attempt == self.retries:
                    raise RemoteEnvironmentError(
                        f"GET {url} -> {exc.code}: {_detail(raw)}",
                        status=exc.code,
                        retryable=exc.code in _RETRY_STATUSES,
                    ) from None
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                if attempt == self.retries:
                    raise RemoteEnvironmentError(
                        f"GET {url} failed after {attempt + 1} attempts: {exc}", retryable=True
                    ) from None
            except ValueError as exc:
                raise RemoteEnvironmentError(f"GET {url}: reply is not JSON ({exc})") from None
            time.sleep(self._backoff(attempt, None))
        raise AssertionError("unreachable")

    def __len__(self) -> int:
        if self._size is None:
            # Prefer `await prepare()`; this path blocks, once, for callers that cannot.
            try:
                health = self._get_sync("/health")
            except RemoteEnvironmentError as exc:
                if exc.status != 404:
                    raise
                health = {}
            try:
                size = self._get_sync("/dataset_size")
            except RemoteEnvironmentError as exc:
                raise self._no_problems(exc) from None
            self._apply_meta(health, size)
        assert self._size is not None
        return self._size

    def fingerprint(self) -> str:
        """Address, remote benchmark name and version, and dataset size (or data file hash)."""
        size = len(self)
        if self.data_path is not None:
            digest = hashlib.sha256(self.data_path.read_bytes()).hexdigest()[:16]
            return f"gym:{self.base_url}:{self.gym_protocol}:{digest}:{size}"
        return (
            f"gym:{self.base_url}:{self.remote_benchmark or '?'}:"
            f"{self.remote_version or '?'}:{size}"
        )

    # ------------------------------------------------------------------ HTTP

    def _backoff(self, attempt: int, retry_after: str | None) -> float:
        if retry_after:
            try:
                return min(max(float(retry_after), 0.0), self.backoff_max * 4)
            except ValueError:
                pass  # an HTTP date: fall back to our own schedule
        delay = min(self.backoff_max, self.backoff_base * (2**attempt))
        # "Equal jitter": keeps at least half the delay, spreads the rest so a fleet of
        # clients that failed together does not retry together.
        return delay / 2 + random.uniform(0, delay / 2)

    def _get_session(self) -> aiohttp.ClientSession:
        import aiohttp

        loop = asyncio.get_running_loop()
        # A session belongs to the loop it was made in; asyncio.run() twice means a new loop.
        if self._session is None or self._session.closed or self._session_loop is not loop:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.max_connections),
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                headers=self.headers,
            )
            self._session_loop = loop
        return self._session

    async def _request(self, method: str, path: str, payload: Any = None) -> Any:
        import aiohttp

        url = f"{self.base_url}{path}"
        data = None if payload is None else _dumps(payload)
        session = self._get_session()
        for attempt in range(self.retries + 1):
            retry_after: str | None = None
            try:
                async with session.request(method, url, data=data) as resp:
                    raw = await resp.read()
                    if resp.status < 400:
                        try:
                            return orjson.loads(raw)
                        except orjson.JSONDecodeError:
                            raise RemoteEnvironmentError(
                                f"{method} {url} -> {resp.status} but the reply is not JSON"
                            ) from None
                    retryable = resp.status in _RETRY_STATUSES
                    if not retryable or attempt == self.retries:
                        raise RemoteEnvironmentError(
                            f"{method} {url} -> {resp.status}: {_detail(raw)}",
                            status=resp.status,
                            retryable=retryable,
                        )
                    retry_after = resp.headers.get("Retry-After")
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError) as exc:
                if attempt == self.retries:
                    raise RemoteEnvironmentError(
                        f"{method} {url} failed after {attempt + 1} attempts: "
                        f"{type(exc).__name__}: {exc}",
                        retryable=True,
                    ) from exc
            await asyncio.sleep(self._backoff(attempt, retry_after))
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------ environment API

    async def seed(self, idx: int) -> SeedResult:
        """Problem `idx`: row `idx` of the data file, else the server's `/seed_session`."""
        if self._rows is not None:
            if not 0 <= idx < len(self._rows):
                raise IndexError(idx)
            return row_seed(self._rows[idx], idx)
        seed = await self._seed_from_server(idx)
        if self.gym_protocol == "native":
            self._seeded[idx] = seed
            return dataclasses.replace(seed, metadata={**seed.metadata, ROW_KEY: idx})
        return seed

    async def _seed_from_server(self, idx: int) -> SeedResult:
        body = await self._request("POST", "/seed_session", {"idx": idx})
        if not isinstance(body, dict) or not isinstance(body.get("prompt"), str):
            raise RemoteEnvironmentError(
                f"{self.base_url}/seed_session answered without a prompt for idx {idx}"
            )
        fields = {k: body[k] for k in _SEED_FIELDS if body.get(k) is not None}
        fields.setdefault("expected_answer", "")
        if not isinstance(fields.get("metadata", {}), dict):
            fields.pop("metadata")
        return SeedResult(**fields)

    async def verify(self, response: str, expected: str, **metadata: Any) -> VerifyResult:
        """Score through the server's `/verify`, always sending the expected answer.

        Evaluator protocol: `{response, expected, metadata}`. Native protocol: the item's
        data row with `expected_answer` set to `expected`, and the answer as a
        Responses-API object (with the reasoning, when the model gave it separately).
        """
        row_idx = metadata.pop(ROW_KEY, None)
        if self.gym_protocol == "native":
            return await self._verify_native(response, expected, row_idx, metadata)
        body = await self._request(
            "POST",
            "/verify",
            {"response": response, "expected": expected, "metadata": metadata},
        )
        return self._verdict(body)

    async def _verify_native(
        self, response: str, expected: str, row_idx: Any, metadata: dict[str, Any]
    ) -> VerifyResult:
        size = len(self._rows) if self._rows is not None else self._size
        if isinstance(row_idx, bool) or not isinstance(row_idx, int) or not (
            0 <= row_idx < (size if size is not None else row_idx + 1)
        ):
            raise RemoteEnvironmentError(
                f"verify needs the {ROW_KEY!r} index its seed gave, got {row_idx!r}"
            )
        reasoning = metadata.get("reasoning")
        reasoning = reasoning if isinstance(reasoning, str) else None
        body: dict[str, Any]
        if self._rows is not None:
            body = {**self._rows[row_idx], "expected_answer": expected,
                    "response": gym_response(response, reasoning)}
        else:
            seed = self._seeded.get(row_idx) or await self._seed_from_server(row_idx)
            body = native_body(seed, response, expected, reasoning, metadata)
        reply = await self._request("POST", "/verify", body)
        verdict = self._verdict(reply)
        # What the server added (its own scoring fields), not the row it echoed back.
        verdict.scoring_details = {
            k: v for k, v in reply.items()
            if k not in body and k not in ("reward", "extracted_answer", "metadata")
        }
        return verdict

    def _verdict(self, body: Any) -> VerifyResult:
        if not isinstance(body, dict) or "reward" not in body:
            raise RemoteEnvironmentError(f"{self.base_url}/verify answered without a reward")
        try:
            reward = float(body["reward"])
        except (TypeError, ValueError):
            raise RemoteEnvironmentError(
                f"{self.base_url}/verify answered a non-numeric reward {body['reward']!r}"
            ) from None
        details = body.get("scoring_details")
        meta = body.get("metadata")
        extracted = body.get("extracted_answer")
        return VerifyResult(
            reward=reward,
            extracted_answer=None if extracted is None else str(extracted),
            scoring_details=details if isinstance(details, dict) else {},
            metadata=meta if isinstance(meta, dict) else {},
        )

    async def close(self) -> None:
        """Close the HTTP session (safe to call twice)."""
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None
        self._session_loop = None
