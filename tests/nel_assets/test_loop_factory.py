"""Which shards run on uvloop: plain requests only (evaluate._loop_factory)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nel_assets.engine.evaluate import _loop_factory
from nel_resources.config import load_config
from nel_resources.specs import resolve

URL = "http://127.0.0.1:9/v1"
uvloop = pytest.importorskip("uvloop")


def _run(service: dict[str, Any], bench: dict[str, Any] | None = None) -> Any:
    cfg = load_config(data={
        "services": {"m": {"url": URL, **service}},
        "sandboxes": {"box": {"type": "docker", "image": "python:3.12"}},
        "benchmarks": [{"name": "gsm8k", **(bench or {})}],
    })
    (run,) = resolve(cfg).benchmarks[0].runs
    return run


def test_a_plain_shard_runs_on_uvloop() -> None:
    factory = _loop_factory(_run({}), None)
    assert factory is uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:  # and it runs coroutines
        assert runner.run(asyncio.sleep(0, "ok")) == "ok"
        assert isinstance(runner.get_loop(), uvloop.Loop)


@pytest.mark.parametrize(("service", "bench"), [
    ({"interceptors": [{"name": "caching"}]}, None),  # an interceptor chain
    ({"proxy": {"interceptors": [{"name": "reasoning"}]}}, None),
    ({"proxy_verbose": True}, None),
    ({}, {"sandbox": "box"}),  # a sandbox: its subprocesses stay on asyncio's loop
])
def test_other_shards_keep_asyncios_loop(service: dict[str, Any], bench: dict[str, Any] | None) -> None:
    assert _loop_factory(_run(service, bench), None) is None


def test_a_sandbox_resource_keeps_asyncios_loop() -> None:
    assert _loop_factory(_run({}), lambda *a: None) is None  # type: ignore[arg-type]
