"""Dagster resources: the result store, the model services and the benchmarks' sandboxes.

API keys never enter Dagster config: a service names the environment variable that holds
its key (`api_key_env`, shown as such in the UI), and a literal key from a YAML file stays
in this process's memory only.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import dagster as dg
from pydantic import PrivateAttr

from nel_resources.config import SandboxConfig, ServiceConfig
from nel_resources.config.deployment import NodePool
from nel_resources.model_client import ModelClient
from nel_resources.proxy.service_client import client_for_service
from nel_resources.sandboxes.base import SandboxFactory
from nel_resources.storage.store import ResultStore

# Literal API keys given in a config file, by service name: kept out of Dagster config so
# they never reach the event log or the UI.
_LITERAL_KEYS: dict[str, str] = {}
# A sandbox's `container_env` by benchmark: values may be secrets, so (like literal API keys)
# they stay in this process's memory and out of the Dagster-visible config.
_SANDBOX_ENV: dict[str, dict[str, str]] = {}


class ResultStoreResource(dg.ConfigurableResource):
    """The Parquet result store rooted at the output directory."""

    root: str

    def store(self) -> ResultStore:
        """The store object."""
        return ResultStore(self.root)


class ModelService(dg.ConfigurableResource):
    """An OpenAI-compatible model endpoint (`type: api`), as a Dagster resource.

    Launched services (llama.cpp, vLLM, ...) set `url` when they start.
    """

    name: str
    service_json: str
    url: str | None = None
    _config: ServiceConfig | None = PrivateAttr(default=None)

    @classmethod
    def from_config(cls, name: str, svc: ServiceConfig) -> ModelService:
        """Build the resource; a literal api_key is moved out of the Dagster-visible config."""
        data = svc.model_dump(mode="json")
        if data.get("api_key"):
            _LITERAL_KEYS[name] = data["api_key"]
            data["api_key"] = None
        return cls(name=name, service_json=ServiceConfig.model_validate(data).model_dump_json(),
                   url=svc.url)

    def service(self) -> ServiceConfig:
        """The service config, with a literal key restored from process memory."""
        if self._config is None:
            cfg = ServiceConfig.model_validate_json(self.service_json)
            if self.name in _LITERAL_KEYS:
                cfg = cfg.model_copy(update={"api_key": _LITERAL_KEYS[self.name]})
            self._config = cfg
        return self._config

    def client(self) -> ModelClient:
        """A new client for this service (one per run: it owns the HTTP session)."""
        return client_for_service(self.service(), self.url)


class SandboxResource(dg.ConfigurableResource):
    """A benchmark's sandbox block (`sandbox:` inline or by name from `sandboxes:`).

    `open()` makes the block's `SandboxFactory` for a shard's run and always closes it
    (`aclose`) when the run ends, failed or not. The factory is asynchronous and each shard
    runs its own event loop, so it lives for one shard's run, not for a whole Dagster run.
    """

    benchmark: str
    sandbox_json: str
    pool_json: str = ""  # the block's node pool (`cluster.node_pools.<node_pool>`), if any

    @classmethod
    def from_config(cls, benchmark: str, cfg: SandboxConfig,
                    pool: NodePool | None = None) -> SandboxResource:
        """The resource of `benchmark`'s sandbox block (and the node pool it names)."""
        if cfg.container_env:
            _SANDBOX_ENV[benchmark] = dict(cfg.container_env)
        # Only the keys the config wrote, so the block read back has the same set fields
        # (re-validating a full dump would mark every default as written).
        data = cfg.model_dump(mode="json", exclude_unset=True, exclude={"container_env"})
        return cls(benchmark=benchmark, sandbox_json=json.dumps(data, sort_keys=True),
                   pool_json="" if pool is None else pool.model_dump_json())

    def sandbox(self) -> SandboxConfig:
        """The sandbox block, with its `container_env` restored from process memory."""
        cfg = SandboxConfig.model_validate_json(self.sandbox_json)
        env = _SANDBOX_ENV.get(self.benchmark)
        return cfg.model_copy(update={"container_env": dict(env)}) if env else cfg

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[SandboxFactory]:
        """The block's factory, closed whatever happens in the block."""
        from nel_resources.sandboxes.factory import make_factory

        pool = NodePool.model_validate_json(self.pool_json) if self.pool_json else None
        factory = make_factory(self.sandbox(), pool=pool)
        try:
            yield factory
        finally:
            await factory.aclose()


class InterceptorProxy(dg.ConfigurableResource):
    """The standalone interceptor proxy of one service, for the length of a run.

    For agents nel does not drive itself: an asset points the agent at `url()` and all its
    model traffic passes the service's chain (and, with `capture_path`, is recorded there
    for `captured_steps`). The proxy process starts when a run's execution sets the
    resource up and is stopped when the run's execution ends (the process group is
    signalled, so nothing outlives the run). Keys stay out of Dagster config: the proxy
    reads the config file itself (`config_path`), or gets a run's service (`from_config`)
    with a literal key restored from this process's memory.
    """

    config_path: str | None = None
    service: str | None = None
    service_json: str | None = None
    capture_path: str | None = None
    startup_timeout: float = 60.0
    _proc: Any = PrivateAttr(default=None)
    _url: str | None = PrivateAttr(default=None)

    @classmethod
    def from_config(cls, cfg: Any, service: str, *, url: str | None = None,
                    capture_path: str | None = None) -> InterceptorProxy:
        """The proxy of `service` of a loaded config (`url`: a launched service's)."""
        from nel_resources.proxy.run_proxy import proxied_service

        svc = proxied_service(cfg, service, url)
        data = svc.model_dump(mode="json")
        if data.get("api_key"):
            _LITERAL_KEYS[f"proxy:{service}"] = data["api_key"]
            data["api_key"] = None
        return cls(service=service, service_json=json.dumps(data), capture_path=capture_path)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        from nel_resources.proxy.server import start_proxy

        svc = None
        if self.service_json is not None:
            svc = ServiceConfig.model_validate_json(self.service_json)
            key = _LITERAL_KEYS.get(f"proxy:{self.service}")
            if key:
                svc = svc.model_copy(update={"api_key": key})
        self._proc, self._url = start_proxy(self.config_path, self.service,
                                            timeout=self.startup_timeout,
                                            capture_path=self.capture_path, service_config=svc)

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._proc is not None:
            self._proc.stop()
            self._proc = None

    def url(self) -> str:
        """The proxy's base URL (`http://127.0.0.1:PORT/v1`)."""
        if self._url is None:
            raise RuntimeError("the proxy runs only inside a run's execution")
        return self._url

    def pid(self) -> int | None:
        """The proxy process's id while it runs."""
        return None if self._proc is None else self._proc.pid
