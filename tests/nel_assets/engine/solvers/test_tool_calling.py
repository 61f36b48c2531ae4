"""The `tool_calling` solver through the real shard loop: a scripted model (the reference
server answering with tool calls) solves nel's `agent_tasks` with the sandbox tools in real
`local` (bubblewrap) and `docker` sandboxes, over chat completions and the Responses API;
tool calls that go wrong (unknown tool, malformed arguments, a hanging or flooding command, a
model that never stops) each end with a recorded reason the model saw."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from benchmarks import EvalEnvironment, SeedResult, VerifyResult
from benchmarks.builtin.agent_tasks import AgentTasks
from benchmarks.errors import NelError
from nel_assets.engine.evaluation.loop import ShardSpec, run_shard
from nel_assets.engine.evaluation.sandboxing import SandboxPool, open_factory
from nel_assets.engine.solvers.base import SolveContext, ToolOutcome
from nel_assets.engine.solvers.sandbox_tools import SandboxTools
from nel_assets.engine.solvers.tool_calling import ToolCallingSolver
from nel_resources.config import SandboxConfig
from nel_resources.model_client import ModelClient
from nel_resources.reference_server import start_reference_server
from tests.nel_assets.engine.solvers.scripts import AGENT_TASKS, PROBE_SCRIPT
from tests.support import require_real_component, server_stats
from tests.support.docker_engine import BASE_IMAGE


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    if shutil.which("bwrap") is None:
        require_real_component("bubblewrap (bwrap) is not installed: run `make system-deps`")
    proc, base = start_reference_server(tool_script=AGENT_TASKS + PROBE_SCRIPT, record_bodies=64)
    try:
        yield base
    finally:
        proc.stop()


class Probes(EvalEnvironment):
    """One problem per probe script; the verdict is whether the model's answer (the last
    tool result it saw) says what happened."""

    name = "probes"
    PROMPTS: ClassVar[list[str]] = ["probe-errors", "probe-hang", "probe-flood", "probe-loop",
                                    "probe-artifact"]

    def __len__(self) -> int:
        return len(self.PROMPTS)

    async def seed(self, idx: int) -> SeedResult:
        return SeedResult(self.PROMPTS[idx], "", {"idx": idx})

    async def verify(self, response: str, expected: str, **metadata: Any) -> VerifyResult:
        return VerifyResult(1.0, response[:50], {"method": "probe"})


def run(env: EvalEnvironment, base: str, sandbox: dict[str, Any], *, protocol: str = "chat_completions",
        indices: list[int] | None = None, **solver_kw: Any) -> list[dict[str, Any]]:
    async def go() -> list[dict[str, Any]]:
        client = ModelClient(base, model="ref", protocol=protocol, max_concurrent=4)
        try:
            async with open_factory(SandboxConfig(**sandbox)) as factory:
                solver = ToolCallingSolver(
                    client, [SandboxTools(timeout=solver_kw.pop("tool_timeout", 60.0))], **solver_kw)
                spec = ShardSpec(benchmark=env.name, model="ref", model_id="ref", shard=0,
                                 indices=indices if indices is not None else list(range(len(env))),
                                 protocol=protocol, sandboxes=SandboxPool(factory), solver=solver)
                return await run_shard(env, client, spec)
        finally:
            await client.close()

    return asyncio.run(go())


def steps(row: dict[str, Any]) -> list[dict[str, Any]]:
    return json.loads(row["steps"])


def observations(row: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in steps(row) if "observation" in s]


def check_agent_tasks(rows: list[dict[str, Any]]) -> None:
    """The verdicts and trajectories the scripts in `AGENT_TASKS` must produce."""
    assert [r["reward"] for r in rows] == [1.0, 1.0, 1.0, 0.0], [(r["reward"], r["error"]) for r in rows]
    assert [r["turns"] for r in rows] == [4, 3, 2, 3]
    assert [r["tool_calls"] for r in rows] == [3, 3, 1, 2]
    fix_add, slugify, count, fizz = rows
    # the model's answer quotes what the test program printed in the sandbox
    assert fix_add["response"] == "Fixed calc.add; the test says: ok"
    obs = observations(fix_add)
    assert "return a - b" in obs[0]["message"] and obs[0]["extra"]["exit_code"] == 0
    assert obs[1]["message"].startswith("Replaced 1 occurrence")
    agent = [s for s in steps(fix_add) if s["source"] == "agent"]
    assert agent[1]["tool_calls"] == [{"tool_call_id": "call_1_0", "function_name": "str_replace_editor",
                                       "arguments": {"command": "str_replace", "path": "calc.py",
                                                     "old_str": "return a - b",
                                                     "new_str": "return a + b"}}]
    assert obs[1]["observation"]["results"][0]["source_call_id"] == "call_1_0"
    assert all(s["metrics"]["prompt_tokens"] > 0 for s in agent)
    assert [s["step_id"] for s in steps(fix_add)] == list(range(1, len(steps(fix_add)) + 1))
    # two calls in one turn, both answered, in order
    first = next(s for s in steps(slugify) if s["source"] == "agent")
    assert [c["function_name"] for c in first["tool_calls"]] == ["file_read", "str_replace_editor"]
    read, view = observations(slugify)[:2]
    assert read["message"] == "def slugify(text):\n    return '-'.join(text.split())\n"
    assert view["message"].splitlines()[0] == "     1\tdef slugify(text):"
    assert count["response"] == "3 rows failed."
    assert json.loads(count["details"])["exit_code"] == 0  # the verifier's test program
    # the failing task: its failed tool call is attributed, the tests' failure recorded
    d = json.loads(fizz["details"])
    assert d["tool_failures"] == ["bash() failed on turn 1 with exit code 2"]
    assert d["exit_code"] != 0 and fizz["extracted"] == "tests fail" and fizz.get("error") is None
    assert observations(fizz)[0]["extra"]["error"] == "exit code 2"


def test_a_scripted_model_solves_agent_tasks_in_a_local_sandbox(url: str) -> None:
    before = server_stats(url)["by_endpoint"].get("/v1/chat/completions", 0)
    rows = run(AgentTasks(), url, {"type": "local", "concurrency": 4})
    check_agent_tasks(rows)
    assert server_stats(url)["by_endpoint"]["/v1/chat/completions"] - before == 12
    # every turn sent the four tools and the conversation so far (tool results included)
    body = server_stats(url)["bodies"][-1]
    assert sorted(t["function"]["name"] for t in body["tools"]) == [
        "bash", "file_read", "file_write", "str_replace_editor"]


def test_the_responses_api_drives_the_same_loop(url: str) -> None:
    rows = run(AgentTasks(), url, {"type": "local"}, protocol="responses")
    check_agent_tasks(rows)
    body = [b for b in server_stats(url)["bodies"] if "input" in b][-1]
    assert {t["name"] for t in body["tools"]} >= {"bash", "file_write"}  # the flat tool shape
    kinds = [i.get("type") for i in body["input"]]
    assert "function_call" in kinds and "function_call_output" in kinds


def test_tool_calls_that_go_wrong_end_with_recorded_reasons(url: str) -> None:
    # Only the hanging command gets the short timeout: on a busy machine a quick command
    # must never be the one that hits it.
    errors, flood, loop = run(Probes(), url, {"type": "local"}, tool_timeout=60.0, max_turns=4,
                              max_output_chars=1000, indices=[0, 2, 3])
    (hang,) = run(Probes(), url, {"type": "local"}, tool_timeout=2.0, indices=[1])
    # an unknown tool and malformed arguments are both answered to the model, in order
    unknown, malformed = observations(errors)
    assert "no tool named 'no_such_tool'" in unknown["message"]
    assert unknown["extra"]["error"] == "unknown tool"
    assert malformed["extra"]["error"].startswith("malformed arguments: the arguments are not valid JSON")
    assert errors["response"] == malformed["message"]  # what the model saw last
    assert agent_args(errors) == [{"x": 1}, "{\"command\": \"ls\""]  # the raw text is kept
    assert errors["reward"] == 1.0 and errors.get("error") is None
    # a command that hangs is stopped at tool_timeout; the sample goes on
    (h,) = observations(hang)
    assert h["extra"]["error"] == "timed out after 2s" and "timed out" in hang["response"]
    assert hang["reward"] == 1.0
    # a flood is capped: head and tail, marked truncated
    (f,) = observations(flood)
    assert f["extra"]["truncated"] is True
    assert "characters truncated" in f["message"] and len(f["message"]) < 1100
    # past 1 MiB the sandbox stops the command (its memory stays bounded) and says so
    assert f["message"].splitlines()[:2] == ["[command stopped by the sandbox: output_limit]", "y"]
    assert f["message"].rstrip().endswith("y")
    assert f["extra"]["error"] == "stopped by the sandbox (output_limit)"
    # a model that never stops calling tools fails at max_turns, with the last tool failure
    assert loop["reward"] is None and loop["failure_category"] == "max_turns_exhausted"
    assert loop["turns"] == 4 and loop["tool_calls"] == 4
    assert loop["error"] == ("max_turns_exhausted: the model still called tools after 4 turns; "
                             "last tool failure: bash() failed on turn 4 with exit code 3")
    assert steps(loop)[-1]["extra"]["failure_category"] == "max_turns_exhausted"


def test_sandbox_artifact_answers_with_the_workdir_as_a_patch(url: str) -> None:
    if shutil.which("git") is None:
        require_real_component("git is not installed (the artifact is a git diff)")
    (row,) = run(Probes(), url, {"type": "local"}, indices=[4], response_mode="sandbox_artifact")
    # the model said "done"; the answer is what it left in the sandbox, new files included
    assert row["response"].startswith("diff --git a/new.txt b/new.txt"), row["response"]
    assert "+hello" in row["response"] and "tracked.txt" in row["response"]
    assert steps(row)[-1]["extra"]["exit_code"] == 0


def test_turns_go_through_the_interceptor_chain_as_one_session_per_sample(url: str) -> None:
    """`turn_counter` sees each sample as one session (session id = sample id): with a
    budget of 3 turns, the 4-turn task is stopped on its 4th call and the row says so, with
    the three turns it made; the 2-turn task is untouched."""
    from nel_resources.config import ServiceConfig
    from nel_resources.proxy.service_client import client_for_service

    svc = ServiceConfig(type="api", url=url, model="ref", protocol="chat_completions",
                        interceptors=[{"name": "turn_counter", "config": {"max_turns": 3}}])

    async def go() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        client = client_for_service(svc)
        try:
            async with open_factory(SandboxConfig(type="local")) as factory:
                spec = ShardSpec(benchmark="agent_tasks", model="ref", model_id="ref", shard=0,
                                 indices=[0, 2], sandboxes=SandboxPool(factory),
                                 solver=ToolCallingSolver(client, [SandboxTools()]))
                rows = await run_shard(AgentTasks(), client, spec)
            assert client.chain is not None
            return rows, client.chain.stats()
        finally:
            await client.close()

    (fix_add, count), stats = asyncio.run(go())
    assert stats["turn_sessions"] == 2 and stats["turns_refused"] == 1, stats
    assert fix_add["reward"] is None and fix_add["failure_category"] == "interceptor"
    assert fix_add["error"].startswith("model call on turn 4 failed: ")
    assert "turn budget exhausted: turn 4 of max_turns=3 for session 0:0" in fix_add["error"]
    assert fix_add["turns"] == 3 and fix_add["tool_calls"] == 3
    assert count["reward"] == 1.0 and count["turns"] == 2


def agent_args(row: dict[str, Any]) -> list[Any]:
    return [c["arguments"] for s in steps(row) if s["source"] == "agent" for c in s["tool_calls"]]


class _Named:
    def __init__(self, name: str) -> None:
        self.name = name

    async def specs(self, ctx: SolveContext) -> list[dict[str, Any]]:
        return [{"type": "function", "function": {"name": "bash", "parameters": {}}}]

    async def call(self, name: str, arguments: dict[str, Any], ctx: SolveContext) -> ToolOutcome:
        return ToolOutcome("")


def test_a_tool_declared_by_two_sources_is_a_config_error_naming_both(url: str) -> None:
    client = ModelClient(url, model="ref")
    solver = ToolCallingSolver(client, [SandboxTools(), _Named("gym:tools")])
    with pytest.raises(NelError, match=r"tool 'bash' is declared by both sandbox_tools and gym:tools"):
        asyncio.run(solver.routes(SolveContext("0:0", sandbox=object())))


class _Sessions(_Named):
    """A source with per-sample sessions whose session cannot open."""

    def __init__(self) -> None:
        super().__init__("gym:tools")
        self.ended: list[str] = []

    async def open_session(self, task: SeedResult, ctx: SolveContext) -> ToolOutcome:
        return ToolOutcome("", error="HTTP 503 from /seed_session")

    def end_session(self, ctx: SolveContext) -> None:
        self.ended.append(ctx.sample_id)


def test_a_source_whose_session_cannot_open_fails_the_sample_before_any_turn(url: str) -> None:
    src = _Sessions()
    before = server_stats(url)["total_requests"]
    res = asyncio.run(ToolCallingSolver(ModelClient(url, model="ref"), [src]).solve(
        SeedResult("probe-errors", ""), SolveContext("7:1")))
    assert res.failure_category == "tool_error" and res.turns == 0
    assert res.error == "gym:tools: opening the sample's session failed: HTTP 503 from /seed_session"
    assert src.ended == ["7:1"] and server_stats(url)["total_requests"] == before


def test_a_scripted_model_solves_agent_tasks_in_a_docker_sandbox(url: str, docker_host: str) -> None:
    rows = run(AgentTasks(), url, {"type": "docker", "image": BASE_IMAGE, "concurrency": 2})
    check_agent_tasks(rows)
