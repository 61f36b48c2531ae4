"""The interceptor chain between nel (or any caller) and a model endpoint.

NeMo Evaluator 0.3.0's interceptors under its names and config fields, one module each;
the chain runner (`chain.py`); user interceptors through `@interceptor`. In-process, nel's
`ModelClient` runs its service's chain around its own transport (no extra hop).

The names below load on first use (PEP 562): `nel --help` registers `nel proxy`'s options
from `proxy.arguments`, which must not pull in the chain and its interceptors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nel_resources.runtime.lazy_exports import lazy_exports

if TYPE_CHECKING:
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

# name -> the module that defines it
_EXPORTS = {
    "captured_steps": "capture", "read_capture": "capture",
    "Chain": "chain", "Link": "chain", "chain_links": "chain", "endpoint_settings": "chain",
    "ChainEnv": "env", "InterceptorConfigError": "fields",
    "affects_answers": "registry", "interceptor": "registry", "validate": "registry",
    "ChunkHook": "types", "Endpoint": "types", "InterceptorError": "types", "ProxyRequest": "types",
    "ProxyResponse": "types", "RequestContext": "types", "RequestHook": "types", "ResponseHook": "types",
}

__all__ = [
    "Chain", "ChainEnv", "ChunkHook", "Endpoint", "InterceptorConfigError", "InterceptorError",
    "Link", "ProxyRequest", "ProxyResponse", "RequestContext", "RequestHook", "ResponseHook",
    "affects_answers", "captured_steps", "chain_links", "endpoint_settings", "interceptor",
    "read_capture", "validate",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
