"""`caching` never answers one endpoint's request with another's entry: two real reference
server processes (one right, one wrong) serve the same model name and are evaluated one
after the other with `nel eval run`, sharing the default cache store, in-process and through
real `nel proxy` processes; each gets its own requests and its own score. Changing the
temperature or the system prompt (even by an interceptor the config puts after `caching`)
is a miss; the same everything is a hit (a rerun sends no request)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nel_resources.config import ServiceConfig
from nel_resources.proxy.server import start_proxy
from nel_resources.proxy.service_client import client_for_service
from nel_resources.reference_server import start_reference_server
from tests.support.cli import run_nel, summary_json
from tests.support.realcomponents import REPO_ROOT
from tests.support.reference import http_json, server_stats

CAPITALS = {"France": "Paris", "Japan": "Tokyo", "Peru": "Lima", "Kenya": "Nairobi"}
BENCH = f'''
from benchmarks.byob import ScorerInput, benchmark, exact_match, scorer

@benchmark(name="cache_caps", dataset={[{"q": f"Capital of {c}?", "a": a}
                                        for c, a in CAPITALS.items()]!r},
           prompt="{{q}}", target_field="a")
@scorer
def caps(inp: ScorerInput) -> dict:
    return exact_match(inp)
'''
MODEL = "ckpt-7b"  # both checkpoints are served under this name


@dataclass
class Upstreams:
    right: str
    wrong: str


@pytest.fixture(scope="module")
def upstreams() -> Iterator[Upstreams]:
    answers = [{"match": f"Capital of {c}?", "content": a} for c, a in CAPITALS.items()]
    right, right_url = start_reference_server(answers=answers, model_name=MODEL)
    try:
        wrong, wrong_url = start_reference_server(default_content="Atlantis", model_name=MODEL)
        try:
            yield Upstreams(right_url, wrong_url)
        finally:
            wrong.stop()
    finally:
        right.stop()


def _requests(url: str) -> int:
    return server_stats(url)["by_endpoint"].get("/v1/chat/completions", 0)


def _config(tmp: Path, name: str, url: str, interceptors: str) -> Path:
    bench = tmp / "cache_caps.py"
    bench.write_text(BENCH)
    cfg = tmp / f"{name}.yaml"
    cfg.write_text(f"services:\n  ckpt:\n    type: api\n    url: {url}\n    model: {MODEL}\n"
                   f"    max_retries: 0\n{interceptors}"
                   f"benchmarks:\n  - name: cache_caps\n    module: {bench}\n"
                   f"output:\n  dir: {tmp / ('out-' + name)}\n")
    return cfg


def _score(cfg: Path, cache_root: Path) -> float:
    s = summary_json(run_nel("eval", "run", str(cfg), "--no-progress", "--json",
                             env={"NEL_CACHE_DIR": str(cache_root)}))
    (res,) = s["results"]
    assert res["n_items"] == len(CAPITALS)
    return float(res["score"])


CACHING = "    interceptors:\n      - name: caching\n"  # the default store: shared by every run


def test_in_process_runs_of_two_endpoints_keep_their_own_answers(upstreams: Upstreams,
                                                                 tmp_path: Path) -> None:
    cache = tmp_path / "nel-cache"
    right0, wrong0 = _requests(upstreams.right), _requests(upstreams.wrong)
    assert _score(_config(tmp_path, "right", upstreams.right, CACHING), cache) == 1.0
    assert _requests(upstreams.right) == right0 + len(CAPITALS)
    # the second checkpoint: same service name, model name, prompts and settings
    assert _score(_config(tmp_path, "wrong", upstreams.wrong, CACHING), cache) == 0.0
    assert _requests(upstreams.wrong) == wrong0 + len(CAPITALS)  # its own requests
    # a rerun of the same (into a new output dir) is all hits: 0 requests
    assert _score(_config(tmp_path, "wrong-again", upstreams.wrong, CACHING), cache) == 0.0
    assert _requests(upstreams.wrong) == wrong0 + len(CAPITALS)
    assert _requests(upstreams.right) == right0 + len(CAPITALS)


def test_runs_through_nel_proxy_processes_keep_their_own_answers(upstreams: Upstreams,
                                                                 tmp_path: Path) -> None:
    cache = tmp_path / "nel-cache"
    env = {"PYTHONPATH": str(REPO_ROOT), "NEL_CACHE_DIR": str(cache)}
    scores = {}
    for name, url in (("right", upstreams.right), ("wrong", upstreams.wrong), ("again", upstreams.wrong)):
        sent = _requests(url)
        proc, proxy_url = start_proxy(_config(tmp_path, f"proxy-{name}", url, CACHING), "ckpt", env=env)
        try:
            cfg = _config(tmp_path, f"via-{name}", proxy_url, "")  # the client itself: no cache
            scores[name] = _score(cfg, tmp_path / "client-cache")
            _, _, stats = http_json("GET", proxy_url.removesuffix("/v1") + "/stats")
        finally:
            proc.stop()
        expect = 0 if name == "again" else len(CAPITALS)  # the rerun is all hits
        assert _requests(url) == sent + expect, name
        assert stats["upstream_requests"] == expect and stats["stats"]["cache_hits"] == len(CAPITALS) - expect
    assert scores == {"right": 1.0, "wrong": 0.0, "again": 0.0}


def _svc(url: str, interceptors: list[dict[str, Any]], **extra: Any) -> ServiceConfig:
    return ServiceConfig.model_validate({"type": "api", "url": url, "model": MODEL,
                                         "max_retries": 0, "interceptors": interceptors, **extra})


def _ask(svc: ServiceConfig, content: str = "Capital of Peru?") -> bool:
    """One request through the service's in-process chain; whether the cache answered."""
    async def go() -> bool:
        async with client_for_service(svc) as client:
            resp = await client.generate([{"role": "user", "content": content}], repeat=0)
            return bool(resp.cached)
    return asyncio.run(go())


def test_generation_settings_and_later_interceptors_are_in_the_key(upstreams: Upstreams,
                                                                   tmp_path: Path) -> None:
    url = upstreams.right
    cache = [{"name": "caching", "config": {"cache_dir": str(tmp_path / "c")}}]

    def system(text: str) -> list[dict[str, Any]]:  # put after `caching` in the config
        return [*cache, {"name": "system_message", "config": {"system_message": text}}]

    def extra(**kw: Any) -> list[dict[str, Any]]:  # the endpoint's extra_body
        return [*cache, {"name": "endpoint", "config": {"extra_body": kw}}]

    sent = _requests(url)
    assert not _ask(_svc(url, cache, generation={"temperature": 0.2}))
    assert _ask(_svc(url, cache, generation={"temperature": 0.2}))  # same everything: a hit
    assert not _ask(_svc(url, cache, generation={"temperature": 0.9}))
    assert not _ask(_svc(url, system("Be brief."), generation={"temperature": 0.2}))
    assert not _ask(_svc(url, system("Be verbose."), generation={"temperature": 0.2}))
    assert _ask(_svc(url, system("Be verbose."), generation={"temperature": 0.2}))
    assert not _ask(_svc(url, extra(top_k=5), generation={"temperature": 0.2}))
    assert not _ask(_svc(url, extra(top_k=6), generation={"temperature": 0.2}))
    assert _ask(_svc(url, extra(top_k=6), generation={"temperature": 0.2}))
    assert _requests(url) == sent + 6  # each miss went upstream, no hit did
