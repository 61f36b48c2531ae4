"""The `majority_vote` solver, added as one module plus one `SOLVERS` line: against a real
HTTP server on loopback whose answers to the same GSM8K problem differ call by call, the
majority answer is the one verified, and the votes are recorded."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from benchmarks import get_benchmark
from benchmarks.errors import NelError
from nel_assets.engine.solvers.factory import SOLVERS, solver_for
from nel_assets.engine.solvers.majority_vote import MajorityVoteSolver, final_answer
from nel_resources.config.benchmarks import SolverConfig
from nel_resources.model_client import ModelClient


@pytest.fixture
def cycling_server() -> Iterator[tuple[str, list[str]]]:
    """A chat server answering each request with the next of `answers` (set by the test)."""
    answers: list[str] = []
    counter = itertools.count()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with lock:
                text = answers[next(counter) % len(answers)]
            body = json.dumps({"id": "x", "object": "chat.completion", "model": "m", "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", answers
    finally:
        server.shutdown()
        server.server_close()


def test_final_answer_normalises_the_last_line() -> None:
    assert final_answer("Work...\n#### 1,234\n") == "1,234"
    assert final_answer("so\n**Answer:** C.") == "c"
    assert final_answer("") == ""


def test_majority_answer_is_verified(cycling_server, data_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv("NEL_DATA_DIR", str(data_dir))
    url, answers = cycling_server
    env = get_benchmark("gsm8k")

    async def go() -> tuple[float, float, dict]:
        seed = await env.seed(0)
        gold = seed.expected_answer
        wrong = str(int(gold) + 1)
        # the first call is wrong, but 3 of 5 are right
        answers[:] = [f"hm\n#### {wrong}", f"ok\n#### {gold}", f"#### {wrong}", f"yes\n#### {gold}",
                      f"**Answer:** {gold}"]
        cfg = SolverConfig.model_construct(type="majority_vote", config={"samples": 5})
        async with ModelClient(url, model="m") as client:
            solver = solver_for(cfg, client, system_prompt=None, services={})
            assert isinstance(solver, MajorityVoteSolver) and solver.samples == 5
            res = await solver.solve(seed)
            first = await client.generate([{"role": "user", "content": seed.prompt}])  # call 6 = answers[0]
        voted = await env.verify(res.response, gold)
        single = await env.verify(first.content, gold)
        assert res.turns == 5 and res.prompt_tokens == 50 and res.completion_tokens == 15
        return voted.reward, single.reward, res.scoring_details

    voted, single, details = asyncio.run(go())
    assert voted == 1.0 and single == 0.0  # the vote fixed what one sample got wrong
    assert details["samples"] == 5 and sorted(details["votes"].values()) == [2, 3]


def test_the_solver_is_a_registry_entry() -> None:
    assert "majority_vote" in SOLVERS
    assert SOLVERS.target("majority_vote") == "nel_assets.engine.solvers.majority_vote:build"
    with pytest.raises(NelError, match="'nope' solver is not supported yet"):
        solver_for(SolverConfig.model_construct(type="nope"), None,  # type: ignore[arg-type]
                   system_prompt=None, services={})
    bad = SolverConfig.model_construct(type="majority_vote", config={"samples": "many"})
    with pytest.raises(NelError, match=r"config\.samples must be an integer"):
        solver_for(bad, None, system_prompt=None, services={})  # type: ignore[arg-type]


CONFIG = """\
services:
  m: {{type: api, url: "{url}", model: m}}
benchmarks:
  - name: gsm8k
    max_problems: 1
    solver: {{type: {solver}, config: {{samples: 3}}}}
output: {{dir: "{out}"}}
"""


def test_a_config_names_it_and_a_run_votes(cycling_server, data_dir: Path, tmp_path: Path) -> None:
    """No config-package edit made the name valid: `solver.type: majority_vote` runs."""
    from benchmarks.datasets import load_file
    from tests.support.cli import run_nel, summary_json

    url, answers = cycling_server
    gold = load_file(data_dir / "gsm8k" / "test.jsonl")[0]["answer"].split("####")[-1].strip()
    answers[:] = [f"#### {int(gold) + 1}", f"#### {gold}", f"so\n#### {gold}"]
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG.format(url=url, solver="majority_vote", out=tmp_path / "out"))
    env = {"NEL_DATA_DIR": str(data_dir)}
    s = summary_json(run_nel("eval", "run", str(cfg), "--json", "--no-progress", env=env))
    (res,) = s["results"]
    assert res["score"] == 1.0 and s["requests_sent"] == 3, s  # 2 of 3 votes were right
    # a misspelt solver is one line naming the nearest, before anything is sent
    cfg.write_text(CONFIG.format(url=url, solver="majority_vot", out=tmp_path / "out2"))
    bad = run_nel("eval", "run", str(cfg), "--dry-run", env=env)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr
    assert f"{cfg}:6: benchmarks.0.solver.type: unknown solver 'majority_vot'; did you mean " \
           "'majority_vote'?" in bad.stderr, bad.stderr
