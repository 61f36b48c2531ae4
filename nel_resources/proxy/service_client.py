"""The client for a configured service: nel's `ModelClient` with the service's interceptor
chain (`interceptors:`, `proxy:`) run in-process around its transport."""

from __future__ import annotations

from typing import Any

from benchmarks.errors import NelError
from nel_resources.config import ServiceConfig
from nel_resources.model_client import ModelClient
from nel_resources.wire.endpoint_url import url_secrets
from nel_resources.wire.redact import Redactor, client_secrets

__all__ = ["client_for_service", "service_interceptors"]


def client_for_service(service: ServiceConfig, base_url: str | None = None, *,
                       timeout: float | None = None) -> ModelClient:
    """A client for a configured service (a launched service passes its own URL).

    `timeout` (seconds per attempt) overrides the service's, e.g. a benchmark's `timeout`.
    A service with `interceptors:` / `proxy:` gets its chain, run in-process around the
    client's transport; the `proxy:` settings and an `endpoint` entry tune the transport.
    """
    url = base_url or service.url
    if not url:
        raise NelError("the service has no url: set `url:` (or use a launched service type)")
    specs = service_interceptors(service)
    proxy = service.proxy
    ep: dict[str, Any] = {}
    if proxy is not None:
        given = proxy.model_fields_set
        ep = {k: getattr(proxy, k) for k in ("request_timeout", "max_retries", "retry_on_status",
                                              "extra_body", "extra_headers") if k in given}
        if "max_concurrent_upstream" in given:
            ep["max_concurrent"] = proxy.max_concurrent_upstream
    if specs:
        from nel_resources.proxy import endpoint_settings

        ep.update(endpoint_settings(specs))
    headers = service.resolved_headers()
    api_key = ep.get("api_key") or service.resolved_api_key()
    # A benchmark's own `timeout` wins, then the proxy's `request_timeout`, then the service's.
    per_attempt = timeout if timeout is not None else ep.get("request_timeout", service.timeout)
    client = ModelClient(
        ep.get("upstream_url") or url, model=service.model, protocol=service.protocol,
        api_key=api_key, generation=service.generation.to_request(),
        timeout=per_attempt,
        connect_timeout=service.connect_timeout,
        max_concurrent=min(service.max_concurrent, ep.get("max_concurrent", service.max_concurrent)),
        max_retries=ep.get("max_retries", service.max_retries), retry_backoff=service.retry_backoff,
        headers=headers, transport=service.transport, retry_on_status=ep.get("retry_on_status"),
    )
    verbose = service.proxy_verbose or bool(proxy is not None and proxy.verbose)
    if specs or verbose or ep.get("extra_body") or ep.get("extra_headers"):
        from nel_resources.proxy import Chain, ChainEnv, chain_links
        from nel_resources.proxy.endpoint import ClientEndpoint

        env = ChainEnv(service=service.model or "model",
                       redactor=Redactor(client_secrets(api_key, {**headers, **ep.get("extra_headers", {})})
                                          | url_secrets(url)))
        client.chain = Chain(chain_links(specs, env, verbose=verbose),
                             ClientEndpoint(client, ep.get("extra_body"), ep.get("extra_headers")))
    return client


def service_interceptors(service: ServiceConfig) -> list[tuple[str, dict[str, Any]]]:
    """The service's chain as (name, config) pairs: `interceptors:`, then `proxy.interceptors`."""
    items = [*service.interceptors, *(service.proxy.interceptors if service.proxy else ())]
    return [(i.name, dict(i.config)) for i in items]
