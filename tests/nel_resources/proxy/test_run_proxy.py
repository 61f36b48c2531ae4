"""The proxy a run starts for a service (`proxy_for_service`, `InterceptorProxy.from_config`)
in front of a real reference server: a service's `proxy:` block is honoured through it and
in-process (`request_timeout` cuts a hung request, `verbose` logs redacted previews), the
exchanges are captured, and the process and its temp files end with the block or the run."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from benchmarks.errors import NelError
from nel_resources.config import NelConfig, load_config
from nel_resources.model_client import ModelError
from nel_resources.proxy import captured_steps
from nel_resources.proxy.run_proxy import proxy_for_service
from nel_resources.proxy.service_client import client_for_service
from nel_resources.reference_server import start_reference_server
from nel_resources.resources import InterceptorProxy
from nel_resources.runtime.processes import pid_alive
from tests.support.reference import http_json, server_stats

SECRET = "sk-run-proxy-secret-777"


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    # A prompt with HANG in it gets no answer on its first attempt (later ones are answered).
    proc, url = start_reference_server(hang_rate=1.0, fault_match="HANG", record_bodies=20)
    try:
        yield url
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def cfg(upstream: str) -> NelConfig:
    def svc(proxy: dict[str, Any]) -> dict[str, Any]:
        return {"type": "api", "url": upstream, "model": "tiny", "api_key": SECRET,
                "proxy": proxy}

    return load_config(data={
        "services": {
            "short": svc({"verbose": True, "request_timeout": 0.5, "max_retries": 0,
                          "interceptors": [{"name": "log_tokens"}]}),
            "patient": svc({"request_timeout": 60, "max_retries": 0}),
        },
        "benchmarks": [{"name": "gsm8k"}]})


def _chat(url: str, content: str) -> tuple[int, Any]:
    status, _, data = http_json("POST", url + "/chat/completions",
                                {"messages": [{"role": "user", "content": content}]}, timeout=60)
    return status, data


def test_proxy_for_service_honours_the_proxy_block(cfg: NelConfig, upstream: str) -> None:
    with proxy_for_service(cfg, "short") as proxy:
        assert pid_alive(proxy.pid)
        status, data = _chat(proxy.session_url("q1:0"), f"What is 2+2? my key {SECRET}")
        assert status == 200, data
        # request_timeout: 0.5 with no retries: the hung request is cut, not waited for
        status, data = _chat(proxy.session_url("q2:0"), "HANG please")
        assert status == 502 and "timed out after 0.5s" in data["error"]["message"], data
        # verbose: request and answer previews in the proxy's log, the key masked
        log = proxy.log_path.read_text()
        assert "request /chat/completions session=q1:0" in log and "response status=200" in log
        assert SECRET not in log and "my key" in log
        # every exchange captured, the refused one with its status
        steps = captured_steps(proxy.capture_path, "q1:0")
        assert [s["source"] for s in steps] == ["user", "agent"] and steps[1]["message"]
        [failed] = [s for s in captured_steps(proxy.capture_path, "q2:0") if s["source"] == "agent"]
        assert failed["extra"]["status"] == 502 and "timed out" in failed["extra"]["error"]
        workdir = proxy.capture_path.parent
    assert not pid_alive(proxy.pid) and not workdir.exists()  # ended with the block
    # the hung request did reach the upstream: the proxy gave up on it, not the server
    assert server_stats(upstream)["bodies"][-1]["messages"][-1]["content"] == "HANG please"


def test_no_previews_without_verbose_and_a_given_capture_path_is_kept(cfg: NelConfig, tmp_path: Path) -> None:
    capture = tmp_path / "keep" / "capture.jsonl"
    with proxy_for_service(cfg, "patient", capture_path=capture) as proxy:
        status, _ = _chat(proxy.url, "What is 3+3?")
        assert status == 200
        log = proxy.log_path.read_text()
    assert "request /chat/completions" not in log  # no previews without verbose
    assert capture.is_file() and "What is 3+3?" in capture.read_text()  # a given path is kept


def test_in_process_client_honours_the_proxy_block(cfg: NelConfig, caplog: pytest.LogCaptureFixture
                                                   ) -> None:
    import asyncio

    async def run() -> tuple[Any, BaseException | None]:
        async with client_for_service(cfg.services["short"]) as client:
            ok = await client.generate([{"role": "user", "content": "What is 5+5?"}])
            try:
                await client.generate([{"role": "user", "content": "HANG in process"}])
            except ModelError as exc:
                return ok, exc
            return ok, None

    log = logging.getLogger("nel.proxy")
    propagate, log.propagate = log.propagate, True  # let caplog see the chain's lines
    try:
        with caplog.at_level(logging.INFO, logger="nel.proxy"):
            ok, exc = asyncio.run(run())
    finally:
        log.propagate = propagate
    assert ok.content and isinstance(exc, ModelError) and "timed out after 0.5s" in str(exc)
    assert exc.category == "timeout"
    previews = [r.getMessage() for r in caplog.records if r.getMessage().startswith("request ")]
    assert previews and SECRET not in caplog.text


def test_interceptor_proxy_from_config_in_a_run(cfg: NelConfig, tmp_path: Path) -> None:
    capture = tmp_path / "run-capture.jsonl"
    seen: dict[str, Any] = {}

    @dg.asset
    def delegated(proxy: InterceptorProxy) -> None:
        seen["pid"] = proxy.pid()
        seen["status"], _ = _chat(proxy.url().replace("/v1", "/s/run-1/v1"), "Via the run")

    resource = InterceptorProxy.from_config(cfg, "short", capture_path=str(capture))
    assert SECRET not in resource.service_json  # the key stays out of Dagster config
    assert dg.materialize([delegated], resources={"proxy": resource}).success
    assert seen["status"] == 200 and not pid_alive(seen["pid"])
    assert [s["source"] for s in captured_steps(capture, "run-1")] == ["user", "agent"]


def test_an_unknown_service_is_one_clear_error(cfg: NelConfig) -> None:
    with pytest.raises(NelError, match="no service 'nope' to proxy"), \
            proxy_for_service(cfg, "nope"):
        pass
