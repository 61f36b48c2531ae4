"""The interceptor chain between nel (or any caller) and a model endpoint.

NeMo Evaluator 0.3.0's interceptors under its names and config fields, one module each;
the chain runner (`chain.py`); user interceptors through `@interceptor`. In-process, nel's
`ModelClient` runs its service's chain around its own transport (no extra hop).
"""

from nel_resources.proxy.capture import captured_steps, read_capture
from nel_resources.proxy.chain import Chain, Link, chain_links, endpoint_settings
from nel_resources.proxy.env import ChainEnv
from nel_resources.proxy.fields import InterceptorConfigError
from nel_resources.proxy.registry import affects_answers, interceptor, validate
from nel_resources.proxy.types import (
    ChunkHook,
    Endpoint,
    InterceptorError,
    ProxyRequest,
    ProxyResponse,
    RequestContext,
    RequestHook,
    ResponseHook,
)

__all__ = [
    "Chain", "ChainEnv", "ChunkHook", "Endpoint", "InterceptorConfigError", "InterceptorError",
    "Link", "ProxyRequest", "ProxyResponse", "RequestContext", "RequestHook", "ResponseHook",
    "affects_answers", "captured_steps", "chain_links", "endpoint_settings", "interceptor", "read_capture", "validate",
]
