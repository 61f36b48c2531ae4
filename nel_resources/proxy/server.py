"""The standalone interceptor proxy: one service's chain behind a local OpenAI-compatible port.

For agents nel does not drive itself: they are pointed at `http://127.0.0.1:PORT/v1` and
every request they make passes the same chain nel runs in-process (the service's
`interceptors:` / `proxy:`), with the service's key added on the way out, so the agent
never holds it.

Routes (on 127.0.0.1 only):
- `POST /v1/chat/completions`, `/v1/completions`, `/v1/responses`: through the chain;
  `"stream": true` is streamed back as server-sent events, each chunk through the
  interceptors' chunk hooks, and the response hooks see the whole answer once it has
  ended (`caching` stores it and replays a hit as a stream: `streams.py`);
- `GET /v1/models`: passed through to the upstream;
- a `/s/<session id>` prefix on those paths names the agent session (as NeMo Evaluator's
  proxy does; `turn_counter` counts per session); the `X-Nel-Repeat` header gives the
  sample's repeat index (the cache keeps repeats apart by it);
- `GET /health`, `GET /stats` (requests in, requests sent upstream, interceptor counters).

A body no hook changed passes as the bytes it came in: the agent's request goes upstream
as it was sent, the upstream's answer comes back as it was sent (no re-encoding; which
hooks allow it: `reports_changes` in `types.py`).

What it takes in is bounded (`http_server.ProxyLimits`: body size, bytes buffered across
requests, head and body read timeouts). Malformed requests get 4xx with one line saying
what is wrong; a spent turn budget gets 429
(`session_budget_exhausted`, like NeMo Evaluator); an upstream that cannot be reached after
the retries gets 502.

Run it as `nel proxy --service NAME -c config.yaml [--port 0]`, or through
`InterceptorProxy` (nel_resources/resources.py), which starts it for a run and stops it after.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Sequence
from pathlib import Path
from time import perf_counter
from typing import TYPE_CHECKING, Any

import orjson

from benchmarks.errors import NelError
from nel_resources.config import ServiceConfig
from nel_resources.model_client import AuthError, ModelClient, ModelError
from nel_resources.proxy.capture import Capture
from nel_resources.proxy.chain import Chain, Link
from nel_resources.proxy.endpoint import ClientEndpoint, UpstreamStreamError
from nel_resources.proxy.http_server import MIB, Headers, ProxyLimits, Reply, start_server
from nel_resources.proxy.service_client import client_for_service
from nel_resources.proxy.types import InterceptorError, ProxyRequest, ProxyResponse, RequestContext

if TYPE_CHECKING:
    from nel_resources.runtime.processes import ManagedProcess

# The environment variable a child proxy reads its service from (`start_proxy`).
_SERVICE_ENV = "NEL_PROXY_SERVICE_JSON"
# API paths an agent may call through the chain (below /v1).
CHAIN_PATHS = frozenset({"/chat/completions", "/completions", "/responses"})
_SESSION = re.compile(r"^/s/([A-Za-z0-9_.:-]{1,128})(/.*)$")


def _error(status: int, message: str, kind: str = "invalid_request_error",
           code: str | None = None) -> Reply:
    err: dict[str, Any] = {"message": message, "type": kind}
    if code:
        err["code"] = code
    return Reply(status, orjson.dumps({"error": err}))


async def _ready(reply: Reply) -> Reply:
    """`reply` as an awaitable (what `ProxyServer.handle` returns for every request)."""
    return reply


_NOT_SERVED = ("the proxy serves /v1/chat/completions, /v1/completions, /v1/responses and "
               "/v1/models")


class ProxyServer:
    """The chain of one service as an HTTP handler (see `http_server.py`).

    Args:
        client: the service's client (`client_for_service`); its chain runs every request,
            and a service without interceptors gets an empty chain (a plain forwarder).
        capture: records each exchange (`capture.py`); the first link of the chain.
    """

    def __init__(self, client: ModelClient, capture: Capture | None = None) -> None:
        self.client = client
        if client.chain is None:
            client.chain = Chain([], ClientEndpoint(client))
        if capture is not None:
            client.chain = Chain([Link("capture", capture), *client.chain.links],
                                 client.chain.endpoint)
        self.capture = capture
        self.chain: Chain = client.chain
        endpoint = self.chain.endpoint
        self.endpoint: ClientEndpoint | None = endpoint if isinstance(endpoint, ClientEndpoint) else None
        # The endpoint a request is sent to without `chain.run` (`_through_chain`): when the
        # chain is plain (no async hook) and ends at nel's client.
        self._direct = (endpoint if self.chain.plain and type(endpoint) is ClientEndpoint
                        else None)
        self.requests_in = 0

    async def open(self) -> None:
        """Open the upstream connections."""
        await self.client.open()

    async def close(self) -> None:
        """Close upstream connections and the chain (the cache is flushed to disk)."""
        if self.endpoint is not None:
            await self.endpoint.close()
        await self.client.close()

    def handle(self, method: bytes, path: str, headers: Headers, body: bytes
               ) -> Awaitable[Reply | AsyncIterator[bytes]]:
        """One HTTP request: the awaitable of a whole reply, or of the pieces of an event
        stream. (A plain call: a request through the chain awaits `_through_chain` itself,
        one coroutine level less on the way to the upstream and back.)"""
        if path == "/health":
            return _ready(Reply(200, b'{"status":"ok"}'))
        if path == "/stats":
            return _ready(Reply(200, orjson.dumps({
                "requests": self.requests_in, "upstream_requests": self.client.requests_sent,
                "interceptors": self.chain.names, "stats": self.chain.stats()})))
        session = None
        if path.startswith("/s/"):  # the regex only for paths that can name a session
            m = _SESSION.match(path)
            if m:
                session, path = m.group(1), m.group(2)
        if not path.startswith("/v1/"):
            return _ready(_error(404, f"unknown path {path}: {_NOT_SERVED}"))
        sub = path[3:]
        if sub == "/models":
            if method != b"GET":
                return _ready(_error(405, "use GET for /v1/models"))
            return self._models()
        if sub not in CHAIN_PATHS:
            return _ready(_error(404, f"unknown path {path}: {_NOT_SERVED}"))
        if method != b"POST":
            return _ready(_error(405, f"use POST for {path}"))
        return self._through_chain(body, headers, sub, session)

    async def _models(self) -> Reply:
        try:
            status, _, raw = await self.client._send("GET", "/models", b"", min(self.client.timeout, 30))
        except (TimeoutError, OSError) as exc:
            return _error(502, f"upstream unreachable: {type(exc).__name__}: {exc}", "upstream_error")
        return Reply(status, self.client.redact_bytes(raw))

    async def _through_chain(self, raw: bytes, headers: Headers, sub: str, session: str | None
                             ) -> Reply | AsyncIterator[bytes]:
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            return _error(400, f"the body is not valid JSON: {exc}")
        if not isinstance(body, dict):
            return _error(400, f"the body must be a JSON object, not a {type(body).__name__}")
        repeat: int | None = None
        rep = headers(b"x-nel-repeat")
        if rep is not None:
            # At most 9 digits: an int, not a 4,300-digit parse that raises.
            if not rep.isdigit() or len(rep) > 9:
                shown = rep[:40].decode(errors="replace") + ("..." if len(rep) > 40 else "")
                return _error(400, "X-Nel-Repeat must be a non-negative integer below "
                                   f"1000000000, not {shown!r}")
            repeat = int(rep)
        send_raw: bytes | None = raw  # the agent's bytes go upstream unless a hook edits
        if self.client.model and "model" not in body:
            body["model"] = self.client.model
            send_raw = None
        self.requests_in += 1
        req = ProxyRequest(body, {}, sub, RequestContext(session, repeat), bool(body.get("stream")),
                           send_raw)
        try:
            if req.stream and not self.chain.collects_streams:
                return await self._stream(req)
            endpoint = None if req.stream else self._direct  # `streaming`: answered whole
            if endpoint is None:
                resp = await self.chain.run(req)
            else:
                # What `chain.run` and `endpoint.send` do for a plain chain, inline: two
                # coroutines less per request, each created, resumed and ended per call.
                out = self.chain.before(req)
                if not isinstance(out, ProxyResponse):
                    data, hdrs = endpoint.wire(out)
                    t0 = perf_counter()
                    try:
                        status, obj, attempts, raw_resp = await endpoint._post(data, out.path, hdrs)
                    except (AuthError, ModelError) as exc:
                        self.chain.failed(out.ctx, exc)
                        raise
                    out = endpoint.answer(out.ctx, status, obj, attempts, t0, raw_resp)
                resp = self.chain.after(out)
        except InterceptorError as exc:
            return self._failed(req, self._refused(exc), str(exc))
        except AuthError as exc:
            return self._failed(req, _error(502, str(exc), "upstream_error"), str(exc))
        except ModelError as exc:
            return self._failed(req, _error(502, f"upstream failed after retries: {exc}",
                                            "upstream_error"), str(exc))
        return self._answer(resp)

    def _failed(self, req: ProxyRequest, reply: Reply, message: str) -> Reply:
        """The refusal, recorded by the capture (an exchange without an answer)."""
        if self.capture is not None:
            self.capture.failed(req.ctx, reply.status, self.client.redact_text(message))
        return reply

    @staticmethod
    def _refused(exc: InterceptorError) -> Reply:
        if exc.interceptor == "turn_counter":
            return _error(429, str(exc), code="session_budget_exhausted")
        return _error(400, str(exc), "interceptor_error")

    @staticmethod
    def _answer(resp: ProxyResponse) -> Reply:
        if isinstance(resp.body, dict):
            # The upstream's own bytes while every hook left the body as it came (`raw`).
            raw = resp.raw
            return Reply(resp.status, raw if raw is not None else orjson.dumps(resp.body))
        text = resp.body.decode("utf-8", "replace") if isinstance(resp.body, bytes) else str(resp.body)
        return _error(resp.status, text, "upstream_error")

    async def _stream(self, req: ProxyRequest) -> Reply | AsyncIterator[bytes]:
        chunks = self.chain.stream(req)
        try:
            # The first chunk before the headers: an upstream refusal keeps its status.
            first = await anext(chunks, None)
        except UpstreamStreamError as exc:
            await chunks.aclose()
            return self._failed(req, _error(exc.status, exc.text, "upstream_error"), exc.text)
        return self._events(req, first, chunks)

    async def _events(self, req: ProxyRequest, first: dict[str, Any] | None,
                      chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
        try:
            if first is not None:
                yield b"data: " + orjson.dumps(first) + b"\n\n"
                async for chunk in chunks:
                    yield b"data: " + orjson.dumps(chunk) + b"\n\n"
            yield b"data: [DONE]\n\n"
        except (UpstreamStreamError, ModelError, InterceptorError, OSError, TimeoutError) as exc:
            # The status line is out: the error goes as a last event, as OpenAI's API does.
            if self.capture is not None:
                self.capture.failed(req.ctx, 200, self.client.redact_text(f"stream cut: {exc}"))
            yield b"data: " + orjson.dumps({"error": {"message": str(exc), "type": "upstream_error"}}) + b"\n\n"
        finally:
            await chunks.aclose()  # type: ignore[attr-defined]


def pick_service(config_path: str, service: str | None) -> tuple[str, ServiceConfig]:
    """The named service of a config (the only one when the config has one)."""
    from nel_resources.config import load_config

    cfg = load_config(config_path)
    if service is None:
        if len(cfg.services) != 1:
            names = ", ".join(cfg.services) or "none"
            raise NelError(f"{config_path}: name the service to proxy with --service (services: {names})")
        service = next(iter(cfg.services))
    if service not in cfg.services:
        names = ", ".join(cfg.services) or "none"
        raise NelError(f"{config_path}: no service {service!r} (services: {names})")
    svc = cfg.services[service]
    if not svc.url:
        raise NelError(f"service {service!r} has no url: the proxy forwards to a running endpoint")
    return service, svc


async def serve(service: ServiceConfig, *, port: int = 0, port_file: Path | None = None,
                out: Any = sys.stdout, capture_path: Path | None = None,
                limits: ProxyLimits | None = None) -> None:
    """Serve the service's chain on 127.0.0.1 until SIGTERM or SIGINT.

    Prints `http://127.0.0.1:PORT/v1` once listening (and writes the port to `port_file`).
    With `capture_path`, each exchange is appended to that JSONL file (`capture.py`).
    `limits` bound what it takes in (body sizes, bytes buffered, read timeouts).
    """
    client = client_for_service(service)
    capture = Capture(capture_path, client.redact_bytes) if capture_path is not None else None
    server = ProxyServer(client, capture)
    await server.open()
    try:
        listener = await start_server(server.handle, port, limits)
    except OSError as exc:
        await server.close()
        raise NelError(f"cannot listen on 127.0.0.1:{port} ({exc.strerror or exc}); "
                       "pick another --port, or 0 for a free one") from None
    bound = listener.sockets[0].getsockname()[1]
    # Everything built so far (config, modules, the chain) lives as long as the process:
    # kept out of the collector's scans, which would otherwise walk it at every full pass.
    gc.freeze()
    print(f"http://127.0.0.1:{bound}/v1", file=out, flush=True)
    if port_file is not None:
        tmp = port_file.with_suffix(".tmp")
        tmp.write_text(str(bound))
        os.replace(tmp, port_file)  # whole or absent: a reader never sees half a number
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        listener.close()
        await server.close()


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m nel_resources.proxy.server -c CONFIG [--service NAME] [--port N]`
    (what `nel proxy` runs; `InterceptorProxy` starts this, without the CLI's imports)."""
    from nel_resources.proxy.arguments import add_proxy_arguments

    p = argparse.ArgumentParser(prog="nel proxy", description=__doc__.splitlines()[0])
    add_proxy_arguments(p, internal=True)
    args = p.parse_args(argv)
    try:
        return run(args)
    except NelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    """Serve until stopped; the exit status."""
    if not 0 <= args.port <= 65535:
        raise NelError(f"--port must be 0..65535, not {args.port}")
    env_var = getattr(args, "service_env", None)
    if env_var and not args.config:
        svc = ServiceConfig.model_validate_json(os.environ[env_var])
    elif args.config:
        _, svc = pick_service(args.config, args.service)
    else:
        raise NelError("give the config: -c CONFIG")
    import logging

    logging.getLogger("nel.proxy").setLevel(getattr(args, "log_level", "INFO"))
    main_coro = serve(svc, port=args.port, port_file=args.port_file,
                      capture_path=getattr(args, "capture", None), limits=limits_from(args))
    try:
        import uvloop
    except ImportError:
        asyncio.run(main_coro)
    else:
        uvloop.run(main_coro)
    return 0


def limits_from(args: argparse.Namespace) -> ProxyLimits:
    """The proxy's limits from its flags, checked."""
    d = ProxyLimits()
    body = getattr(args, "max_body_mb", None)
    buffered = getattr(args, "max_buffered_mb", None)
    head = getattr(args, "head_timeout", None)
    body_t = getattr(args, "body_timeout", None)
    for flag, value in (("--max-body-mb", body), ("--max-buffered-mb", buffered),
                        ("--head-timeout", head), ("--body-timeout", body_t)):
        if value is not None and not value > 0:
            raise NelError(f"{flag} must be a positive number, not {value:g}")
    lim = ProxyLimits(max_body=int(body * MIB) if body else d.max_body,
                      max_buffered=int(buffered * MIB) if buffered else d.max_buffered,
                      head_timeout=head or d.head_timeout, body_timeout=body_t or d.body_timeout)
    if lim.max_body > lim.max_buffered:
        raise NelError(f"--max-body-mb ({lim.max_body / MIB:g}) must not exceed --max-buffered-mb "
                       f"({lim.max_buffered / MIB:g}): such a request could never be taken")
    return lim


def start_proxy(config_path: str | os.PathLike[str] | None, service: str | None = None, *,
                timeout: float = 600.0, log_path: str | os.PathLike[str] | None = None,
                env: dict[str, str] | None = None, log_level: str = "INFO",
                capture_path: str | os.PathLike[str] | None = None,
                service_config: ServiceConfig | None = None,
                extra_args: Sequence[str] = ()) -> tuple[ManagedProcess, str]:
    """Start the proxy for a service as a child process (its own session); wait until it
    answers `/health`. Returns the process (stop it) and its base URL (`.../v1`).

    The service is `service` of the config file at `config_path`, or `service_config`
    itself (handed over in the child's environment, so a literal key stays off the disk).
    With `capture_path`, it records each exchange there (`capture.py`). `extra_args` are
    more of the proxy's flags (`--max-body-mb 8`, `--head-timeout 5`, ...).

    Raises:
        ProcessExitedError: the proxy exited first (a bad config: its log tail says why).
        HealthCheckError: it stalled (no CPU progress for 30 s) or was not listening by the
            `timeout` ceiling.
    """
    import tempfile

    from nel_resources.runtime.processes import ManagedProcess, wait_for_port_file

    workdir = Path(tempfile.mkdtemp(prefix="nel-proxy-"))
    port_file = workdir / "port"
    argv = [sys.executable, "-m", "nel_resources.proxy.server",
            "--port-file", str(port_file), "--log-level", log_level]
    if service_config is not None:
        env = {**(env or {}), _SERVICE_ENV: service_config.model_dump_json()}
        argv += ["--service-env", _SERVICE_ENV]
    elif config_path is not None:
        argv += ["-c", str(config_path)]
    else:
        raise NelError("start_proxy needs a config path or a service config")
    if service:
        argv += ["--service", service]
    if capture_path is not None:
        argv += ["--capture", str(capture_path)]
    argv += list(extra_args)
    proc = ManagedProcess(argv, name="nel-proxy", log_path=log_path or workdir / "proxy.log",
                          env=env).start()
    try:
        port = wait_for_port_file(proc, port_file, what="the proxy", timeout=timeout)
    except BaseException:
        proc.stop()
        raise
    return proc, f"http://127.0.0.1:{port}/v1"


if __name__ == "__main__":
    sys.exit(main())
