"""`solver.type: openclaw` end to end: `nel eval run` runs the real OpenClaw CLI (installed
by `make peers` from npm) on a small BYOB benchmark against the scripted reference server,
through nel's capture proxy. One run, three problems at once: one answered after a real
tool call (OpenClaw's `exec` runs `echo Paris`), one answered wrong, one whose model call
fails (HTTP 400: OpenClaw does not retry it; a 5xx it retries with back-off, 8 calls in all,
which would double this test's time). Then the answers are scored by the benchmark's scorer, the captured
model turns (with the tool call, its result and exit code) are in trajectories.jsonl and
in the store's `steps` column (DuckDB), the failure is a recorded `model_error`. Through the
Dagster graph, a run whose model hangs ends as `timeout` with OpenClaw's process group gone;
a CLI that is not there is one line before any request."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nel_resources.reference_server import start_reference_server
from tests.support import server_stats
from tests.support.agents import openclaw_bin
from tests.support.cli import run_nel, summary_json

ROWS = [{"country": "France", "capital": "Paris"},
        {"country": "Japan", "capital": "Tokyo"},
        {"country": "Kenya", "capital": "Nairobi"}]
MODULE = '''
from benchmarks.byob import ScorerInput, benchmark, exact_match, scorer

@benchmark(name="openclaw_capitals", dataset="capitals.jsonl",
           prompt="What is the capital of {country}? Answer with the city only.",
           target_field="capital")
@scorer
def check(inp: ScorerInput) -> dict:
    return exact_match(inp)
'''
# France: the model runs a shell command through OpenClaw, then answers with its output.
SCRIPT = [{"match": "capital of France", "turns": [
    {"tool_calls": [{"name": "exec", "arguments": {"command": "echo Paris"}}]},
    {"content": "{last_tool}"}]}]
ANSWERS = [{"match": "capital of Japan", "content": "Osaka"}]

# The tool calls, their turn and exit code, from the `steps` JSON column.
TOOL_CALLS = """
SELECT sample_id, json_extract_string(step, '$.extra.function_name') AS tool,
       CAST(json_extract(step, '$.extra.turn') AS INTEGER) AS turn,
       CAST(json_extract(step, '$.extra.exit_code') AS INTEGER) AS exit_code,
       json_extract_string(step, '$.message') AS output
FROM results, unnest(CAST(steps AS JSON[])) AS s(step)
WHERE json_extract_string(step, '$.extra.function_name') IS NOT NULL
ORDER BY sample_id
"""


def write_config(tmp_path: Path, url: str, **bench: Any) -> Path:
    (tmp_path / "capitals.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    (tmp_path / "capitals.py").write_text(MODULE)
    solver = {"type": "openclaw", "service": "ref", "openclaw_bin": str(openclaw_bin()),
              "thinking": "off", "max_concurrent": 3, **bench.pop("solver", {})}
    cfg = {"services": {"ref": {"type": "api", "url": f"{url}/chat/completions", "model": "ref",
                                "max_retries": 0}},
           "benchmarks": [{"name": "openclaw_capitals", "module": str(tmp_path / "capitals.py"),
                           "solver": solver, **bench}],
           "output": {"dir": str(tmp_path / "out")}}
    path = tmp_path / "nel.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One `nel eval run` of the three problems; its summary, output dir and server URL."""
    tmp = tmp_path_factory.mktemp("openclaw")
    # Kenya's model calls all fail.
    proc, url = start_reference_server(tool_script=SCRIPT, answers=ANSWERS,
                                       match_conversation=True, fault_match="Kenya",
                                       fail_rate=1.0, fail_status=400, fail_attempts=1000)
    try:
        cfg = write_config(tmp, url, timeout=600,
                           solver={"system_prompt": "Reply with the city name only."})
        s = summary_json(run_nel("eval", "run", str(cfg), "--json", "--no-progress",
                                 timeout=900))
        yield {"summary": s, "out": tmp / "out", "url": url}
    finally:
        proc.stop()


def trajectories(out: Path) -> dict[str, dict[str, Any]]:
    lines = (out / "openclaw_capitals" / "trajectories.jsonl").read_text().splitlines()
    return {t["sample_id"]: t for t in map(json.loads, lines)}


def test_answers_are_scored_by_the_benchmark_and_a_model_error_is_recorded(
        run: dict[str, Any]) -> None:
    (res,) = run["summary"]["results"]
    assert res["n_samples"] == 2 and res["failed"] == 1 and res["score"] == 0.5
    traj = trajectories(run["out"])
    assert traj["0:0"]["reward"] == 1.0 and traj["0:0"]["model"]["content"] == "Paris"
    assert traj["1:0"]["reward"] == 0.0 and traj["1:0"]["model"]["content"] == "Osaka"
    failed = traj["2:0"]
    assert failed["failure_category"] == "model_error" and failed["reward"] == 0.0
    assert "HTTP 400" in failed["error"] and "injected failure" in failed["error"]
    # every model call OpenClaw made for Kenya is a captured, failed turn
    kenya = [s for s in failed["trajectory"][0]["steps"] if s["source"] == "agent"]
    assert kenya and all(s["extra"]["status"] == 400 for s in kenya)
    assert server_stats(run["url"])["by_status"]["400"] == len(kenya)
    fa = json.loads((run["out"] / "openclaw_capitals" / "failure_analysis.json").read_text())
    assert fa["categories"]["model_error"]["count"] == 1


def test_the_trajectory_holds_the_captured_turns_and_the_tool_call(run: dict[str, Any]) -> None:
    steps = trajectories(run["out"])["0:0"]["trajectory"][0]["steps"]
    agent = [s for s in steps if s["source"] == "agent"]
    assert len(agent) == 2  # the tool call, then the answer
    (call,) = agent[0]["tool_calls"]
    assert call["function_name"] == "exec" and call["arguments"] == {"command": "echo Paris"}
    # the tool's result follows its call, with the exit code OpenClaw recorded
    result = steps[steps.index(agent[0]) + 1]
    assert result["source"] == "system" and result["message"] == "Paris"
    assert result["extra"]["function_name"] == "exec" and result["extra"]["exit_code"] == 0
    assert result["extra"]["turn"] == 1 and result["extra"]["error"] is None
    assert agent[1]["message"] == "Paris"
    assert all(s["metrics"]["prompt_tokens"] > 0 and s["extra"]["latency_ms"] > 0
               for s in agent)
    # the system prompt reached the model (OpenClaw's system message carries AGENTS.md)
    assert "Reply with the city name only." in steps[0]["message"]
    assert steps[0]["source"] == "system" and steps[1]["source"] == "user"
    assert "What is the capital of France?" in steps[1]["message"]


def test_the_store_answers_which_tool_ran_with_duckdb(run: dict[str, Any]) -> None:
    q = run_nel("query", "-o", str(run["out"]), "-f", "json", TOOL_CALLS)
    assert q.returncode == 0, q.stderr
    assert json.loads(q.stdout) == [
        {"sample_id": "0:0", "tool": "exec", "turn": 1, "exit_code": 0, "output": "Paris"}]
    fa = json.loads((run["out"] / "openclaw_capitals" / "bundle" / "model=ref" / "bundle.json")
                    .read_text())["failures"]
    assert fa["tools"] == {"exec": {"calls": 1, "failed": 0, "examples": []}}


def test_the_dagster_graph_ends_a_hanging_run_as_timeout_and_kills_the_agent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dagster as dg

    from nel_assets.factory import build_defs, build_resources
    from nel_resources.config import load_config
    from nel_resources.specs import resolve
    from nel_resources.storage.store import ResultStore

    homes = tmp_path / "tmp"  # the run's temp dir: OpenClaw's per-sample homes are in it
    homes.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(homes))
    proc, url = start_reference_server(hang_rate=1.0, fail_attempts=1000)
    out = tmp_path / "out"
    try:
        cfg = resolve(load_config(write_config(tmp_path, url, timeout=5, max_problems=1)))
        with dg.DagsterInstance.ephemeral() as instance:
            instance.add_dynamic_partitions("model", ["ref"])
            done = dg.materialize(
                [*build_defs(cfg, str(out)).assets], instance=instance,  # type: ignore[list-item]
                resources=build_resources(cfg, str(out)),
                partition_key=dg.MultiPartitionKey({"model": "ref", "shard": "0"}),
                selection=[dg.AssetKey(["openclaw_capitals", "shard_results"])])
            assert done.success
    finally:
        proc.stop()
    (row,) = ResultStore(out).read_shards("openclaw_capitals", "ref").to_pylist()
    assert row["failure_category"] == "timeout" and "within 5s" in row["error"]
    assert row["reward"] is None
    # no OpenClaw process of the run is left (its group was killed on the timeout)
    assert [p.name for p in Path("/proc").iterdir()
            if p.name.isdigit() and _home(p).startswith(str(homes))] == []


def _home(p: Path) -> str:
    """HOME of process `p` ("" when it is gone or not readable)."""
    try:
        env = (p / "environ").read_bytes().split(b"\0")
    except OSError:
        return ""
    return next((e[5:].decode() for e in env if e.startswith(b"HOME=")), "")


def test_an_openclaw_that_is_not_installed_is_one_line_before_any_request(
        tmp_path: Path) -> None:
    proc, url = start_reference_server()
    try:
        cfg = write_config(tmp_path, url, solver={"openclaw_bin": str(tmp_path / "nowhere")})
        p = run_nel("eval", "run", str(cfg), "--no-progress")
        assert server_stats(url)["total_requests"] == 0
    finally:
        proc.stop()
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert "solver.openclaw_bin" in lines[0] and "is not on PATH" in lines[0]
