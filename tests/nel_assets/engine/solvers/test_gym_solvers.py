"""NeMo Gym's side of agentic solvers, against the real NeMo Gym 0.4.0.

The suite's shared Gym stack (`shared_gym`, tests/support/nemo_gym.py; Ray alone takes many
seconds): Gym's own `example_session_state_mgmt` resources server (a per-session counter:
`seed_session` sets it, `increment_counter` and `get_counter_value` are its tools, `verify`
rewards the expected count), its `simple_agent` on that server, and its `openai_model` in
front of nel's reference server as the policy model.

- `GymResourceTools` lists the server's tools from /openapi.json and calls them with each
  sample's Gym session (two samples' counters stay apart); bad arguments, unknown tools and a
  server that is down come back as errors.
- `GymDelegationSolver` (built by the factory's `solver_for` from a config block) runs rollouts on the agent:
  the reward is the agent's with `trust_reward: true` and None without; failures of the agent
  or of Gym are recorded per sample with a category.
- Gym's recorded rollouts of that server (shipped with the package; a real model calling the
  tools) become ATIF steps with every tool call and its result.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from benchmarks._types import SeedResult
from nel_assets.engine.solvers.base import SolveContext, Solver, SolveResult, ToolSource
from nel_assets.engine.solvers.factory import solver_for
from nel_assets.engine.solvers.gym_delegation import GymDelegationSolver
from nel_assets.engine.solvers.gym_steps import gym_output_steps, gym_output_text
from nel_assets.engine.solvers.gym_tools import GymResourceTools, GymToolsError, gym_run_body
from nel_resources.config.benchmarks import SolverConfig
from nel_resources.config.services import ServiceConfig
from nel_resources.runtime.processes import free_port
from tests.support.nemo_gym import GYM_GROUP, POLICY_DEFAULT, GymRun, SharedGym

pytestmark = pytest.mark.xdist_group(GYM_GROUP)
ANSWER = POLICY_DEFAULT  # the policy model's reply to the counter prompts; it calls no tools


@dataclass
class Stack:
    gym: GymRun
    rows: list[dict[str, Any]]  # the resources server's own example rows
    recorded: Path  # Gym's recorded rollouts of this server (a real model using the tools)

    @property
    def counter_url(self) -> str:
        return self.gym.urls["counter"]


@pytest.fixture(scope="module")
def stack(shared_gym: SharedGym) -> Stack:
    return Stack(shared_gym.gym, shared_gym.counter_rows, shared_gym.counter_recorded)


def _seed(row: dict[str, Any], **changes: Any) -> SeedResult:
    """A Gym example row as nel seeds it: its prompt, its scalar fields and its tools."""
    rcp = row["responses_create_params"]
    meta = {k: v for k, v in row.items() if k != "responses_create_params"}
    meta.update(tools=rcp["tools"], **changes)
    messages = [{"role": m["role"], "content": m["content"]} for m in rcp["input"]]
    return SeedResult(prompt=messages[-1]["content"], expected_answer=str(row["expected_count"]),
                      metadata=meta, messages=messages)


def _count(outcome: Any) -> int:
    assert outcome.error is None, outcome.content
    return int(json.loads(outcome.content)["count"])


def test_resource_tools_list_the_servers_tools_and_keep_each_samples_session(
        stack: Stack) -> None:
    async def go() -> None:
        tools = GymResourceTools(stack.counter_url, timeout=60, max_output_chars=4096)
        assert isinstance(tools, ToolSource)
        try:
            specs = await tools.specs(SolveContext("0:0"))
            by_name = {s["function"]["name"]: s["function"] for s in specs}
            # Gym's own endpoints (seed_session, verify, aggregate_metrics) are not tools
            assert sorted(by_name) == ["get_counter_value", "increment_counter"]
            inc = by_name["increment_counter"]["parameters"]
            assert inc["required"] == ["count"]
            assert inc["properties"]["count"]["type"] == "integer"
            assert by_name["get_counter_value"]["parameters"]["type"] == "object"

            a, b = SolveContext("0:0"), SolveContext("1:0", problem_idx=1)
            row_a, row_b = stack.rows[0], stack.rows[1]
            seeded = await asyncio.gather(tools.open_session(_seed(row_a), a),
                                          tools.open_session(_seed(row_b), b))
            assert [s.error for s in seeded] == [None, None]
            done = await asyncio.gather(
                tools.call("increment_counter", {"count": 4}, a),
                tools.call("increment_counter", {"count": 7}, b))
            assert [d.error for d in done] == [None, None]
            assert await tools.call("increment_counter", {"count": 1}, a)
            # each sample's counter: its own seeded start plus its own increments
            assert _count(await tools.call("get_counter_value", {}, a)) == (
                row_a["initial_count"] + 4 + 1)
            assert _count(await tools.call("get_counter_value", {}, b)) == (
                row_b["initial_count"] + 7)
            # a sample with no session yet gets a fresh one (Gym starts the counter at 0)
            fresh = SolveContext("2:0", problem_idx=2)
            assert _count(await tools.call("get_counter_value", {}, fresh)) == 0
            tools.end_session(a)
            assert _count(await tools.call("get_counter_value", {}, a)) == 0
        finally:
            await tools.close()

    asyncio.run(go())


def test_resource_tools_errors_come_back_as_outcomes(stack: Stack) -> None:
    async def go() -> None:
        tools = GymResourceTools(stack.counter_url, timeout=60, max_output_chars=120)
        ctx = SolveContext("0:0")
        try:
            bad = await tools.call("increment_counter", {"count": "lots"}, ctx)
            assert bad.error == "increment_counter: HTTP 422"
            assert bad.content.startswith("HTTP 422: ")
            # FastAPI's validation error is long: capped, head and tail kept
            assert bad.truncated and len(bad.content) <= 120
            assert "characters truncated" in bad.content
            unknown = await tools.call("rm_rf", {}, ctx)
            assert unknown.error is not None and "unknown tool 'rm_rf'" in unknown.error
            assert "get_counter_value, increment_counter" in unknown.content
            not_object = await tools.call("increment_counter", [1], ctx)  # type: ignore[arg-type]
            assert not_object.error is not None and "JSON object" in not_object.error
            # seeding needs the row's fields: a seed without them is refused by the server
            refused = await tools.open_session(SeedResult("hi", "0"), ctx)
            assert refused.error == "seed_session: HTTP 422"
        finally:
            await tools.close()

    asyncio.run(go())


def test_resource_tools_of_a_server_that_is_down() -> None:
    async def go() -> None:
        url = f"http://127.0.0.1:{free_port()}"
        tools = GymResourceTools(url, timeout=10, max_output_chars=4096)
        try:
            with pytest.raises(GymToolsError, match=r"did not answer GET /openapi\.json"):
                await tools.specs(SolveContext("0:0"))
            out = await tools.call("increment_counter", {"count": 1}, SolveContext("0:0"))
            assert out.error is not None and url in out.error
        finally:
            await tools.close()

    asyncio.run(go())


def _solver(stack: Stack, **solver: Any) -> GymDelegationSolver:
    cfg = SolverConfig.model_validate({"type": "gym_delegation", "gym_service": "gym", **solver})
    services = {"gym": ServiceConfig.model_validate({"type": "gym", "url": stack.gym.head_url})}
    built = solver_for(cfg, None, system_prompt=None, services=services,  # type: ignore[arg-type]
                       model_id="reference")
    assert isinstance(built, GymDelegationSolver)
    return built


def test_delegation_runs_rollouts_on_the_gym_agent(stack: Stack) -> None:
    # The reference model calls no tool, so the counter stays at its seeded start: rows
    # whose expected count is that start are right, the others wrong.
    seeds = [_seed(r, expected_count=r["initial_count"]) if i % 2 else _seed(r)
             for i, r in enumerate(stack.rows)]
    designed = [float(s.metadata["expected_count"] == s.metadata["initial_count"])
                for s in seeds]
    assert 0.0 in designed and 1.0 in designed

    async def run(solver: Solver) -> list[SolveResult]:
        try:
            return list(await asyncio.gather(*(
                solver.solve(s, SolveContext(f"{i}:0", problem_idx=i))
                for i, s in enumerate(seeds))))
        finally:
            await solver.close()  # type: ignore[attr-defined]

    trusted = asyncio.run(run(_solver(stack, gym_agent="counter_agent", trust_reward=True)))
    assert [r.error for r in trusted] == [None] * len(seeds)
    assert [r.reward for r in trusted] == designed
    assert all(r.scoring_details["method"] == "gym_reward" for r in trusted)

    # no gym_agent: the only agent; trust_reward off: nel verifies, the reward stays None
    own = asyncio.run(run(_solver(stack)))
    for seed, r in zip(seeds, own, strict=True):
        assert r.error is None and r.reward is None and r.response == ANSWER
        assert r.turns == 1 and r.prompt_tokens and r.completion_tokens
        assert r.model_response is not None and r.model_response.model == "reference"
        assert [s["source"] for s in r.steps] == ["user", "agent"]
        assert r.steps[0]["message"] == seed.prompt
        assert r.steps[1]["message"] == ANSWER and r.steps[1]["tool_calls"] == []


def test_delegation_failures_are_recorded_per_sample(stack: Stack) -> None:
    async def go() -> None:
        row = stack.rows[0]
        # the agent's resources server refuses a seed without `initial_count`: Gym's 500
        solver = _solver(stack, gym_agent="counter_agent", trust_reward=True)
        broken = _seed(row)
        del broken.metadata["initial_count"]
        try:
            r = await solver.solve(broken, SolveContext("0:0"))
        finally:
            await solver.close()
        assert r.failure_category == "gym_http_error" and r.reward is None
        assert r.error is not None and "HTTP 500" in r.error and "initial_count" in r.error
        assert [s["source"] for s in r.steps] == ["user"]  # what was asked is kept

        missing = _solver(stack, gym_agent="no_such_agent")
        try:
            r = await missing.solve(_seed(row), SolveContext("0:0"))
        finally:
            await missing.close()
        assert r.failure_category == "gym_agent_not_found"
        assert r.error is not None and "counter_agent" in r.error

        # Gym down: every sample fails with its reason; none raises
        down = GymDelegationSolver(f"http://127.0.0.1:{free_port()}", trust_reward=True)
        try:
            results = await asyncio.gather(*(
                down.solve(_seed(r), SolveContext(f"{i}:0")) for i, r in enumerate(stack.rows)))
        finally:
            await down.close()
        assert [r.failure_category for r in results] == ["gym_unreachable"] * len(stack.rows)
        assert all(r.error and "unreachable" in r.error and r.reward is None for r in results)

    asyncio.run(go())


def test_steps_of_gym_recorded_rollouts_keep_every_tool_call(stack: Stack) -> None:
    recorded = [json.loads(line) for line in stack.recorded.read_text().splitlines()
                if line.strip()]
    assert recorded
    for rollout in recorded:
        output = rollout["response"]["output"]
        steps = gym_output_steps(rollout, output, "gpt")
        assert [s["step_id"] for s in steps] == list(range(1, len(steps) + 1))
        assert steps[0] == {"source": "user", "step_id": 1, "message":
                            rollout["responses_create_params"]["input"][0]["content"]}
        calls = [o for o in output if o["type"] == "function_call"]
        results = [o for o in output if o["type"] == "function_call_output"]
        assert calls and results
        recorded_calls = [c for s in steps if s["source"] == "agent" for c in s["tool_calls"]]
        assert [(c["tool_call_id"], c["function_name"], c["arguments"]) for c in recorded_calls] \
            == [(c["call_id"], c["name"], c["arguments"]) for c in calls]
        observed = [s["observation"]["results"][0] for s in steps if "observation" in s]
        assert [(o["source_call_id"], o["content"]) for o in observed] == [
            (r["call_id"], r["output"]) for r in results]
        # every result answers a call made in an earlier step
        for i, step in enumerate(steps):
            if "observation" in step:
                earlier = {c["tool_call_id"] for s in steps[:i] if s["source"] == "agent"
                           for c in s["tool_calls"]}
                assert step["observation"]["results"][0]["source_call_id"] in earlier
        final = gym_output_text(output)
        assert final and steps[-1]["source"] == "agent" and steps[-1]["message"] == final


def test_gym_run_body_is_the_rows_rollout_request(stack: Stack) -> None:
    row = stack.rows[2]
    body = gym_run_body(_seed(row))
    assert body["responses_create_params"]["input"] == [
        {"role": m["role"], "content": m["content"]} for m in row["responses_create_params"]["input"]]
    assert body["responses_create_params"]["tools"] == row["responses_create_params"]["tools"]
    assert body["expected_count"] == row["expected_count"]
    assert body["initial_count"] == row["initial_count"]
    assert "gym_row" not in gym_run_body(SeedResult("p", "", metadata={"gym_row": 3}))


class _BrokenAgent(BaseHTTPRequestHandler):
    """An HTTP server that is no Gym head (404 at /server_instances) and answers `/run` with
    a body that is not a rollout, or (`hang` set on the server) not at all until released."""

    def do_GET(self) -> None:
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        release: threading.Event | None = getattr(self.server, "hang", None)
        if release is not None:
            release.wait()
            return
        body = b"<html>gateway error</html>"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_hung_and_malformed_servers_fail_the_sample_with_a_reason() -> None:
    broken_server = ThreadingHTTPServer(("127.0.0.1", 0), _BrokenAgent)
    hung_server = ThreadingHTTPServer(("127.0.0.1", 0), _BrokenAgent)
    release = threading.Event()
    hung_server.hang = release  # type: ignore[attr-defined]
    for srv in (broken_server, hung_server):
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    silent = socket.socket()  # accepts connections (the kernel's backlog), never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)

    async def go() -> None:
        broken = GymDelegationSolver(f"http://127.0.0.1:{broken_server.server_port}",
                                     trust_reward=True)
        hung = GymDelegationSolver(f"http://127.0.0.1:{hung_server.server_port}", timeout=0.5)
        tools = GymResourceTools(f"http://127.0.0.1:{silent.getsockname()[1]}", timeout=0.5,
                                 max_output_chars=4096)
        try:
            r = await broken.solve(SeedResult("q", "1"), SolveContext("0:0"))
            assert r.failure_category == "gym_malformed_reply" and "not JSON" in str(r.error)
            r = await hung.solve(SeedResult("q", "1"), SolveContext("0:0"))
            assert r.failure_category == "timeout" and "no rollout within" in str(r.error)
            out = await tools.call("anything", {}, SolveContext("0:0"))
            assert out.error is not None and "GET /openapi.json" in out.error
        finally:
            for closeable in (broken, hung, tools):
                await closeable.close()

    try:
        asyncio.run(go())
    finally:
        release.set()
        silent.close()
        for srv in (broken_server, hung_server):
            srv.shutdown()
            srv.server_close()
