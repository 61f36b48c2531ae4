"""The shard loop's contract with agentic solvers (`ShardSpec.solver`): a reward the solver
computed is trusted (verify is not called), a solver's failure is a failed row with its
reason and category, and a solver bug is recorded instead of ending the shard."""

from __future__ import annotations

import asyncio
from typing import Any

from benchmarks import EvalEnvironment, SeedResult, VerifyResult
from nel_assets.engine.evaluation.loop import ShardSpec, needs_retry, run_shard
from nel_assets.engine.solvers.base import SolveContext, SolveResult
from nel_resources.model_client import ModelClient


class Three(EvalEnvironment):
    name = "three"

    def __init__(self) -> None:
        super().__init__()
        self.verified: list[str] = []

    def __len__(self) -> int:
        return 3

    async def seed(self, idx: int) -> SeedResult:
        return SeedResult(f"problem {idx}", "yes", {"idx": idx})

    async def verify(self, response: str, expected: str, **metadata: Any) -> VerifyResult:
        self.verified.append(response)
        return VerifyResult(float(response == expected), response, {"method": "exact"})


class Scripted:
    """Problem 0: answers "yes" (verified by the environment); 1: its own reward 0.25;
    2: fails after two turns; a repeat 1 of any problem raises (a solver bug)."""

    def __init__(self) -> None:
        self.contexts: list[SolveContext] = []

    async def solve(self, task: SeedResult, ctx: SolveContext | None = None) -> SolveResult:
        assert ctx is not None
        self.contexts.append(ctx)
        if ctx.repeat == 1:
            raise RuntimeError("boom")
        steps = [{"source": "agent", "message": "m", "step_id": 1}]
        idx = ctx.problem_idx
        if idx == 0:
            return SolveResult("yes", steps=steps, turns=1)
        if idx == 1:
            return SolveResult("whatever", reward=0.25, scoring_details={"judge": "gym"},
                               steps=steps, turns=3, prompt_tokens=30, completion_tokens=6)
        return SolveResult("", error="max_turns_exhausted: 2 turns", failure_category="max_turns_exhausted",
                           steps=steps, turns=2)


def test_the_loop_trusts_records_and_survives_its_solver() -> None:
    env, solver = Three(), Scripted()

    async def go() -> list[dict[str, Any]]:
        client = ModelClient("http://127.0.0.1:9/v1", model="ref")  # never called
        spec = ShardSpec(benchmark="three", model="ref", model_id="ref", shard=0,
                         indices=[0, 1, 2], repeats=2, solver=solver)
        return await run_shard(env, client, spec)

    rows = {r["sample_id"]: r for r in asyncio.run(go())}
    assert rows["0:0"]["reward"] == 1.0 and env.verified == ["yes"]  # only problem 0 verified
    assert rows["0:0"]["turns"] == 1 and rows["0:0"]["steps"].startswith('[{"source":"agent"')
    assert rows["1:0"]["reward"] == 0.25 and rows["1:0"]["details"] == '{"judge":"gym"}'
    assert (rows["1:0"]["prompt_tokens"], rows["1:0"]["completion_tokens"]) == (30, 6)
    assert rows["2:0"]["reward"] is None and rows["2:0"]["failure_category"] == "max_turns_exhausted"
    assert rows["2:0"]["error"] == "max_turns_exhausted: 2 turns" and needs_retry(rows["2:0"])
    for i in range(3):
        bug = rows[f"{i}:1"]
        assert bug["reward"] is None and bug["error"] == "solver failed: RuntimeError: boom"
    assert sorted((c.sample_id, c.problem_idx, c.repeat, c.sandbox) for c in solver.contexts) == [
        (f"{i}:{r}", i, r, None) for i in range(3) for r in range(2)]


def test_a_sink_takes_every_row_reused_ones_first_and_the_list_stays_empty() -> None:
    kept = {"sample_id": "0:0", "problem_idx": 0, "repeat": 0, "reward": 1.0, "error": None}

    async def go(sink: Any = None) -> list[dict[str, Any]]:
        client = ModelClient("http://127.0.0.1:9/v1", model="ref")  # never called
        spec = ShardSpec(benchmark="three", model="ref", model_id="ref", shard=0,
                         indices=[0, 1, 2], repeats=2, solver=Scripted())
        return await run_shard(Three(), client, spec, reuse=[dict(kept)], sink=sink)

    listed = asyncio.run(go())
    sunk: list[dict[str, Any]] = []
    assert asyncio.run(go(sunk.append)) == []
    assert sunk[0] == kept and len(sunk) == len(listed) == 6
    drop = ("seed_ms", "model_ms", "verify_ms", "total_ms", "timestamp")
    strip = [{k: v for k, v in r.items() if k not in drop} for r in listed]
    assert sorted(({k: v for k, v in r.items() if k not in drop} for r in sunk),
                  key=lambda r: (r["problem_idx"], r["repeat"])) == strip
