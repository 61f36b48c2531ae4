"""The proxy a run starts for a service: what delegated solvers point their agents at.

nel's own model calls run the service's chain in-process. An agent nel does not drive (a
Gym agent, a Harbor harness) needs an endpoint instead: `proxy_for_service` starts the
standalone proxy (`server.py`) for one service of the run's config, in front of its URL,
with its `interceptors:` / `proxy:` settings (`request_timeout`, `max_retries`, `verbose`
adds request/answer previews to the proxy's log, ...), recording every exchange to a
capture file (`capture.py`), and stops it when the block ends, however it ends::

    with proxy_for_service(cfg, "policy") as proxy:
        run_agent(base_url=proxy.session_url(sample_id))
        steps = captured_steps(proxy.capture_path, sample_id)

The agent names its session with the `/s/<id>` path prefix (`session_url`): ids of
letters, digits and `_ - . :` (nel's sample ids `problem:repeat` fit).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.errors import NelError

if TYPE_CHECKING:
    from nel_resources.config import NelConfig, ServiceConfig


@dataclass(frozen=True)
class RunProxy:
    """A running proxy.

    Attributes:
        url: its base URL, `http://127.0.0.1:PORT/v1`.
        capture_path: the JSONL file its exchanges go to (`captured_steps` reads it).
        log_path: its log (interceptor lines; request previews with `proxy.verbose`).
        pid: its process id.
    """

    url: str
    capture_path: Path
    log_path: Path
    pid: int

    def session_url(self, session_id: str) -> str:
        """The base URL an agent uses for one session (`.../s/<id>/v1`)."""
        return self.url[: -len("/v1")] + f"/s/{session_id}/v1"


def proxied_service(cfg: NelConfig, service_name: str, url: str | None = None) -> ServiceConfig:
    """The named service of a config, ready to proxy (`url` overrides a launched one's)."""
    svc = cfg.services.get(service_name)
    if svc is None:
        names = ", ".join(cfg.services) or "none"
        raise NelError(f"no service {service_name!r} to proxy (services: {names})")
    if url is not None:
        svc = svc.model_copy(update={"url": url})
    if not svc.url:
        raise NelError(f"service {service_name!r} has no url yet: the proxy forwards to a "
                       "running endpoint (start the service first, or give url=)")
    return svc


@contextmanager
def proxy_for_service(cfg: NelConfig, service_name: str, *, url: str | None = None,
                      capture_path: str | os.PathLike[str] | None = None,
                      log_path: str | os.PathLike[str] | None = None,
                      timeout: float = 600.0) -> Iterator[RunProxy]:
    """Start the proxy of one service for the length of the block.

    Args:
        cfg: the run's config (its services' keys never reach a file: the child gets the
            service in its environment).
        service_name: the service whose chain the proxy runs.
        url: the service's URL when nel launched it (its config has none).
        capture_path: where exchanges are recorded (default: a file in a private temp
            directory that is removed with the proxy: read it inside the block).
        log_path: the proxy's log (default: in that temp directory).
        timeout: ceiling, in seconds, on the wait for it to listen (a stalled start fails
            earlier: nel_resources.runtime.processes.wait_for_port_file).

    Raises:
        NelError: no such service, or it has no URL.
        ProcessExitedError / HealthCheckError: the proxy did not start (its log says why).
    """
    from nel_resources.proxy.server import start_proxy

    svc = proxied_service(cfg, service_name, url)
    workdir = Path(tempfile.mkdtemp(prefix="nel-run-proxy-"))
    try:
        capture = Path(capture_path) if capture_path is not None else workdir / "capture.jsonl"
        log = Path(log_path) if log_path is not None else workdir / "proxy.log"
        proc, base = start_proxy(None, timeout=timeout, log_path=log, capture_path=capture,
                                 service_config=svc)
        try:
            yield RunProxy(base, capture, log, proc.pid)
        finally:
            proc.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


__all__ = ["RunProxy", "proxied_service", "proxy_for_service"]
