"""nel's capture proxy for one shard of an external agent (`openclaw`, `harbor`).

An agent nel does not drive itself makes its own model calls. So that every call still goes
through the service's interceptor chain with the service's key (which the agent never sees)
and is recorded for the trajectory, the solver starts the proxy in front of the service at
the shard's start and points each sample's agent at its own session URL on it
(`/s/<session>/v1`). The proxy writes every exchange to `capture.jsonl` in the shard's
scratch directory, which also holds whatever the solver keeps per sample; both go at the
shard's end.

The service's `generation` settings (temperature, max_tokens, seed, ...) are sampling
parameters of the model under test: the proxy sets them on every request the agent sends
(a `payload_modifier` after the service's own interceptors), over any value the agent chose.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.errors import NelError

if TYPE_CHECKING:
    from nel_resources.config import ServiceConfig
    from nel_resources.runtime.processes import ManagedProcess

__all__ = ["SessionCapture", "ShardProxy", "with_generation"]


def with_generation(service: ServiceConfig) -> ServiceConfig:
    """`service` whose chain ends by setting its generation settings on every request."""
    params = service.generation.to_request()
    if not params:
        return service
    from nel_resources.config import InterceptorConfig

    last = InterceptorConfig(name="payload_modifier", config={"params_to_add": params})
    return service.model_copy(update={"interceptors": [*service.interceptors, last]})


@dataclass(frozen=True)
class SessionCapture:
    """One session's model calls as the proxy recorded them (`capture.read_capture`)."""

    records: list[dict[str, Any]]

    @property
    def failed(self) -> list[dict[str, Any]]:
        """The calls that failed (an error, or HTTP >= 400), in order."""
        return [r for r in self.records if r.get("error") or int(r.get("status") or 0) >= 400]

    def steps(self) -> list[dict[str, Any]]:
        """The calls as ATIF steps (`capture.steps_of`)."""
        from nel_resources.proxy.capture import steps_of

        return steps_of(self.records)


class ShardProxy:
    """The capture proxy and scratch directory of one shard.

    Args:
        service: the model service, with its effective URL.
        prefix: the scratch directory's name prefix (keep it short where Unix sockets live
            in it: a socket path holds about 107 bytes).
    """

    def __init__(self, service: ServiceConfig, prefix: str) -> None:
        self.service = service
        self.prefix = prefix
        self.root: Path | None = None
        self._proc: ManagedProcess | None = None
        self._url: str | None = None

    @property
    def running(self) -> bool:
        """The proxy is up (between `start()` and `stop()`)."""
        return self._proc is not None

    @property
    def capture_path(self) -> Path:
        """Every model call of the shard (JSONL, `nel_resources.proxy.capture`)."""
        if self.root is None:
            raise NelError("the shard's proxy was not started")
        return self.root / "capture.jsonl"

    async def start(self) -> None:
        """Make the scratch directory and start the proxy (once)."""
        if self._proc is not None:
            return
        from nel_resources.proxy.server import start_proxy

        self.root = Path(tempfile.mkdtemp(prefix=self.prefix))
        self._proc, self._url = await asyncio.to_thread(
            start_proxy, None, service_config=with_generation(self.service),
            capture_path=self.capture_path, log_path=self.root / "proxy.log")

    async def stop(self) -> None:
        """Stop the proxy and remove the scratch directory (the shard's end)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            await asyncio.to_thread(proc.stop)
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def session_url(self, session: str) -> str:
        """The OpenAI-compatible base URL (`.../v1`) of one sample's session."""
        if self._url is None:
            raise NelError("the shard's proxy was not started")
        return self._url[: -len("/v1")] + f"/s/{session}/v1"

    def session(self, session: str) -> SessionCapture:
        """The session's model calls, read once from the capture file."""
        from nel_resources.proxy.capture import read_capture

        path = self.capture_path
        return SessionCapture(list(read_capture(path, session)) if path.exists() else [])

    @staticmethod
    def describe_failure(call: dict[str, Any]) -> str:
        """`model call failed (HTTP <status>: <error>)` for a failed call's record."""
        return (f"model call failed (HTTP {call.get('status')}: "
                f"{str(call.get('error') or '')[:300]})")
