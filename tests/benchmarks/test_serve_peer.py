"""`nel serve` and NeMo Evaluator 0.3.0's own `nel serve`, side by side on the wire.

Both serve the same BYOB file (NeMo Evaluator's decorator style) with default flags. The
same requests go to both: every status is the same, and every key the peer answers nel
answers with the same value (nel may add keys). nel's `gym://` client then runs against the
peer's server and gets what the benchmark gives when run directly.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any

import pytest

from benchmarks import get_benchmark
from benchmarks.remote import GymEnvironment
from nel_resources.runtime.processes import ManagedProcess, start_on_free_port
from tests.benchmarks.test_serve import start_server, stop_server, wait_healthy
from tests.support.peers import peer_nemo_bin
from tests.support.reference import http_json
from tests.support.waiting import PROCESS_START_S

from .test_byob_nemo import CAPITALS  # the BYOB file both tools run

SIZE = 4


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    """Ports of the peer's and nel's `nel serve -b capitals_bench.py` (default flags)."""
    bin_path = peer_nemo_bin()
    log = tmp_path_factory.mktemp("peer") / "serve.log"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DAGSTER_HOME")}
    env["HF_HUB_OFFLINE"] = "1"  # its BYOB loader would ask the Hub about a missing file

    def make(port: int) -> ManagedProcess:
        # The peer resolves the file's dataset against its working directory.
        return ManagedProcess([str(bin_path), "serve", "-b", CAPITALS.name, "-p", str(port),
                               "--host", "127.0.0.1"], cwd=CAPITALS.parent, env=env,
                              log_path=log, name="peer-serve")

    peer, peer_port = start_on_free_port(make, lambda p: f"http://127.0.0.1:{p}/health",
                                         timeout=PROCESS_START_S)
    try:
        nel, nel_port = start_server(["-b", str(CAPITALS)])
        try:
            wait_healthy(nel_port, nel)
            yield {"peer": peer_port, "nel": nel_port}
        finally:
            stop_server(nel)
    finally:
        peer.stop()


# (method, path, JSON body or None for no body at all)
REQUESTS: list[tuple[str, str, Any]] = [
    ("GET", "/health", None),
    ("GET", "/dataset_size", None),
    ("POST", "/seed_session", {"idx": 2}),
    ("POST", "/seed_session", None),  # body-less: problem 0
    ("POST", "/seed_session", {}),
    # what NeMo Gym's agent sends: the dataset row, no idx
    ("POST", "/seed_session", {"responses_create_params": {"input": "hi"}, "uuid": "u"}),
    ("POST", "/seed_session", {"idx": SIZE}),
    ("POST", "/verify", {"response": "Answer: Lima", "expected": "Lima", "metadata": {}}),
    ("POST", "/verify", {"response": "Answer: Quito", "expected": "Lima"}),
    # the Gym form: no `expected`; a plain string, then a Responses-API object
    ("POST", "/verify", {"response": "Answer: Paris", "expected_answer": "Paris"}),
    ("POST", "/verify", {
        "responses_create_params": {"input": [{"role": "user", "content": "q"}]},
        "response": {"output": [{"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "Answer: Tokyo"}]}]},
        "expected_answer": "Tokyo", "uuid": "row-7"}),
]


def _call(port: int, method: str, path: str, body: Any) -> tuple[int, Any]:
    url = f"http://127.0.0.1:{port}{path}"
    if body is None and method == "POST":
        status, _, data = http_json(method, url, raw=b"", headers={"Content-Type": ""})
    else:
        status, _, data = http_json(method, url, body)
    return status, data


@pytest.mark.parametrize(("method", "path", "body"), REQUESTS)
def test_wire_matches_the_peer(servers: dict[str, int], method: str, path: str,
                               body: Any) -> None:
    peer_status, peer = _call(servers["peer"], method, path, body)
    nel_status, nel = _call(servers["nel"], method, path, body)
    assert nel_status == peer_status, (peer, nel)
    if peer_status != 200:
        return
    assert isinstance(nel, dict) and isinstance(peer, dict)
    # nel may add keys; every key the peer answers is there, with the same value except
    # where the BYOB layers differ (not the server's doing, so not compared here): the
    # scorer's own `scoring_details`, and a system prompt kept in `system` rather than
    # also spelled out as `messages`.
    assert set(peer) <= set(nel)
    loose = {"scoring_details", "messages", "metadata"}
    assert {k: nel[k] for k in peer if k not in loose} == {k: v for k, v in peer.items()
                                                          if k not in loose}
    if isinstance(peer.get("metadata"), dict):  # nel adds `idx`
        assert {k: nel["metadata"][k] for k in peer["metadata"]} == peer["metadata"]
    if isinstance(peer.get("messages"), list):
        conversation = nel["messages"] or [{"role": "system", "content": nel["system"]},
                                            {"role": "user", "content": nel["prompt"]}]
        assert conversation == peer["messages"]
    if "scoring_details" in peer:
        assert isinstance(nel["scoring_details"], dict)


def test_gym_client_against_the_peer_server(servers: dict[str, int]) -> None:
    """gym:// to NeMo Evaluator's server: the same problems and rewards as run directly."""
    responses = ["Answer: {a}", "{a}", "Answer: Atlantis", "", "The capital is {a}, I think."]

    async def collect(env: Any) -> list[tuple[Any, ...]]:
        out = []
        for idx in range(SIZE):
            seed = await env.seed(idx)
            for template in responses:
                text = template.format(a=seed.expected_answer)
                v = await env.verify(text, seed.expected_answer, **seed.metadata)
                # the BYOB layers spell "nothing extracted" differently ("" there, None here)
                out.append((idx, seed.prompt, seed.expected_answer, text, v.reward,
                            v.extracted_answer or None))
        return out

    async def remote() -> list[tuple[Any, ...]]:
        env = GymEnvironment(f"gym://127.0.0.1:{servers['peer']}")
        try:
            await env.prepare()
            assert len(env) == SIZE and env.remote_benchmark == "nemo_style_capitals"
            assert env.protocol == "evaluator"
            return await collect(env)
        finally:
            await env.close()

    got = asyncio.run(remote())
    want = asyncio.run(collect(get_benchmark(str(CAPITALS))))
    assert got == want
    assert {r[4] for r in got} == {0.0, 1.0}
