"""`response_stats`: count answers, tokens and latency; log a summary every `every` answers."""

from __future__ import annotations

from typing import Any

from nel_resources.proxy.env import ChainEnv, proxy_logger
from nel_resources.proxy.fields import FieldSpec
from nel_resources.proxy.streams import COUNTED_USAGE
from nel_resources.proxy.types import ProxyResponse

FIELDS = {"every": FieldSpec("int", 100, minimum=1)}
AFFECTS_ANSWERS = False
_ABSENT = object()
_NO_EXTRA: dict[str, Any] = {}  # an answer not assembled from a stream: nothing counted


class ResponseStats:
    """Running counts of the answers (no lock: nothing awaits between read and write)."""

    # Reads answers only: the proxy may forward the upstream's bytes (`types.py`).
    reports_changes = ("on_response",)

    def __init__(self, every: int) -> None:
        self.every = every
        self.n = self.tokens = 0
        self.latency_ms = 0.0
        self.by_status: dict[int, int] = {}

    def on_response(self, resp: ProxyResponse) -> ProxyResponse:
        self.seen(resp.status, resp.body, resp.latency_ms, resp.ctx.extra)
        return resp

    def seen(self, status: int, body: dict[str, Any] | bytes, latency_ms: float,
             extra: dict[str, Any] = _NO_EXTRA, cached: bool = False) -> None:
        """The response stage on the answer's parts (`compiled.py`): counts it."""
        self.n = n = self.n + 1
        by_status = self.by_status
        by_status[status] = by_status.get(status, 0) + 1
        self.latency_ms += latency_ms
        # `streams.usage_of` inlined (it runs on every answer): the body's own usage,
        # else the tokens counted on its stream. (`x.__class__ is T or isinstance(x, T)`:
        # the exact type answers without a global lookup and a call.)
        usage = body.get("usage") if body.__class__ is dict or isinstance(body, dict) else None
        if usage.__class__ is not dict and not isinstance(usage, dict):
            usage = extra.get(COUNTED_USAGE)
        if usage is not None:
            total = usage.get("total_tokens", _ABSENT)
            if total is _ABSENT:  # (not a `get` default: that would be looked up every time)
                total = usage.get("completion_tokens")
            if total.__class__ is int or isinstance(total, int):
                self.tokens += total
        if n % self.every == 0:
            self._report()

    # Its inline source reads the answer's `usage` as `seen` does (`compiled.py`).
    reads_usage = True

    def inline_seen(self, p: str) -> tuple[list[str], dict[str, Any]]:
        """`seen` as source lines for a compiled response function (`compiled.py`), and
        the names they use (each starting with `p`; `usage` is the answer's, as `seen`
        reads it)."""
        names = {f"{p}s": self, f"{p}by": self.by_status, f"{p}absent": _ABSENT,
                 f"{p}every": self.every}
        return [f"{p}s.n = {p}n = {p}s.n + 1",
                f"{p}by[status] = {p}by.get(status, 0) + 1",
                f"{p}s.latency_ms += latency_ms",
                "if usage is not None:",
                f"    {p}t = usage.get('total_tokens', {p}absent)",
                f"    if {p}t is {p}absent:",
                f"        {p}t = usage.get('completion_tokens')",
                f"    if {p}t.__class__ is int or isinstance({p}t, int):",
                f"        {p}s.tokens += {p}t",
                f"if {p}n % {p}every == 0:",
                f"    {p}s._report()"], names

    def _report(self) -> None:
        proxy_logger().info("responses=%d tokens=%d mean_latency_ms=%.1f", self.n, self.tokens,
                            self.latency_ms / self.n)

    def stats(self) -> dict[str, Any]:
        """Answers, tokens, mean latency and statuses."""
        return {"responses": self.n, "response_tokens": self.tokens,
                "mean_latency_ms": self.latency_ms / self.n if self.n else None,
                "responses_by_status": {str(k): v for k, v in sorted(self.by_status.items())}}


def build(cfg: dict[str, Any], env: ChainEnv) -> ResponseStats:
    """The interceptor from its checked config."""
    return ResponseStats(cfg["every"])
