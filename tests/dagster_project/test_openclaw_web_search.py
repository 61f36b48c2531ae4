"""`web_search_provider: tavily` on the `openclaw` solver (NeMo Evaluator 0.3.0's pinchbench
playbook sets it): `nel eval run` runs the real OpenClaw CLI with nel's Tavily plugin as its
`web_search` provider, against a Tavily-compatible stand-in server (a real HTTP process on
127.0.0.1, named by `TAVILY_BASE_URL`) and the scripted reference model server. The agent's
search reaches the stand-in with the key nel added (the key is in no artifact), and the
result reaches the model's next turn. Without the key the config is refused in one line
before any request."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nel_resources.reference_server import start_reference_server
from tests.dagster_project.test_openclaw_e2e import trajectories, write_config
from tests.support.cli import run_nel, summary_json
from tests.support.reference import server_stats
from tests.support.tavily_standin import MARKER, start_tavily_standin

KEY = "tvly-nel-test-secret-6631"
# The model searches through OpenClaw's Tool Search surface (`tool_call`: OpenClaw catalogs
# `web_search` behind it for a local endpoint), then answers.
SCRIPT = [{"match": "capital of France", "turns": [
    {"tool_calls": [{"name": "tool_call", "arguments": {
        "id": "web_search", "args": {"query": "capital city of France"}}}]},
    {"content": "Paris"}]}]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("openclaw_search")
    search, search_url, search_log = start_tavily_standin(tmp)
    model, url = start_reference_server(tool_script=SCRIPT, match_conversation=True)
    try:
        cfg = write_config(tmp, url, timeout=600, max_problems=1,
                           solver={"web_search_provider": "tavily", "max_concurrent": 1})
        p = run_nel("eval", "run", str(cfg), "--json", "--no-progress", timeout=900,
                    env={"TAVILY_API_KEY": KEY, "TAVILY_BASE_URL": search_url})
        yield {"summary": summary_json(p), "out": tmp / "out", "log": search_log, "proc": p,
               "calls": server_stats(url)["by_endpoint"].get("/v1/chat/completions", 0)}
    finally:
        model.stop()
        search.stop()  # type: ignore[attr-defined]


def test_the_agents_search_reaches_the_provider_with_nels_key(run: dict[str, Any]) -> None:
    requests = [json.loads(line) for line in run["log"].read_text().splitlines()]
    assert [(r["path"], r["body"]["query"]) for r in requests] == [
        ("/search", "capital city of France")]
    assert requests[0]["authorization"] == f"Bearer {KEY}"  # added by nel's relay
    (res,) = run["summary"]["results"]
    assert res["n_samples"] == 1 and res["failed"] == 0 and res["score"] == 1.0
    assert run["calls"] == 2  # the search turn, then the answer


def test_the_search_result_reaches_the_models_next_turn(run: dict[str, Any]) -> None:
    traj = trajectories(run["out"])["0:0"]
    steps = traj["trajectory"][0]["steps"]
    agent = [i for i, s in enumerate(steps) if s["source"] == "agent"]
    assert len(agent) == 2
    # between the search call and the answer: the tool's result, with the provider's text
    between = steps[agent[0] + 1:agent[1]]
    assert any(MARKER in str(s.get("message")) for s in between), between
    searches = traj["scoring_details"]["web_searches"]
    assert [(s["query"], s["status"], s["results"]) for s in searches] == [
        ("capital city of France", 200, 1)]


def test_the_key_is_in_no_artifact(run: dict[str, Any]) -> None:
    for path in run["out"].rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path
    assert KEY not in run["proc"].stdout + run["proc"].stderr


def test_web_search_without_its_key_is_one_line_before_any_request(tmp_path: Path) -> None:
    model, url = start_reference_server()
    try:
        cfg = write_config(tmp_path, url, solver={"web_search_provider": "tavily"})
        p = run_nel("eval", "run", str(cfg), "--no-progress", unset=["TAVILY_API_KEY"])
        assert server_stats(url)["total_requests"] == 0
    finally:
        model.stop()
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert "solver.web_search_provider" in lines[0] and "TAVILY_API_KEY" in lines[0]
