"""How a model call fails: per sample (`ModelError`), for the whole run (`AuthError`,
`EndpointUnreachableError`, `ChainStopError`), and the client's own internal signals."""

from __future__ import annotations

from benchmarks.errors import NelError


class BadBody(Exception):
    """An HTTP 200 whose body is not a JSON object (cut short on the way, most likely)."""


class AttemptCut(Exception):
    """The hang cut ended an attempt that went silent far past the run's answers."""


class ModelError(Exception):
    """A request that failed for good; `category` is a failure category."""

    def __init__(self, message: str, category: str, status: int | None = None,
                 attempts: int = 1):
        super().__init__(message)
        self.category = category
        self.status = status
        self.attempts = attempts


class ChainStopError(NelError):
    """An interceptor stopped the run (`raise_client_errors` on a 4xx)."""


class AuthError(NelError):
    """401/403 from the endpoint: the whole run stops, nothing is retried."""


class EndpointUnreachableError(NelError):
    """The endpoint did not answer at all (connection refused, DNS, timeout)."""
