"""`log_tokens`: one log line of token usage per answer, and run totals in the stats."""

from __future__ import annotations

import logging
from typing import Any

from nel_resources.proxy.env import ChainEnv, proxy_logger
from nel_resources.proxy.fields import FieldSpec
from nel_resources.proxy.streams import COUNTED_USAGE
from nel_resources.proxy.types import ProxyResponse

FIELDS: dict[str, FieldSpec] = {}
AFFECTS_ANSWERS = False
_NO_EXTRA: dict[str, Any] = {}  # an answer not assembled from a stream: nothing counted


class LogTokens:
    """Logs and sums `usage`."""

    # Reads answers only: the proxy may forward the upstream's bytes (`types.py`).
    reports_changes = ("on_response",)

    def __init__(self) -> None:
        self.log = proxy_logger()
        self.prompt = self.completion = self.total = 0

    def on_response(self, resp: ProxyResponse) -> ProxyResponse:
        self.seen(resp.status, resp.body, resp.latency_ms, resp.ctx.extra, resp.cached)
        return resp

    def seen(self, status: int, body: dict[str, Any] | bytes, latency_ms: float,
             extra: dict[str, Any] = _NO_EXTRA, cached: bool = False) -> None:
        """The response stage on the answer's parts (`compiled.py`): sums and logs usage."""
        # `streams.usage_of` inlined (it runs on every answer): the body's own usage,
        # else the tokens counted on its stream.
        # (`x.__class__ is T or isinstance(x, T)`: the exact type answers without a global
        # lookup and a call.)
        usage = body.get("usage") if body.__class__ is dict or isinstance(body, dict) else None
        if usage.__class__ is not dict and not isinstance(usage, dict):
            usage = extra.get(COUNTED_USAGE)
        if usage is not None:
            pt, ct, tt = (usage.get("prompt_tokens"), usage.get("completion_tokens"),
                          usage.get("total_tokens"))
            if pt.__class__ is int or isinstance(pt, int):
                self.prompt += pt
            if ct.__class__ is int or isinstance(ct, int):
                self.completion += ct
            if tt.__class__ is int or isinstance(tt, int):
                self.total += tt
            if self.log.isEnabledFor(logging.INFO):  # skip formatting when nobody reads it
                self._log_line(body, pt, ct, tt, latency_ms, cached)

    # Its inline source reads the answer's `usage` as `seen` does (`compiled.py`).
    reads_usage = True

    def inline_seen(self, p: str) -> tuple[list[str], dict[str, Any]]:
        """`seen` as source lines for a compiled response function (`compiled.py`), and
        the names they use (each starting with `p`; `usage` is the answer's, as `seen`
        reads it; a compiled chain's answers are never cached ones)."""
        names = {f"{p}s": self, f"{p}log": self.log, f"{p}info": logging.INFO}
        return ["if usage is not None:",
                f"    {p}pt = usage.get('prompt_tokens')",
                f"    {p}ct = usage.get('completion_tokens')",
                f"    {p}tt = usage.get('total_tokens')",
                f"    if {p}pt.__class__ is int or isinstance({p}pt, int):",
                f"        {p}s.prompt += {p}pt",
                f"    if {p}ct.__class__ is int or isinstance({p}ct, int):",
                f"        {p}s.completion += {p}ct",
                f"    if {p}tt.__class__ is int or isinstance({p}tt, int):",
                f"        {p}s.total += {p}tt",
                f"    if {p}log.isEnabledFor({p}info):",
                f"        {p}s._log_line(body, {p}pt, {p}ct, {p}tt, latency_ms, False)"], names

    def _log_line(self, body: Any, pt: Any, ct: Any, tt: Any, latency_ms: float, cached: bool) -> None:
        self.log.info("tokens model=%s prompt=%s completion=%s total=%s latency_ms=%.1f%s",
                      body.get("model") if isinstance(body, dict) else None, pt, ct, tt, latency_ms,
                      " (cached)" if cached else "")

    def stats(self) -> dict[str, Any]:
        """Token totals of the answers seen."""
        return {"logged_prompt_tokens": self.prompt, "logged_completion_tokens": self.completion,
                "logged_total_tokens": self.total}


def build(cfg: dict[str, Any], env: ChainEnv) -> LogTokens:
    """The interceptor (it has no config)."""
    return LogTokens()
