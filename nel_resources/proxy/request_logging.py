"""`logging`: a preview line of every request and answer, with the run's secrets masked.

The previews are cut at `max_preview` characters after the secrets are masked (so no
prefix of a key survives a cut); headers are never logged.
"""

from __future__ import annotations

from typing import Any

import orjson

from nel_resources.proxy.env import ChainEnv, proxy_logger
from nel_resources.proxy.fields import FieldSpec
from nel_resources.proxy.types import ProxyRequest, ProxyResponse

FIELDS = {"max_preview": FieldSpec("int", 512, minimum=0)}
AFFECTS_ANSWERS = False


class RequestLogging:
    """Logs request and response previews."""

    def __init__(self, max_preview: int, env: ChainEnv) -> None:
        self.max = max_preview
        self.redact = env.redactor
        self.log = proxy_logger()

    def _preview(self, obj: Any) -> str:
        text = obj.decode("utf-8", "replace") if isinstance(obj, bytes) else \
            orjson.dumps(obj, default=str).decode()
        text = self.redact.text(text)
        return text if len(text) <= self.max else text[: self.max] + "..."

    def on_request(self, req: ProxyRequest) -> ProxyRequest:
        self.log.info("request %s session=%s keys=%s body=%s", req.path, req.ctx.session_id,
                      sorted(req.body), self._preview(req.body))
        return req

    def on_response(self, resp: ProxyResponse) -> ProxyResponse:
        self.log.info("response status=%d latency_ms=%.1f%s body=%s", resp.status, resp.latency_ms,
                      " cached" if resp.cached else "", self._preview(resp.body))
        return resp


def build(cfg: dict[str, Any], env: ChainEnv) -> RequestLogging:
    """The interceptor from its checked config."""
    return RequestLogging(cfg["max_preview"], env)
