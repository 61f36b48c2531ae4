"""The NeMo Gym solvers end to end, on the suite's shared Gym stack (`shared_gym`).

One `nel eval run` (each costs seconds) runs four benchmarks side by side:
- `tool_calling` with `resource_service:` Gym's session-state counter server: the scripted
  reference model calls the counter's tools over several turns (parallel calls too); each
  sample's Gym session is its own (both samples run at once, each counts from its own seeded
  start); the trajectories show every call and result; DuckDB answers a query over the steps.
- `gym_delegation` on Gym's real `simple_agent`, with `trust_reward: true` (the agent's
  reward) and `false` (nel's own verify), and once with the agent down: every sample of that
  one fails with its reason, and the run exits 4 (a benchmark failed) while the others finish.
The Dagster graph runs the tool_calling benchmark; `run_evaluation` (the Python API) runs a
`ToolCallingSolver` on the same server; two tool sources declaring one tool name stop the
shard before any model request.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.errors import NelError
from nel_resources.reference_server import start_reference_server
from nel_resources.runtime.processes import free_port
from tests.nel_assets.engine.solvers.scripts import call
from tests.support import server_stats
from tests.support.cli import run_nel
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

def _is_answer(inp: ScorerInput) -> dict:
    return {{"correct": inp.response.strip() == str(inp.target)}}

# one benchmark per gym_delegation setting (a config names each benchmark once)
for _name in ("agent_trusted", "agent_verified", "agent_down"):
    benchmark(name=_name, dataset=AGENT_ROWS, prompt="{{q}}", target_field="answer")(
        scorer(_is_answer))
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


@dataclass
class Run:
    """The module's one `nel eval run`: its process, output dir and results by benchmark."""

    proc: subprocess.CompletedProcess[str]
    out: Path
    config: Path
    results: dict[str, dict[str, Any]]
    down_url: str

    def result(self, bench: str) -> dict[str, Any]:
        """The summary's result of benchmark `<file>:<bench>`."""
        found = [r for name, r in self.results.items() if name.endswith(bench)]
        assert len(found) == 1, self.proc.stdout[-2000:] + self.proc.stderr[-2000:]
        return found[0]


def _config(gym: SharedGym, model: str, bench: Path, out: Path, down: str) -> dict[str, Any]:
    def agent(name: str, gym_service: str, trust_reward: bool) -> dict[str, Any]:
        return {"name": f"{bench}:{name}", "timeout": 120,
                "solver": {"type": "gym_delegation", "service": "policy",
                           "gym_service": gym_service, "gym_agent": "counter_agent",
                           "trust_reward": trust_reward}}

    return {
        "services": {
            "ref": {"type": "api", "url": f"{model}/chat/completions",
                    "protocol": "chat_completions", "model": "ref", "max_concurrent": 4},
            "policy": {"type": "api", "url": f"{gym.policy_url}/chat/completions",
                       "protocol": "chat_completions", "model": "reference",
                       "max_concurrent": 4},
            "counter": {"type": "gym", "url": gym.url("counter")},
            "gym": {"type": "gym", "url": gym.head_url},
            "gym_down": {"type": "gym", "url": down},
        },
        "benchmarks": [
            {"name": f"{bench}:counter_tools",
             "solver": {"type": "tool_calling", "service": "ref", "resource_service": "counter",
                        "max_turns": 6, "tool_timeout": 60}},
            agent("agent_trusted", "gym", True),
            agent("agent_verified", "gym", False),
            agent("agent_down", "gym_down", True),
        ],
        "output": {"dir": str(out)},
    }


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, shared_gym: SharedGym, tool_model: str,
        bench_file: Path) -> Run:
    root = tmp_path_factory.mktemp("gym_e2e")
    out, down = root / "out", f"http://127.0.0.1:{free_port()}"
    config = root / "nel.yaml"
    config.write_text(yaml.safe_dump(_config(shared_gym, tool_model, bench_file, out, down),
                                     sort_keys=False))
    proc = run_nel("eval", "run", str(config), "--json", "--no-progress")
    summary = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    results = {r["benchmark"]: r for r in summary.get("results", [])}
    return Run(proc, out, config, results, down)


def _query(out: Path, sql: str) -> list[tuple[Any, ...]]:
    """`sql` over the store's results (every benchmark's shard Parquet files)."""
    import duckdb

    files = str(out / "*" / "shard_results" / "**" / "*.parquet")
    con = duckdb.connect()
    con.execute(f"CREATE VIEW results AS SELECT * FROM read_parquet('{files}', "
                "hive_partitioning=true, union_by_name=true)")
    return con.execute(sql).fetchall()


def _trajectories(res: dict[str, Any]) -> dict[int, dict[str, Any]]:
    lines = (Path(res["exports"]) / "trajectories.jsonl").read_text().splitlines()
    return {t["problem_idx"]: t for t in map(json.loads, lines)}


def test_tool_calling_on_a_gym_resources_server(run: Run) -> None:
    res = run.result("counter_tools")
    assert res["n_items"] == 2 and res["failed"] == 0
    traj = _trajectories(res)
    # each sample counted from its own seeded start: 3+1+2 and 10+5
    assert [traj[i]["reward"] for i in (0, 1)] == [1.0, 1.0]
    assert [traj[i]["turns"] for i in (0, 1)] == [4, 2]
    (atif,) = traj[0]["trajectory"]
    calls = [c["function_name"] for st in atif["steps"] for c in st.get("tool_calls") or []]
    assert calls == ["increment_counter", "increment_counter", "get_counter_value"]
    results = [o["content"] for st in atif["steps"]
               for o in (st.get("observation") or {}).get("results", [])]
    assert [json.loads(r) for r in results] == [{"success": True}, {"success": True},
                                                {"count": 6}]
    assert traj[1]["trajectory"][0]["final_metrics"]["total_tool_calls"] == 2

    got = _query(run.out, STEPS_QUERY)
    assert [g[:3] for g in got] == [
        ("0:0", "increment_counter", 1), ("0:0", "increment_counter", 2),
        ("0:0", "get_counter_value", 3),
        ("1:0", "get_counter_value", 1), ("1:0", "increment_counter", 1)]
    counts = {g[0]: json.loads(g[3])["count"] for g in got if g[1] == "get_counter_value"}
    assert counts == {"0:0": 6, "1:0": 15}


@pytest.mark.parametrize(("bench", "want"), [("agent_trusted", GYM_REWARDS),
                                             ("agent_verified", NEL_REWARDS)])
def test_gym_delegation_on_the_simple_agent(run: Run, bench: str, want: list[float]) -> None:
    res = run.result(bench)
    assert res["n_items"] == 4 and res["failed"] == 0
    traj = _trajectories(res)
    assert [traj[i]["reward"] for i in range(4)] == want
    for i in range(4):
        (atif,) = traj[i]["trajectory"]
        steps = atif["steps"]
        assert [st["source"] for st in steps] == ["user", "agent"]
        assert steps[0]["message"] == AGENT_ROWS[i]["q"]
        assert steps[1]["message"] == POLICY_DEFAULT
    methods = {m for (m,) in _query(run.out, "SELECT DISTINCT method FROM results WHERE "
                                             f"benchmark LIKE '%{bench}'")}
    # the agent's reward, or the benchmark's own scorer
    assert (methods == {"gym_reward"}) == (bench == "agent_trusted"), methods


def test_gym_delegation_with_the_agent_down(run: Run) -> None:
    # one benchmark whose every sample failed: the run exits 4, the others still finished
    assert run.proc.returncode == 4, run.proc.stderr[-2000:]
    assert "Traceback" not in run.proc.stderr
    errors = [ln for ln in run.proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "agent_down" in errors[0], run.proc.stderr
    for done in ("counter_tools", "agent_trusted", "agent_verified"):
        assert run.result(done)["failed"] == 0
    rows = _query(run.out, "SELECT sample_id, failure_category, error FROM results "
                           "WHERE benchmark LIKE '%agent_down' ORDER BY sample_id")
    assert [r[0] for r in rows] == [f"{i}:0" for i in range(4)]
    assert {r[1] for r in rows} == {"gym_unreachable"}
    assert all(run.down_url in r[2] and "unreachable" in r[2] for r in rows)


def test_the_dagster_graph_runs_tool_calling_on_gym(tmp_path: Path, run: Run) -> None:
    import dagster as dg

    from nel_assets.factory import build_defs, build_resources
    from nel_resources.config import load_config
    from nel_resources.specs import resolve
    from nel_resources.storage.store import ResultStore

    out = tmp_path / "out"
    only_tools = yaml.safe_load(run.config.read_text())
    only_tools["benchmarks"] = only_tools["benchmarks"][:1]  # the tool_calling benchmark
    only_tools["output"]["dir"] = str(out)
    path = tmp_path / "nel.yaml"
    path.write_text(yaml.safe_dump(only_tools, sort_keys=False))
    cfg = resolve(load_config(path))
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


def test_run_evaluation_with_a_tool_calling_solver(shared_gym: SharedGym, tool_model: str,
                                                   bench_file: Path) -> None:
    from benchmarks import get_benchmark
    from nel_assets.engine.nemo.evaluation_api import run_evaluation
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
    from nel_assets.engine.nemo.evaluation_api import run_evaluation
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
