"""`nel serve` of a code benchmark (humaneval) with `--sandbox`: a real server process whose
/verify runs each answer with its tests in a real sandbox (`local`: bubblewrap; `docker`: the
project's engine), and the start-up refusal of a code benchmark served without one."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from benchmarks.builtin.humaneval import HumanEval
from nel_resources.runtime.processes import ManagedProcess, start_on_free_port
from nel_resources.sandboxes.docker import docker_cli
from tests.support import require_bwrap
from tests.support.cli import run_nel
from tests.support.code_attacks import ATTACKS, attack_answer
from tests.support.docker_engine import BASE_IMAGE, start_docker_engine
from tests.support.reference import http_json
from tests.support.waiting import PROCESS_START_S

ROOT = Path(__file__).resolve().parents[2]
N = 4


def start_serve(args: list[str], env: dict[str, str] | None = None) -> tuple[ManagedProcess, str]:
    """`nel serve ARGS` on a free 127.0.0.1 port, once /health answers."""
    def make(port: int) -> ManagedProcess:
        return ManagedProcess([*_cli(), "serve", *args, "--port", str(port)], cwd=ROOT,
                              env={"PYTHONPATH": str(ROOT), **(env or {})}, name="nel-serve")

    proc, port = start_on_free_port(make, lambda p: f"http://127.0.0.1:{p}/health",
                                    timeout=PROCESS_START_S)
    return proc, f"http://127.0.0.1:{port}"


def _cli() -> list[str]:
    import sys

    return [sys.executable, "-m", "dagster_project.cli.main"]


def broken(env: HumanEval, idx: int) -> str:
    """A wrong whole function for problem `idx` (it runs, but the tests fail)."""
    ep = env.rows[idx]["entry_point"]
    return f"```python\ndef {ep}(*args, **kwargs):\n    return None\n```"


def verify(base: str, env: HumanEval, idx: int, response: str, **extra: Any) -> dict[str, Any]:
    seed = asyncio.run(env.seed(idx))
    body = {"response": response, "expected": seed.expected_answer, "metadata": seed.metadata, **extra}
    status, _, reply = http_json("POST", f"{base}/verify", body, timeout=120)
    assert status == 200, (status, reply)
    return reply


@pytest.fixture(scope="module")
def local_server(humaneval: HumanEval, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_bwrap()
    block = tmp_path_factory.mktemp("sbx") / "sandbox.yaml"
    block.write_text("concurrency: 2\ntimeout: 60\n")  # `--sandbox` adds the type
    proc, base = start_serve(["-b", "humaneval", "--sandbox", "local", "--sandbox-config", str(block),
                              "--max-problems", str(N), "--param", "exec_timeout=3"])
    try:
        yield base
    finally:
        proc.stop(grace=60)


def test_local_sandbox_scores_gold_1_and_broken_0(local_server: str, humaneval: HumanEval) -> None:
    jobs = [(i, humaneval.gold_response(asyncio.run(humaneval.seed(i))), 1.0) for i in range(N)]
    jobs += [(i, broken(humaneval, i), 0.0) for i in range(N)]
    # All at once: more verifies than the sandbox's concurrency (2) wait for a slot.
    with ThreadPoolExecutor(len(jobs)) as pool:
        replies = list(pool.map(lambda j: verify(local_server, humaneval, j[0], j[1]), jobs))
    for (idx, _, want), reply in zip(jobs, replies, strict=True):
        assert reply["reward"] == want, (idx, reply)
    failed = replies[N]["scoring_details"]
    assert failed["reason"] == "assertion" and failed["exception"] == "AssertionError"


def test_a_program_that_never_ends_is_stopped_and_scores_0(local_server: str, humaneval: HumanEval) -> None:
    ep = humaneval.rows[0]["entry_point"]
    reply = verify(local_server, humaneval, 0, f"```python\ndef {ep}(*a):\n    while True:\n        pass\n```")
    assert reply["reward"] == 0.0 and reply["scoring_details"]["reason"] == "timeout", reply
    # the slot came back: the next answer is scored
    assert verify(local_server, humaneval, 0, humaneval.gold_response(asyncio.run(humaneval.seed(0))))["reward"] == 1.0


def test_a_client_cannot_choose_the_sandbox(local_server: str, humaneval: HumanEval) -> None:
    """`sandbox` in the request's metadata is the server's own key: ignored, not passed on."""
    seed = asyncio.run(humaneval.seed(1))
    body = {"response": humaneval.gold_response(seed), "expected": seed.expected_answer,
            "metadata": {**seed.metadata, "sandbox": "none"}}
    status, _, reply = http_json("POST", f"{local_server}/verify", body, timeout=120)
    assert status == 200 and reply["reward"] == 1.0, reply


def test_a_code_benchmark_without_a_sandbox_is_refused_at_start() -> None:
    proc = run_nel("serve", "-b", "humaneval", "--port", "0", timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs a sandbox" in lines[0] and "`--sandbox local`" in lines[0], lines
    many = run_nel("serve", "-b", "humaneval", "--port", "0", "--sandbox", "local", "--workers", "2",
                   timeout=120)
    assert many.returncode == 2 and "--workers 1" in many.stderr and "Traceback" not in many.stderr
    bad = run_nel("serve", "-b", "humaneval", "--port", "0", "--sandbox", "vm", timeout=120)
    assert bad.returncode == 2 and "sandbox `type`" in bad.stderr and "Traceback" not in bad.stderr


def test_docker_sandbox_serves_and_leaves_no_container(humaneval: HumanEval) -> None:
    host = start_docker_engine()
    proc, base = start_serve(["-b", "humaneval", "--sandbox", "docker", "--sandbox-image", BASE_IMAGE,
                              "--max-problems", "2"], env={"DOCKER_HOST": host})
    try:
        assert verify(base, humaneval, 0, humaneval.gold_response(asyncio.run(humaneval.seed(0))))["reward"] == 1.0
        assert verify(base, humaneval, 1, broken(humaneval, 1))["reward"] == 0.0
    finally:
        proc.stop(grace=60)  # SIGTERM: the server closes its sandboxes on the way out
    ps = subprocess.run([docker_cli(), "ps", "-aq", "--filter", f"label=nel.sandbox.owner={proc.pid}"],
                        capture_output=True, text=True, env={**os.environ, "DOCKER_HOST": host}, timeout=60)
    assert ps.returncode == 0 and ps.stdout.strip() == "", ps.stdout + ps.stderr


def _attack_rewards(base: str, env: HumanEval) -> dict[str, float]:
    ep = env.rows[2]["entry_point"]
    return {a: verify(base, env, 2, attack_answer(a, ep))["reward"] for a in ATTACKS}


def test_local_verify_scores_0_when_the_program_ends_before_its_tests(local_server: str,
                                                                        humaneval: HumanEval) -> None:
    assert _attack_rewards(local_server, humaneval) == dict.fromkeys(ATTACKS, 0.0)
    reply = verify(local_server, humaneval, 2, attack_answer("sys_exit", humaneval.rows[2]["entry_point"]))
    assert reply["scoring_details"]["reason"] == "tests_not_finished", reply


def test_docker_verify_has_no_network_and_scores_early_exits_0(humaneval: HumanEval,
                                                               docker_host: str) -> None:
    """`nel serve --sandbox docker`: its containers have no network, and no attack scores."""
    from tests.support.gateway_listener import gateway_listener

    host = docker_host  # exported too: the listener's own docker calls reach the same engine
    proc, base = start_serve(["-b", "humaneval", "--sandbox", "docker", "--sandbox-image", BASE_IMAGE,
                              "--max-problems", "3"], env={"DOCKER_HOST": host})
    denv = {**os.environ, "DOCKER_HOST": host}
    try:
        with gateway_listener() as lis:
            row = humaneval.rows[0]
            reach = f"```python\n{lis.connect_code()}\n{row['prompt']}{row['canonical_solution']}```"
            assert verify(base, humaneval, 0, reach)["reward"] == 1.0
            assert not lis.seen, lis.seen
        ids = subprocess.run([docker_cli(), "ps", "-q", "--filter", f"label=nel.sandbox.owner={proc.pid}"],
                             capture_output=True, text=True, env=denv, timeout=60).stdout.split()
        assert ids
        modes = subprocess.run([docker_cli(), "inspect", "--format", "{{.HostConfig.NetworkMode}}", *ids],
                               capture_output=True, text=True, env=denv, timeout=60).stdout.split()
        assert set(modes) == {"none"}, modes
        assert _attack_rewards(base, humaneval) == dict.fromkeys(ATTACKS, 0.0)
    finally:
        proc.stop(grace=60)
