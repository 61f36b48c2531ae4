"""Sandboxes in the eval loop (`nel_assets.engine.evaluation.sandboxing`), with real `local` sandboxes
and the reference server as the model: the `concurrency` bound apart from the model's,
every sandbox stopped, stateful vs stateless, the missing-sandbox refusal."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks import SeedResult
from benchmarks.builtin.humaneval import HumanEval
from benchmarks.errors import NelError
from nel_assets.engine.evaluation.loop import ShardSpec, run_shard
from nel_assets.engine.evaluation.sandboxing import SandboxPool, check_sandbox, sandbox_pool
from nel_resources.config import SandboxConfig, load_config
from nel_resources.model_client import ModelClient
from nel_resources.reference_server import start_reference_server
from nel_resources.sandboxes.base import Sandbox, SandboxFactory, SandboxSpec
from nel_resources.sandboxes.factory import make_factory
from nel_resources.specs import resolve
from tests.support import server_stats

N = 8


class Counting:
    """A real factory, wrapped to count the sandboxes alive at once (a test probe)."""

    def __init__(self, inner: SandboxFactory) -> None:
        self.inner = inner
        self.alive = 0
        self.peak = 0
        self.started = 0
        self.stopped = 0

    @property
    def concurrency(self) -> int:
        return self.inner.concurrency

    def create(self, spec: SandboxSpec) -> Sandbox:
        sb = self.inner.create(spec)
        probe = self
        start, stop = sb.start, sb.stop

        async def counted_start() -> None:
            await start()
            probe.started += 1
            probe.alive += 1
            probe.peak = max(probe.peak, probe.alive)

        async def counted_stop() -> None:
            await stop()
            probe.stopped += 1
            probe.alive -= 1

        sb.start, sb.stop = counted_start, counted_stop  # type: ignore[method-assign]
        return sb

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.fixture(scope="module")
def gold_server(humaneval: HumanEval) -> Iterator[str]:
    # The barrier holds every answer until N requests are in flight at once: the run only
    # finishes if the model's concurrency is not held back by the sandboxes' bound.
    answers = [{"match": humaneval.rows[i]["prompt"].strip()[-200:],
                "content": humaneval.gold_response(asyncio.run(humaneval.seed(i)))} for i in range(N)]
    proc, url = start_reference_server(answers=answers, barrier=N, barrier_timeout=120)
    try:
        yield url
    finally:
        proc.stop()


def test_sandbox_concurrency_is_bounded_apart_from_the_models(bwrap: None, humaneval: HumanEval,
                                                              gold_server: str) -> None:
    probe = Counting(make_factory(SandboxConfig(type="local", concurrency=2)))

    async def main() -> list[dict[str, Any]]:
        client = ModelClient(base_url=gold_server, model="m", max_concurrent=N)
        spec = ShardSpec(benchmark="humaneval", model="m", model_id="m", shard=0,
                         indices=list(range(N)), sandboxes=SandboxPool(probe))  # type: ignore[arg-type]
        try:
            return await run_shard(humaneval, client, spec)
        finally:
            await client.close()
            await probe.aclose()

    rows = asyncio.run(main())
    assert [r["reward"] for r in rows] == [1.0] * N, [r.get("error") or r.get("details") for r in rows]
    st = server_stats(gold_server)
    assert st["barrier"] == "opened" and st["max_in_flight"] == N  # model: N at once
    assert 1 <= probe.peak <= 2  # sandboxes: never more than `concurrency`
    assert probe.started == probe.stopped == N and probe.alive == 0  # one per sample, all stopped


def test_stateful_shares_one_sandbox_and_stateless_hands_over_a_volume(tmp_path: Path,
                                                                      bwrap: None) -> None:
    seed = SeedResult("p", "e")

    async def main() -> tuple[bool, str, bool]:
        factory = make_factory(SandboxConfig(type="local", concurrency=2))
        try:
            async with SandboxPool(factory, stateful=True).sample(seed) as s:
                same = (await s.solve_sandbox()) is (await s.verify_sandbox())
            async with SandboxPool(factory, stateful=False).sample(seed) as s:
                solve = await s.solve_sandbox()
                wrote = await solve.exec("echo from-solve > /shared/handoff && echo local > note")
                assert wrote.ok, wrote
                verify = await s.verify_sandbox()
                read = await verify.exec("cat /shared/handoff; test -e note && echo LEAK || true")
                apart = solve is not verify
            return same, read.stdout, apart
        finally:
            await factory.aclose()

    same, seen, apart = asyncio.run(main())
    assert same and apart
    assert seen.strip() == "from-solve"  # the shared volume, and nothing of the solve workdir


def test_a_benchmark_that_runs_code_is_refused_without_a_sandbox(tmp_path: Path,
                                                                 humaneval: HumanEval) -> None:
    base = ("services:\n  m: {type: api, url: 'http://127.0.0.1:9/v1/chat/completions', model: m}\n"
            "benchmarks:\n  - name: humaneval\n")
    for extra in ("", "    sandbox: {type: none}\n"):
        path = tmp_path / "c.yaml"
        path.write_text(base + extra)
        (run,) = resolve(load_config(path)).benchmarks[0].runs
        with pytest.raises(NelError, match=r"'humaneval' runs model-written code and needs a sandbox"):
            check_sandbox(run)

        async def enter(run: Any = run) -> None:
            async with sandbox_pool(run, humaneval):
                pass

        with pytest.raises(NelError, match="needs a sandbox"):
            asyncio.run(enter())
    path.write_text(base + "    sandbox: {type: local}\n")
    (run,) = resolve(load_config(path)).benchmarks[0].runs
    check_sandbox(run)  # no error
    gsm = base.replace("humaneval", "gsm8k")
    path.write_text(gsm)
    check_sandbox(resolve(load_config(path)).benchmarks[0].runs[0])  # runs no code: no sandbox needed


def test_sandbox_settings_that_change_verdicts_are_in_the_shard_fingerprint(tmp_path: Path) -> None:
    def payload(sandbox: str) -> dict[str, Any]:
        path = tmp_path / "c.yaml"
        path.write_text("services:\n  m: {type: api, url: 'http://127.0.0.1:9/v1', model: m}\n"
                        f"benchmarks:\n  - name: humaneval\n{sandbox}")
        return resolve(load_config(path)).benchmarks[0].runs[0].fingerprint.payload()

    local = payload("    sandbox: {type: local}\n")
    assert local["sandbox"]["type"] == "local"
    assert payload("    sandbox: {type: local, concurrency: 9}\n") == local  # how many at once: no
    assert payload("    sandbox: {type: local, timeout: 99}\n") != local
    assert payload("    sandbox: {type: docker, image: a}\n") != payload("    sandbox: {type: docker, image: b}\n")
    assert "sandbox" not in payload("")  # no sandbox: the payload of older stores
