"""Redaction of configured secrets from everything nel writes.

The secrets are the values the config makes nel send: API keys (literal, `${VAR}` or
`api_key_env`) and header values of auth-like headers or given literally. `Redactor`
replaces each occurrence (and the `Bearer <key>` form) with `REDACTED`; apply it where
text leaves the model client (error bodies, raw responses) so nothing downstream (journal,
Parquet, exports, Dagster metadata, logs) ever holds a secret.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from nel_resources.wire.endpoint_url import url_secrets

if TYPE_CHECKING:
    from nel_resources.config import NelConfig, ServiceConfig

__all__ = ["REDACTED", "Redactor", "client_secrets", "is_secret_header", "secrets_of"]

REDACTED = "<redacted>"

# Header names whose values are credentials whatever they look like.
_SECRET_HEADER_RE = re.compile(r"auth|key|token|secret|cookie|password|session", re.IGNORECASE)
# Shorter values are not redacted: replacing "1" or "on" everywhere would garble results.
MIN_SECRET_LENGTH = 6


def is_secret_header(name: str) -> bool:
    """Whether a header's value is a credential (Authorization, X-Api-Key, Cookie, ...)."""
    return bool(_SECRET_HEADER_RE.search(name))


def _service_secrets(svc: ServiceConfig) -> list[str]:
    out: list[str] = []
    try:
        key = svc.resolved_api_key()
    except Exception:  # an unset api_key_env is reported where the key is used
        key = None
    if key:
        out.append(key)
    out.extend(url_secrets(svc.url))  # `http://user:key@host/v1?api-key=...`
    try:
        headers = svc.resolved_headers()
    except Exception:
        headers = dict(svc.headers)
    for name, value in headers.items():
        if is_secret_header(name) or "${" in svc.headers.get(name, ""):
            out.append(value)
            # "Bearer sk-..." also leaks as its token alone.
            parts = value.split(None, 1)
            if len(parts) == 2:
                out.append(parts[1])
    return out


def client_secrets(api_key: str | None, headers: dict[str, str]) -> set[str]:
    """The secrets a model client sends: its API key and auth-like header values."""
    found = {api_key} if api_key else set()
    for name, value in headers.items():
        if is_secret_header(name):
            found.add(value)
            parts = value.split(None, 1)
            if len(parts) == 2:
                found.add(parts[1])
    return {s for s in found if len(s) >= MIN_SECRET_LENGTH}


def secrets_of(cfg: NelConfig | Iterable[ServiceConfig]) -> set[str]:
    """Every secret value the config makes nel send, long enough to redact safely."""
    services = cfg.services.values() if hasattr(cfg, "services") else cfg
    found: set[str] = set()
    for svc in services:  # type: ignore[union-attr]
        found.update(s for s in _service_secrets(svc) if len(s) >= MIN_SECRET_LENGTH)
    return found


class Redactor:
    """Replaces known secret values in text and in JSON-like structures."""

    def __init__(self, secrets: Iterable[str]) -> None:
        ordered = sorted({s for s in secrets if s}, key=len, reverse=True)
        self._re = re.compile("|".join(map(re.escape, ordered))) if ordered else None
        self._bytes_re = (
            re.compile(b"|".join(re.escape(s.encode()) for s in ordered)) if ordered else None
        )

    def __bool__(self) -> bool:
        return self._re is not None

    def text(self, value: str) -> str:
        """`value` with every secret replaced by `REDACTED`."""
        return self._re.sub(REDACTED, value) if self._re is not None else value

    def bytes(self, value: bytes) -> bytes:
        """`value` with every secret (UTF-8) replaced by `REDACTED`."""
        if self._bytes_re is None:
            return value
        return self._bytes_re.sub(REDACTED.encode(), value)

    def data(self, value: Any) -> Any:
        """A copy of a JSON-like value (dicts, lists, strings) with secrets replaced."""
        if self._re is None:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.data(k): self.data(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.data(v) for v in value]
        return value
