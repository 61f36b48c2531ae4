"""The OpenAI request and response fields the model client checks and reads: sampling
parameters (NeMo Evaluator's ranges), base URLs, Retry-After, token totals and the
Responses API's finish reasons. Plain functions, no I/O."""

from __future__ import annotations

import math
from typing import Any

from benchmarks.errors import NelError


def total_tokens(usage: dict[str, Any], prompt: Any, completion: Any) -> int | None:
    """`usage.total_tokens`, or prompt + completion when only those are given."""
    total = usage.get("total_tokens")
    if isinstance(total, int):
        return total
    if isinstance(prompt, int) and isinstance(completion, int):
        return prompt + completion
    return None


# NeMo Evaluator's ModelClient parameters: (lowest, highest) allowed, None = unbounded.
_RANGES: dict[str, tuple[float | None, float | None]] = {
    "temperature": (0.0, 2.0),
    "top_p": (0.0, 1.0),
    "frequency_penalty": (-2.0, 2.0),
    "presence_penalty": (-2.0, 2.0),
    "max_tokens": (1, None),
}


def sampling_params(**values: Any) -> dict[str, Any]:
    """The generation fields of a request from ModelClient's sampling arguments, checked.

    `None` means "not set" (the server's default). Ranges are those NeMo Evaluator
    documents: temperature 0-2, top_p 0-1, penalties -2..2, max_tokens >= 1, an integer
    seed, stop as a list of strings.

    Raises:
        NelError: naming the parameter and its allowed range.
    """
    out: dict[str, Any] = {}
    for key, value in values.items():
        if value is None:
            continue
        if key in ("max_tokens", "seed"):
            if isinstance(value, bool) or not isinstance(value, int):
                raise NelError(f"ModelClient: {key} must be an integer, not {value!r}")
        elif key == "stop":
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
                raise NelError(f"ModelClient: stop must be a list of strings, not {value!r}")
            value = list(value)
        elif isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise NelError(f"ModelClient: {key} must be a number, not {value!r}")
        lo, hi = _RANGES.get(key, (None, None))
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            span = f"{lo:g} to {hi:g}" if hi is not None else f"at least {lo:g}"
            raise NelError(f"ModelClient: {key}={value!r} is out of range ({span})")
        out[key] = value
    return out


def normalize_base_url(url: str) -> str:
    """Accept `http://h:p`, `http://h:p/v1` or a full `/v1/chat/completions` URL."""
    u = url.rstrip("/")
    for suffix in ("/chat/completions", "/completions", "/responses"):
        if u.endswith(suffix):
            u = u[: -len(suffix)]
            break
    if not u.endswith("/v1") and "/v1/" not in u + "/":
        u += "/v1"
    return u


def retry_after_seconds(headers: Any) -> float | None:
    """A response's `Retry-After` in seconds (None when absent or not a number)."""
    val = (headers.get("Retry-After") or headers.get("retry-after")) if headers is not None else None
    if not val:
        return None
    try:
        return max(0.0, float(val))
    except ValueError:
        return None


def responses_finish(obj: dict[str, Any]) -> str | None:
    """Map a Responses-API status onto chat finish reasons (stop / length / ...)."""
    status = obj.get("status")
    if status == "completed":
        return "stop"
    reason = (obj.get("incomplete_details") or {}).get("reason")
    if reason == "max_output_tokens" or status == "incomplete":
        return "length" if reason in (None, "max_output_tokens") else str(reason)
    return status
