"""`endpoint`: the last link of the chain, which sends the request to the model.

In-process it is nel's `ModelClient` itself (its pooled keep-alive transport, bounded
concurrency, retries with backoff and jitter): the chain adds no hop. Its config fields are
NeMo Evaluator's; a service's `proxy:` block gives the same settings, and an explicit
`endpoint` entry in the chain wins over them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nel_resources.proxy.fields import FieldSpec
from nel_resources.proxy.types import ProxyRequest, ProxyResponse

if TYPE_CHECKING:
    from nel_resources.model_client import ModelClient

FIELDS = {
    "upstream_url": FieldSpec("str", None, nullable=True),
    "api_key": FieldSpec("str", None, nullable=True),
    "extra_body": FieldSpec("dict", None, nullable=True),
    "extra_headers": FieldSpec("dict[str,str]", None, nullable=True),
    "request_timeout": FieldSpec("float", None, minimum=0.001, nullable=True),
    "max_retries": FieldSpec("int", None, minimum=0, nullable=True),
    "retry_on_status": FieldSpec("list[int]", None, nullable=True),
    "max_concurrent": FieldSpec("int", None, minimum=1, nullable=True),
    "model_traffic_store_id": FieldSpec("str", None, nullable=True),
}
AFFECTS_ANSWERS = False


class ClientEndpoint:
    """Sends through a `ModelClient` (one exchange with its retries)."""

    def __init__(self, client: ModelClient, extra_body: dict[str, Any] | None = None,
                 extra_headers: dict[str, str] | None = None) -> None:
        self.client = client
        self.extra_body = dict(extra_body or {})
        self.extra_headers = dict(extra_headers or {})

    async def send(self, req: ProxyRequest) -> ProxyResponse:
        if self.extra_body:
            req.body.update(self.extra_body)
        headers = {**self.extra_headers, **req.headers} if self.extra_headers else req.headers
        status, body, attempts, latency_ms = await self.client.exchange(req.body, req.path, headers)
        return ProxyResponse(status, body, latency_ms, attempts, req.ctx)
