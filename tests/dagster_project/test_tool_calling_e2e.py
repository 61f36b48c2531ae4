"""`solver.type: tool_calling` end to end: `nel eval run` on a NeMo Evaluator-shaped YAML
(agent_tasks, `sandbox_tools: true`, a `local` sandbox) against the scripted reference
server writes trajectories.jsonl with every tool step, failure analysis that says which
tool failed on which turn, and a store DuckDB answers that from; the Dagster graph runs the
same config; what is not built yet is refused in one line before any request."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nel_resources.reference_server import start_reference_server
from tests.nel_assets.engine.solvers.scripts import AGENT_TASKS
from tests.support import require_real_component, server_stats
from tests.support.cli import run_nel, summary_json

# Which tool failed on which turn, from the `steps` JSON column (README shows this query).
FAILED_TOOLS = """
SELECT sample_id, json_extract_string(step, '$.extra.function_name') AS tool,
       CAST(json_extract(step, '$.extra.turn') AS INTEGER) AS turn,
       CAST(json_extract(step, '$.extra.exit_code') AS INTEGER) AS exit_code
FROM results, unnest(CAST(steps AS JSON[])) AS s(step)
WHERE json_extract_string(step, '$.extra.error') IS NOT NULL
ORDER BY sample_id, turn
"""


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    if shutil.which("bwrap") is None:
        require_real_component("bubblewrap (bwrap) is not installed: run `make system-deps`")
    proc, base = start_reference_server(tool_script=AGENT_TASKS)
    try:
        yield base
    finally:
        proc.stop()


def config(url: str, out: Path, **solver: Any) -> dict[str, Any]:
    return {
        "services": {"ref": {"type": "api", "url": f"{url}/chat/completions",
                             "protocol": "chat_completions", "model": "ref", "max_concurrent": 4}},
        "sandboxes": {"box": {"type": "local", "concurrency": 4}},
        "benchmarks": [{"name": "agent_tasks", "sandbox": "box",
                        "solver": {"type": "tool_calling", "service": "ref", "sandbox_tools": True,
                                   "max_turns": 6, "tool_timeout": 30, **solver}}],
        "output": {"dir": str(out)},
    }


def write(tmp_path: Path, cfg: dict[str, Any]) -> Path:
    path = tmp_path / "nel.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def test_nel_eval_run_writes_tool_trajectories_the_store_can_query(tmp_path: Path, url: str) -> None:
    out = tmp_path / "out"
    s = summary_json(run_nel("eval", "run", str(write(tmp_path, config(url, out))), "--json",
                             "--no-progress"))
    (res,) = s["results"]
    assert res["benchmark"] == "agent_tasks" and res["n_items"] == 4 and res["failed"] == 0
    exports = Path(res["exports"])
    traj = {(t["problem_idx"]): t for t in map(json.loads, (exports / "trajectories.jsonl").read_text().splitlines())}
    assert [traj[i]["reward"] for i in range(4)] == [1.0, 1.0, 1.0, 0.0]
    assert [traj[i]["turns"] for i in range(4)] == [4, 3, 2, 3]
    (atif,) = traj[0]["trajectory"]
    assert atif["final_metrics"]["total_tool_calls"] == 3 and atif["final_metrics"]["total_turns"] == 4
    names = [c["function_name"] for st in atif["steps"] for c in st.get("tool_calls") or []]
    assert names == ["bash", "str_replace_editor", "bash"]
    results = [o["content"] for st in atif["steps"] for o in (st.get("observation") or {}).get("results", [])]
    assert results[-1] == "ok"  # the test program's output, as the model saw it
    # no sample failed (the wrong fizzbuzz is scored 0), so there is no failure_analysis.json;
    # the bundle's failure analysis still says which tool failed where
    fa = json.loads((out / "agent_tasks" / "bundle" / "model=ref" / "bundle.json").read_text())["failures"]
    assert fa["tools"]["bash"] == {"calls": 4, "failed": 1, "examples": fa["tools"]["bash"]["examples"]}
    assert fa["tools"]["bash"]["examples"] == [
        {"sample_id": "3:0", "what": "bash() failed on turn 1 with exit code 2"}]
    q = run_nel("query", "-o", str(out), "-f", "json", FAILED_TOOLS)
    assert q.returncode == 0, q.stderr
    assert json.loads(q.stdout) == [{"sample_id": "3:0", "tool": "bash", "turn": 1, "exit_code": 2}]


def test_the_dagster_graph_runs_a_tool_calling_benchmark(tmp_path: Path, url: str) -> None:
    import dagster as dg

    from nel_assets.factory import build_defs, build_resources
    from nel_resources.config import load_config
    from nel_resources.specs import resolve
    from nel_resources.storage.store import ResultStore

    out = tmp_path / "out"
    cfg = resolve(load_config(write(tmp_path, config(url, out))))
    before = server_stats(url)["by_endpoint"].get("/v1/chat/completions", 0)
    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("model", ["ref"])
        defs = build_defs(cfg, str(out))
        done = dg.materialize([*defs.assets], instance=instance,  # type: ignore[list-item]
                              resources=build_resources(cfg, str(out)),
                              partition_key=dg.MultiPartitionKey({"model": "ref", "shard": "0"}),
                              selection=[dg.AssetKey(["agent_tasks", "shard_results"])])
        assert done.success
    rows = ResultStore(out).read_shards("agent_tasks", "ref").to_pylist()
    assert [r["reward"] for r in rows] == [1.0, 1.0, 1.0, 0.0]
    assert [r["tool_calls"] for r in rows] == [3, 3, 1, 2]
    assert server_stats(url)["by_endpoint"]["/v1/chat/completions"] - before == 12


@pytest.mark.parametrize(("solver", "sandbox", "want", "status"), [
    # the Gym server's tools are listed at the shard's start: down, the run stops there
    ({"resource_service": "tools"}, "box", "NeMo Gym resources server http://127.0.0.1:9 did "
     "not answer GET /openapi.json", 4),
    ({}, None, "key benchmarks.0.solver.sandbox_tools: sandbox tools need a sandbox", 2),
], ids=["resource_service-down", "no-sandbox"])
def test_what_cannot_run_is_refused_in_one_line(tmp_path: Path, url: str, solver: dict[str, Any],
                                                sandbox: str | None, want: str,
                                                status: int) -> None:
    cfg = config(url, tmp_path / "out", **solver)
    if sandbox is None:
        del cfg["benchmarks"][0]["sandbox"]
    if solver:  # a NeMo Gym resource server (nothing listens: no request may reach it)
        cfg["services"]["tools"] = {"type": "gym", "url": "http://127.0.0.1:9"}
    before = server_stats(url)["total_requests"]
    p = run_nel("eval", "run", str(write(tmp_path, cfg)), "--no-progress")
    lines = p.stderr.strip().splitlines()
    assert p.returncode == status and len(lines) == 1 and want in lines[0], p.stderr
    assert server_stats(url)["total_requests"] == before
