"""`gym://host:port`: an EvalEnvironment whose problems and scorer live behind HTTP.

Two protocols, as in NeMo Evaluator 0.3.0 (`gym://host:port?protocol=...&data=...`):

- `evaluator` (the default): the protocol `nel serve` serves: `/dataset_size`,
  `/seed_session`, `/verify`, and `/health` when the server has it.
- `native`: a NeMo Gym resources server, which holds no data: the problems are the rows of
  a Gym JSONL file (`data=rows.jsonl`: `responses_create_params`, `expected_answer`,
  `verifier_metadata`, any other per-item fields), and `/verify` gets Gym's body: the
  whole row, `responses_create_params`, and the answer wrapped as a Responses-API object.

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
# The seed metadata key that carries a data row's index from seed() to verify().
ROW_KEY = "gym_row"
# Row fields never copied into seed metadata: the bulky request, the answer (it has its own
# field), and names that would collide with verify()'s own parameters.
_NOT_METADATA = frozenset({"responses_create_params", "expected_answer", "response",
                           "expected", "reasoning", "self", ROW_KEY})


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


# `responses_create_params` keys that are the prompt (or tools, which are refused); any
# other key is a generation setting.
_ROW_PROMPT_KEYS = frozenset({"input", "instructions", "tools"})


def row_generation_keys(rows: list[dict[str, Any]]) -> list[str]:
    """The generation settings (keys of `responses_create_params` other than the prompt)
    that any row sets: nel sends the service's own settings instead of these."""
    keys: set[str] = set()
    for row in rows:
        keys.update(k for k in row["responses_create_params"] if k not in _ROW_PROMPT_KEYS)
    return sorted(keys)


def _content_text(content: Any) -> str:
    """The text of a Responses-API message `content` (a string or a list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", "")) for part in content
            if isinstance(part, dict) and part.get("type", "input_text")
            in ("input_text", "output_text", "text")
        )
    return ""


def load_gym_rows(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a NeMo Gym JSONL file, checked for what nel can run.

    Each row needs `responses_create_params.input` (a string or a list of messages).
    Rows that declare tools are refused: they need a Gym agent to run the tool calls, and
    nel sends one prompt and scores one answer.

    Raises:
        NelError: naming the file and line, for a missing file, a line that is not a JSON
            object, a row without input, or a row with tools.
    """
    file = Path(path).expanduser()
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise NelError(f"gym data {file}: cannot read it ({exc.strerror or exc})") from None
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"gym data {file}:{number}"
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise NelError(f"{where}: not JSON ({exc})") from None
        if not isinstance(row, dict):
            raise NelError(f"{where}: expected a JSON object, got {type(row).__name__}")
        rcp = row.get("responses_create_params")
        if not isinstance(rcp, dict) or not isinstance(rcp.get("input"), str | list):
            raise NelError(f"{where}: needs responses_create_params.input (a string or messages)")
        if rcp.get("tools"):
            raise NelError(
                f"{where}: the row declares tools, which need a NeMo Gym agent to run; "
                "nel sends one prompt per row"
            )
        rows.append(row)
    if not rows:
        raise NelError(f"gym data {file}: no rows")
    return rows


def _row_seed(row: Mapping[str, Any], idx: int) -> SeedResult:
    """A data row as a problem: its input messages, expected answer and scalar fields."""
    raw = row["responses_create_params"]["input"]
    messages: list[dict[str, Any]] = []
    for item in [{"role": "user", "content": raw}] if isinstance(raw, str) else raw:
        # function-call items and the like are tool traffic, not prompt text
        if isinstance(item, dict) and "role" in item and item.get("type", "message") == "message":
            role = "system" if item["role"] == "developer" else str(item["role"])
            messages.append({"role": role, "content": _content_text(item.get("content"))})
    instructions = row["responses_create_params"].get("instructions")
    if isinstance(instructions, str) and instructions:
        # the Responses API's system prompt
        messages.insert(0, {"role": "system", "content": instructions})
    prompt = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    expected = row.get("expected_answer")
    verifier = row.get("verifier_metadata")
    if expected is None and isinstance(verifier, dict):
        expected = verifier.get("expected_answer")
    metadata: dict[str, Any] = {
        k: v for k, v in row.items()
        if k not in _NOT_METADATA and (v is None or isinstance(v, str | int | float | bool))
    }
    metadata[ROW_KEY] = idx
    return SeedResult(
        prompt=prompt,
        expected_answer="" if expected is None else str(expected),
        metadata=metadata,
        messages=messages or None,
    )


def _gym_response(text: str, reasoning: str | None) -> dict[str, Any]:
    """An answer as the Responses-API object NeMo Gym's `NeMoGymResponse` validates."""
    output: list[dict[str, Any]] = []
    if reasoning:
        output.append({"id": "rs_nel", "type": "reasoning",
                       "summary": [{"type": "summary_text", "text": reasoning}]})
    output.append({
        "id": "msg_nel", "type": "message", "role": "assistant", "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    })
    return {
        "id": "resp_nel", "object": "response", "created_at": int(time.time()),
        "model": "nel", "status": "completed", "output": output,
        # required by OpenAI's Response type, which Gym servers validate the body against
        "parallel_tool_calls": False, "tool_choice": "none", "tools": [],
    }


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
        data: A NeMo Gym JSONL file whose rows are the problems (required for `native`);
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
        if self.gym_protocol == "native" and data is None:
            raise NelError(
                f"{url!r}: protocol=native needs data=ROWS.jsonl (NeMo Gym resources "
                "servers hold no problems)"
            )
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
        size = await self._request("GET", "/dataset_size")
        self._apply_meta(health, size)

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
            self._apply_meta(health, self._get_sync("/dataset_size"))
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
            return _row_seed(self._rows[idx], idx)
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
        assert self._rows is not None  # native always has data (checked in __init__)
        if isinstance(row_idx, bool) or not isinstance(row_idx, int) or not (
            0 <= row_idx < len(self._rows)
        ):
            raise RemoteEnvironmentError(
                f"verify needs the {ROW_KEY!r} index its seed gave, got {row_idx!r}"
            )
        row = self._rows[row_idx]
        reasoning = metadata.get("reasoning")
        body = {
            **row,
            "expected_answer": expected,
            "response": _gym_response(response, reasoning if isinstance(reasoning, str) else None),
        }
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
