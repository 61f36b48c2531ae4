"""Sandbox factories of every type that runs here, with small limits so drills stay fast.

`sandbox_kind` parametrizes a test over `local` (bubblewrap) and `docker` (the project's
own engine and image); a missing bwrap or engine skips locally and fails in CI.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from nel_resources.config import SandboxConfig
from nel_resources.sandboxes.base import SandboxFactory
from nel_resources.sandboxes.factory import make_factory
from nel_resources.sandboxes.limits import Limits
from tests.support import require_bwrap
from tests.support.docker_engine import BASE_IMAGE
from tests.support.moto_server import moto_endpoint  # noqa: F401 (moto's server, for AWS types)

T = TypeVar("T")

#: Small enough to make every drill quick, large enough for python3 to start.
DRILL_LIMITS = Limits(memory_bytes=256 << 20, cpu_time_s=1, max_processes=32,
                      max_file_bytes=8 << 20, scratch_bytes=64 << 20)
KINDS = ["local", "docker"]


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one coroutine to its end on a fresh event loop."""
    return asyncio.run(coro)


def _check_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    if kind == "local":
        require_bwrap()
    if kind == "docker":
        request.getfixturevalue("docker_host")
    return kind


@pytest.fixture(params=KINDS)
def sandbox_kind(request: pytest.FixtureRequest) -> str:
    """`local` or `docker`, after checking the type can run here."""
    return _check_kind(request)


@pytest.fixture(scope="module", params=KINDS)
def shared_factory(request: pytest.FixtureRequest) -> Iterator[SandboxFactory]:
    """One factory per kind for a whole module, with the drill limits: docker's warm
    containers are reused (and wiped) from test to test, as in a real run."""
    kind = _check_kind(request)
    cfg = SandboxConfig(type=kind, concurrency=2, **({"image": BASE_IMAGE} if kind == "docker" else {}))
    factory = make_factory(cfg, limits=DRILL_LIMITS)
    try:
        yield factory
    finally:
        run(factory.aclose())


@pytest.fixture
def make_sandboxes(sandbox_kind: str) -> Callable[..., SandboxFactory]:
    """`make_sandboxes(concurrency=2, **config)` -> a factory of this kind with the drill
    limits (closed by the test: `await factory.aclose()`)."""
    def make(*, limits: Limits = DRILL_LIMITS, **cfg: Any) -> SandboxFactory:
        if sandbox_kind == "docker":
            cfg.setdefault("image", BASE_IMAGE)
        return make_factory(SandboxConfig(type=sandbox_kind, **cfg), limits=limits)
    return make


@pytest.fixture
def fake_secret(monkeypatch: pytest.MonkeyPatch) -> str:
    """A secret in nel's own environment that no sandboxed program may see."""
    value = "sk-nel-test-" + os.urandom(8).hex()
    monkeypatch.setenv("NEL_FAKE_API_KEY", value)
    return value
