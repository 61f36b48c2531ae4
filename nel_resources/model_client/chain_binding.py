"""What `ModelClient` knows of an interceptor chain: the few methods it calls, and what a
chain tells the client about itself when first used (`ChainBinding`).

The chain lives in `nel_resources.proxy`, which is built on this client (its endpoint sends
through it); so the client imports nothing of the proxy and asks the chain instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class CompiledStages(Protocol):
    """A plain chain's stages as two functions (`proxy.compiled.CompiledChain`)."""

    request: Callable[[bytes, str | None], bytes]
    response: Callable[[int, Any, float], None]
    headers: dict[str, str]
    path: str


class ChainBinding(Protocol):
    """What a chain told one client about itself (`ClientChain.bind_client`; the chain's
    own `proxy.chain.ClientBinding`).

    Attributes:
        inline: `ModelClient.generate` runs the chain's stages itself: a plain chain whose
            endpoint is this client's own transport.
        compiled: those stages compiled, or None when a hook needs the generic path.
        refusal: what a hook raises to refuse a request (`InterceptorError`).
        request_type: the chain's request (`ProxyRequest`), built by position.
        context_type: its context (`RequestContext`), built by position.
        response_type: the chain's response (`ProxyResponse`), which a request hook may
            return instead of a request (a cache hit).
    """

    inline: bool
    compiled: CompiledStages | None
    refusal: type[Exception]
    request_type: Callable[..., Any]
    context_type: Callable[..., Any]
    response_type: type


class ClientChain(Protocol):
    """The interceptor chain a `ModelClient` runs around its requests (`proxy.Chain`)."""

    plain: bool
    endpoint: Any

    def bind_client(self, client: Any, path: str) -> ChainBinding:
        """What this chain is to `client`, whose requests go to `path`."""
        ...

    def before(self, req: Any) -> Any:
        """The request stage of a plain chain: the request to send, or an answer."""
        ...

    def after(self, resp: Any) -> Any:
        """The response stage of a plain chain."""
        ...

    async def run(self, req: Any) -> Any:
        """The whole chain, endpoint included."""
        ...

    def failed(self, ctx: Any, exc: BaseException) -> None:
        """Tell the hooks that record failures that the request of `ctx` got no answer."""
        ...

    async def close(self) -> None:
        """Close the chain's interceptors."""
        ...
