"""Tool-calling throughput in one command: turns/s and tool-call latency (p50/p95) of the
`tool_calling` solver with `bash` in the `local` (bubblewrap) sandbox, against the scripted
reference server, next to the simple solver's requests/s on the same server.

Each round runs both, alternating which goes first; the figures are medians over rounds.
Every agentic sample makes `--turns` model calls, each but the last with one `bash` call
(`echo`), then answers; a simple sample makes one call. The ratio says what an agent turn
costs against a plain request (sandbox start, the command in bubblewrap, the longer
conversation).

    python bench/bench_tool_calling.py --samples 32 --turns 4 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import EvalEnvironment, SeedResult, VerifyResult  # noqa: E402
from nel_assets.engine.evaluation.loop import ShardSpec, run_shard  # noqa: E402
from nel_assets.engine.evaluation.sandboxing import SandboxPool, open_factory  # noqa: E402
from nel_assets.engine.solvers.sandbox_tools import SandboxTools  # noqa: E402
from nel_assets.engine.solvers.tool_calling import ToolCallingSolver  # noqa: E402
from nel_resources.config import SandboxConfig  # noqa: E402
from nel_resources.model_client import ModelClient  # noqa: E402
from nel_resources.reference_server import start_reference_server  # noqa: E402


class Prompts(EvalEnvironment):
    """`n` problems with the same prompt (the script keys on it), verified as right."""

    name = "bench"

    def __init__(self, prompt: str, n: int) -> None:
        super().__init__()
        self.prompt, self.n = prompt, n

    def __len__(self) -> int:
        return self.n

    async def seed(self, idx: int) -> SeedResult:
        return SeedResult(f"{self.prompt} #{idx}", "x", {})

    async def verify(self, response: str, expected: str, **metadata: Any) -> VerifyResult:
        return VerifyResult(1.0, "x", {"method": "bench"})


async def agentic(url: str, n: int, concurrency: int) -> tuple[float, int, list[float]]:
    """(seconds, model turns, tool-call latencies in ms)."""
    client = ModelClient(url, model="ref", max_concurrent=concurrency)
    try:
        async with open_factory(SandboxConfig(type="local", concurrency=concurrency)) as factory:
            solver = ToolCallingSolver(client, [SandboxTools(timeout=60)], max_turns=50)
            spec = ShardSpec(benchmark="bench", model="ref", model_id="ref", shard=0,
                             indices=list(range(n)), sandboxes=SandboxPool(factory), solver=solver)
            t0 = time.perf_counter()
            rows = await run_shard(Prompts("bench-agent", n), client, spec, concurrency=concurrency)
            dt = time.perf_counter() - t0
    finally:
        await client.close()
    bad = [r for r in rows if r.get("error") or r.get("reward") != 1.0]
    assert not bad, bad[0]
    lat = [s["extra"]["latency_ms"] for r in rows for s in orjson.loads(r["steps"]) if "observation" in s]
    return dt, sum(r["turns"] for r in rows), lat


async def simple(url: str, n: int, concurrency: int) -> float:
    client = ModelClient(url, model="ref", max_concurrent=concurrency)
    try:
        spec = ShardSpec(benchmark="bench", model="ref", model_id="ref", shard=0, indices=list(range(n)))
        t0 = time.perf_counter()
        rows = await run_shard(Prompts("bench-plain", n), client, spec, concurrency=concurrency)
        dt = time.perf_counter() - t0
    finally:
        await client.close()
    assert all(r.get("reward") == 1.0 for r in rows)
    return dt


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=32, help="agentic samples per round")
    ap.add_argument("--simple-samples", type=int, default=2000, help="simple samples per round")
    ap.add_argument("--turns", type=int, default=4, help="model turns per agentic sample")
    ap.add_argument("--concurrency", type=int, default=4, help="samples (and sandboxes) at once")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    turns = [{"tool_calls": [{"name": "bash", "arguments": {"command": f"echo turn {t}"}}]}
             for t in range(args.turns - 1)] + [{"content": "done: {last_tool}"}]
    proc, url = start_reference_server(tool_script=[{"match": "bench-agent", "turns": turns}])
    try:
        agent_rate, simple_rate, lat_all = [], [], []
        for rnd in range(args.rounds):
            order = ("agent", "simple") if rnd % 2 == 0 else ("simple", "agent")
            for which in order:
                if which == "agent":
                    dt, n_turns, lat = asyncio.run(agentic(url, args.samples, args.concurrency))
                    agent_rate.append(n_turns / dt)
                    lat_all.extend(lat)
                else:
                    simple_rate.append(args.simple_samples / asyncio.run(
                        simple(url, args.simple_samples, args.concurrency)))
            print(f"round {rnd + 1}: agent {agent_rate[-1]:.1f} turns/s, simple "
                  f"{simple_rate[-1]:.1f} requests/s", flush=True)
        a, s = statistics.median(agent_rate), statistics.median(simple_rate)
        print(f"tool_calling (local sandbox, {args.turns} turns/sample, concurrency "
              f"{args.concurrency}): {a:.1f} turns/s (median of {args.rounds})")
        print(f"simple solver, same server and concurrency: {s:.1f} requests/s")
        print(f"ratio turns/s : requests/s = {a / s:.3f}")
        print(f"bash tool-call latency over {len(lat_all)} calls: p50 {pct(lat_all, 0.5):.1f} ms, "
              f"p95 {pct(lat_all, 0.95):.1f} ms")
    finally:
        proc.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
