"""The NeMo Gym solvers end to end, on the suite's shared Gym stack (`shared_gym`):

- `nel eval run` with `solver.type: tool_calling` and `resource_service:` Gym's session-state
  counter server: the scripted reference model calls the counter's tools over several turns
  (parallel calls too); each sample's Gym session is its own (two samples run at once, each
  counts from its own seeded start); the trajectories show every call and result and the
  store answers a DuckDB query over the steps. The Dagster graph runs the same config.
- `nel eval run` with `solver.type: gym_delegation` on Gym's real `simple_agent`: the reward
  is the agent's with `trust_reward: true` and nel's own verify with `false`; with the agent
  down every sample fails with its reason and the run exits 4.
- `run_evaluation` (the Python API) with a `ToolCallingSolver` on the same server.
- Two tool sources declaring one tool name stop the shard before any model request.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.errors import NelError
from nel_resources.processes import free_port
from nel_resources.reference_server import start_reference_server
from tests.nel_assets.engine.solvers.scripts import call
from tests.support import server_stats
from tests.support.cli import run_nel, summary_json
from tests.support.nemo_gym import GYM_GROUP, POLICY_DEFAULT, SharedGym

pytestmark = pytest.mark.xdist_group(GYM_GROUP)

# Problems for the counter server: its `seed_session` takes `initial_count`, its `verify`
# rewards `expected_count`. The scorer (nel's own verify) wants the expected count as the
# last number of the answer.
COUNTER_TASKS = '''
import re
from benchmarks.byob import ScorerInput, benchmark, scorer

TOOL_ROWS = {tool_rows!r}
AGENT_ROWS = {agent_rows!r}

def _last_number(inp: ScorerInput) -> dict:
    numbers = re.findall(r"-?\\d+", inp.response)
    return {{"correct": bool(numbers) and numbers[-1] == str(inp.target)}}

@benchmark(name="counter_tools", dataset=TOOL_ROWS, prompt="{{q}}", target_field="expected_count")
@scorer
def counter_tools(inp: ScorerInput) -> dict:
    return _last_number(inp)

@benchmark(name="counter_agent", dataset=AGENT_ROWS, prompt="{{q}}", target_field="answer")
@scorer
def counter_agent(inp: ScorerInput) -> dict:
    return {{"correct": inp.response.strip() == str(inp.target)}}
'''
TOOL_ROWS = [
    {"q": "add 1 then add 2 then get the count", "initial_count": 3, "expected_count": 6},
    {"q": "add 5 and read the count back", "initial_count": 10, "expected_count": 15},
]
# The tool_calling model: several turns on row 0, parallel calls on row 1.
TOOL_SCRIPT = [
    {"match": "add 1 then add 2", "turns": [
        {"tool_calls": [call("increment_counter", count=1)]},
        {"tool_calls": [call("increment_counter", count=2)]},
        {"tool_calls": [call("get_counter_value")]},
        {"content": "The counter says {last_tool}"}]},
    {"match": "add 5 and read", "turns": [
        {"tool_calls": [call("increment_counter", count=5), call("get_counter_value")]},
        {"content": "Now: {last_tool}"}]},
]
# For the Gym agent (its policy model answers POLICY_DEFAULT and calls no tool, so the counter
# stays at its start): Gym's reward is 1 where expected == initial; nel's verify is 1 where
# `answer` is the policy's reply. The two differ on every row.
AGENT_ROWS = [
    {"q": f"counter task {i}: leave the counter alone", "initial_count": i,
     "expected_count": i if i % 2 else i + 1, "answer": "no" if i % 2 else POLICY_DEFAULT}
    for i in range(4)
]
GYM_REWARDS = [0.0, 1.0, 0.0, 1.0]
NEL_REWARDS = [1.0, 0.0, 1.0, 0.0]

STEPS_QUERY = """
SELECT sample_id, json_extract_string(step, '$.extra.function_name') AS tool,
       CAST(json_extract(step, '$.extra.turn') AS INTEGER) AS turn,
       json_extract_string(step, '$.message') AS result
FROM results, unnest(CAST(steps AS JSON[])) AS s(step)
WHERE json_extract_string(step, '$.extra.function_name') IS NOT NULL
ORDER BY sample_id, turn, tool
"""


@pytest.fixture(scope="module")
def bench_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("counter") / "counter_tasks.py"
    path.write_text(COUNTER_TASKS.format(tool_rows=TOOL_ROWS, agent_rows=AGENT_ROWS))
    return path


@pytest.fixture(scope="module")
def tool_model() -> Iterator[str]:
    """The scripted tool-calling model nel drives (…/v1)."""
    proc, base = start_reference_server(tool_script=TOOL_SCRIPT)
    try:
        yield base
    finally:
        proc.stop()


def _tool_config(gym: SharedGym, model: str, bench: Path, out: Path) -> dict[str, Any]:
    return {
        "services": {
            "ref": {"type": "api", "url": f"{model}/chat/completions",
                    "protocol": "chat_completions", "model": "ref", "max_concurrent": 4},
            "counter": {"type": "gym", "url": gym.url("counter")},
        },
        "benchmarks": [{"name": f"{bench}:counter_tools",
                        "solver": {"type": "tool_calling", "service": "ref",
                                   "resource_service": "counter", "max_turns": 6,
                                   "tool_timeout": 60}}],
        "output": {"dir": str(out)},
    }


def _agent_config(gym_url: str, policy: str, bench: Path, out: Path,
                  trust_reward: bool) -> dict[str, Any]:
    return {
        "services": {
            "ref": {"type": "api", "url": f"{policy}/chat/completions",
                    "protocol": "chat_completions", "model": "reference", "max_concurrent": 4},
            "gym": {"type": "gym", "url": gym_url},
        },
        "benchmarks": [{"name": f"{bench}:counter_agent", "timeout": 120,
                        "solver": {"type": "gym_delegation", "service": "ref",
                                   "gym_service": "gym", "gym_agent": "counter_agent",
                                   "trust_reward": trust_reward}}],
        "output": {"dir": str(out)},
    }


def _write(path: Path, cfg: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def _trajectories(res: dict[str, Any]) -> dict[int, dict[str, Any]]:
    lines = (Path(res["exports"]) / "trajectories.jsonl").read_text().splitlines()
    return {t["problem_idx"]: t for t in map(json.loads, lines)}


def test_tool_calling_on_a_gym_resources_server(tmp_path: Path, shared_gym: SharedGym,
                                                tool_model: str, bench_file: Path) -> None:
    out = tmp_path / "out"
    p = run_nel("eval", "run", str(_write(tmp_path / "nel.yaml", _tool_config(
        shared_gym, tool_model, bench_file, out))), "--json", "--no-progress")
    s = summary_json(p)
    (res,) = s["results"]
    assert res["n_items"] == 2 and res["failed"] == 0, p.stderr[-2000:]
    traj = _trajectories(res)
    # each sample counted from its own seeded start: 3+1+2 and 10+5
    assert [traj[i]["reward"] for i in (0, 1)] == [1.0, 1.0]
    assert [traj[i]["turns"] for i in (0, 1)] == [4, 2]
    (atif,) = traj[0]["trajectory"]
    calls = [(c["function_name"], c["arguments"]) for st in atif["steps"]
             for c in st.get("tool_calls") or []]
    assert [name for name, _ in calls] == ["increment_counter", "increment_counter",
                                           "get_counter_value"]
    results = [o["content"] for st in atif["steps"]
               for o in (st.get("observation") or {}).get("results", [])]
    assert [json.loads(r) for r in results] == [{"success": True}, {"success": True},
                                                {"count": 6}]
    assert traj[1]["trajectory"][0]["final_metrics"]["total_tool_calls"] == 2

    q = run_nel("query", "-o", str(out), "-f", "json", STEPS_QUERY)
    assert q.returncode == 0, q.stderr
    got = [(r["sample_id"], r["tool"], r["turn"]) for r in json.loads(q.stdout)]
    assert got == [("0:0", "increment_counter", 1), ("0:0", "increment_counter", 2),
                   ("0:0", "get_counter_value", 3),
                   ("1:0", "get_counter_value", 1), ("1:0", "increment_counter", 1)]
    counts = {r["sample_id"]: json.loads(r["result"])["count"] for r in json.loads(q.stdout)
              if r["tool"] == "get_counter_value"}
    assert counts == {"0:0": 6, "1:0": 15}


def test_the_dagster_graph_runs_tool_calling_on_gym(tmp_path: Path, shared_gym: SharedGym,
                                                    tool_model: str, bench_file: Path) -> None:
    import dagster as dg

    from nel_assets.factory import build_defs, build_resources
    from nel_resources.config import load_config
    from nel_resources.specs import resolve
    from nel_resources.store import ResultStore

    out = tmp_path / "out"
    cfg = resolve(load_config(_write(tmp_path / "nel.yaml", _tool_config(
        shared_gym, tool_model, bench_file, out))))
    (bench,) = cfg.benchmarks
    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("model", ["ref"])
        defs = build_defs(cfg, str(out))
        done = dg.materialize([*defs.assets], instance=instance,  # type: ignore[list-item]
                              resources=build_resources(cfg, str(out)),
                              partition_key=dg.MultiPartitionKey({"model": "ref", "shard": "0"}),
                              selection=[dg.AssetKey([bench.asset_name, "shard_results"])])
        assert done.success
    rows = ResultStore(out).read_shards(bench.name, "ref").to_pylist()
    assert [r["reward"] for r in rows] == [1.0, 1.0]
    assert [r["tool_calls"] for r in rows] == [3, 2]


@pytest.mark.parametrize("trust_reward", [True, False], ids=["trust_reward", "nel_verifies"])
def test_gym_delegation_on_the_simple_agent(tmp_path: Path, shared_gym: SharedGym,
                                            bench_file: Path, trust_reward: bool) -> None:
    p = run_nel("eval", "run", str(_write(tmp_path / "nel.yaml", _agent_config(
        shared_gym.head_url, shared_gym.policy_url, bench_file, tmp_path / "out",
        trust_reward))), "--json", "--no-progress")
    (res,) = summary_json(p)["results"]
    assert res["n_items"] == 4 and res["failed"] == 0, p.stderr[-2000:]
    traj = _trajectories(res)
    assert [traj[i]["reward"] for i in range(4)] == (GYM_REWARDS if trust_reward else NEL_REWARDS)
    for i in range(4):
        (atif,) = traj[i]["trajectory"]
        steps = atif["steps"]
        assert [st["source"] for st in steps] == ["user", "agent"]
        assert steps[0]["message"] == AGENT_ROWS[i]["q"]
        assert steps[1]["message"] == POLICY_DEFAULT


def test_gym_delegation_with_the_agent_down(tmp_path: Path, shared_gym: SharedGym,
                                            bench_file: Path) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    out = tmp_path / "out"
    p = run_nel("eval", "run", str(_write(tmp_path / "nel.yaml", _agent_config(
        down, shared_gym.policy_url, bench_file, out, True))), "--no-progress")
    assert p.returncode == 4, p.stderr[-2000:]
    assert "Traceback" not in p.stderr
    q = run_nel("query", "-o", str(out), "-f", "json",
                "SELECT sample_id, failure_category, error FROM results ORDER BY sample_id")
    assert q.returncode == 0, q.stderr
    rows = json.loads(q.stdout)
    assert [r["sample_id"] for r in rows] == [f"{i}:0" for i in range(4)]
    assert {r["failure_category"] for r in rows} == {"gym_unreachable"}
    assert all(down in r["error"] and "unreachable" in r["error"] for r in rows)


def test_run_evaluation_with_a_tool_calling_solver(shared_gym: SharedGym, tool_model: str,
                                                   bench_file: Path) -> None:
    from benchmarks import get_benchmark
    from nel_assets.engine.evaluation_api import run_evaluation
    from nel_assets.engine.solvers.gym_tools import GymResourceTools
    from nel_assets.engine.solvers.tool_calling import ToolCallingSolver
    from nel_resources.model_client import ModelClient

    env = get_benchmark(f"{bench_file}:counter_tools")

    async def go() -> dict[str, Any]:
        client = ModelClient(base_url=tool_model, model="ref", protocol="chat_completions")
        tools = GymResourceTools(shared_gym.url("counter"), timeout=60, max_output_chars=4096)
        solver = ToolCallingSolver(client, [tools], max_turns=6)
        try:
            return await run_evaluation(env, solver, max_concurrent=2)
        finally:
            await client.close()

    bundle = asyncio.run(go())
    rows = bundle["_table"].to_pylist()
    assert [r["reward"] for r in rows] == [1.0, 1.0]
    assert [r["tool_calls"] for r in rows] == [3, 2]
    assert bundle["score"]["mean"] == 1.0


def test_a_tool_declared_twice_stops_the_shard_before_any_request(
        shared_gym: SharedGym, tool_model: str, bench_file: Path) -> None:
    from benchmarks import get_benchmark
    from nel_assets.engine.evaluation_api import run_evaluation
    from nel_assets.engine.solvers.gym_tools import GymResourceTools
    from nel_assets.engine.solvers.tool_calling import ToolCallingSolver
    from nel_resources.model_client import ModelClient

    env = get_benchmark(f"{bench_file}:counter_tools")
    before = server_stats(tool_model)["total_requests"]
    counter = shared_gym.url("counter")

    async def go() -> None:
        client = ModelClient(base_url=tool_model, model="ref", protocol="chat_completions")
        # the same server as two sources: each of its tools is declared by both
        sources = [GymResourceTools(counter, timeout=60, max_output_chars=4096)
                   for _ in range(2)]
        try:
            await run_evaluation(env, ToolCallingSolver(client, list(sources)))
        finally:
            await client.close()

    with pytest.raises(NelError) as err:
        asyncio.run(go())
    msg = str(err.value)
    assert "\n" not in msg and "is declared by both" in msg
    assert msg.count(counter) == 2
    assert "tool 'increment_counter'" in msg or "tool 'get_counter_value'" in msg
    assert server_stats(tool_model)["total_requests"] == before
