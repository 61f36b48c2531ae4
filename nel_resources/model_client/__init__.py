"""The async model client: OpenAI chat/completions/responses over one keep-alive session.

Measured on this machine (DESIGN.md §5): httpx's default pool collapses at concurrency 64,
aiohttp does not, so the hot path is aiohttp with orjson bodies, one keep-alive connector
per run and an adaptive limit of `max_concurrent` requests in flight. Retries use
exponential backoff with full jitter on 429/5xx/timeouts and transport errors of any kind
(reset, EOF mid-body, a truncated or unparseable 200 body) and honour `Retry-After`; other
4xx are not retried, and 401/403 abort the run with one clear error.

A slot is held only while a request is on the wire: a sample waiting out its back-off
holds none, so other samples keep the endpoint busy. `requests_sent` counts every request
written to the wire (neither transport resends anything behind the client's back).

Modules: `client` (`ModelClient`: requests, the chain run inline), `transport` (the retrying
exchange), `errors`, `response` (`ModelResponse`), `chain_binding` (what the client knows of
a chain: it imports nothing of `nel_resources.proxy`, which is built on it), `nemo` (NeMo
Evaluator's constructor). The client for a configured service, with its chain, is
`nel_resources.proxy.service_client.client_for_service`.
"""

from nel_resources.model_client.chain_binding import ChainBinding, ClientChain
from nel_resources.model_client.client import ModelClient
from nel_resources.model_client.errors import (
    AuthError,
    ChainStopError,
    EndpointUnreachableError,
    ModelError,
)
from nel_resources.model_client.nemo import NemoModelClient
from nel_resources.model_client.response import ModelResponse

__all__ = [
    "AuthError",
    "ChainBinding",
    "ChainStopError",
    "ClientChain",
    "EndpointUnreachableError",
    "ModelClient",
    "ModelError",
    "ModelResponse",
    "NemoModelClient",
]
