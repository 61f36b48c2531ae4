"""`raise_client_errors`: a 4xx answer (other than 408 and 429) stops the run.

Without it a 4xx is a failed sample; with it the first one ends the run with the server's
message, because a request the server calls malformed will be malformed for every sample.
"""

from __future__ import annotations

from typing import Any

import orjson

from nel_resources.proxy.env import ChainEnv
from nel_resources.proxy.fields import FieldSpec
from nel_resources.proxy.types import InterceptorError, ProxyResponse

FIELDS: dict[str, FieldSpec] = {}
AFFECTS_ANSWERS = False
_RETRIABLE = frozenset({408, 429})


class RaiseClientErrors:
    """Turns client errors into a run-stopping error."""

    def __init__(self, env: ChainEnv) -> None:
        self.redact = env.redactor

    def on_response(self, resp: ProxyResponse) -> ProxyResponse:
        self.seen(resp.status, resp.body, resp.latency_ms)
        return resp

    def seen(self, status: int, body: dict[str, Any] | bytes, latency_ms: float,
             extra: dict[str, Any] | None = None, cached: bool = False) -> None:
        """The response stage on the answer's parts (`compiled.py`): raises on a 4xx."""
        if 400 <= status < 500 and status not in _RETRIABLE:
            text = (body.decode("utf-8", "replace") if isinstance(body, bytes)
                    else orjson.dumps(body.get("error", body)).decode())
            raise InterceptorError("raise_client_errors",
                                   f"the endpoint answered HTTP {status}: "
                                   f"{self.redact.text(text)[:300]}", fatal=True)


def build(cfg: dict[str, Any], env: ChainEnv) -> RaiseClientErrors:
    """The interceptor (it has no config)."""
    return RaiseClientErrors(env)
