"""Tool-call latency through `GymResourceTools` vs a bare aiohttp POST, in one command.

Both call the same tool (`increment_counter`, then `get_counter_value`) of the same real NeMo
Gym resources server (`example_session_state_mgmt`, started here with `ng_run`), one call at a
time, with the same session cookie. Rounds alternate between the two so machine load hits
both alike; prints p50/p95 per side (ms, medians over rounds) and their ratio.

    python bench/bench_gym_tools.py --rounds 7 --calls 200

Needs NeMo Gym's venv (`make peers`: .venv-peers/nemo-gym, or NEL_PEER_GYM).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.support.nemo_gym import start_gym, stop_gym  # noqa: E402
from benchmarks._types import SeedResult  # noqa: E402
from nel_assets.engine.solvers.base import SolveContext  # noqa: E402
from nel_assets.engine.solvers.gym_tools import GymResourceTools  # noqa: E402

SERVER = "example_session_state_mgmt"
CALLS = (("increment_counter", {"count": 1}), ("get_counter_value", {}))


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def bare(url: str, calls: int) -> list[float]:
    """A plain aiohttp client: one session cookie, POST /{tool}, read the body."""
    out: list[float] = []
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as s:
        cookies: dict[str, str] = {}
        async with s.post(f"{url}/seed_session", json={"initial_count": 0}) as r:
            await r.read()
            cookies = {k: m.value for k, m in r.cookies.items()}
        for i in range(calls):
            name, args = CALLS[i % 2]
            t0 = time.perf_counter()
            async with s.post(f"{url}/{name}", data=orjson.dumps(args), cookies=cookies,
                              headers={"Content-Type": "application/json"}) as r:
                await r.read()
                if r.status != 200:
                    raise RuntimeError(f"bare {name}: HTTP {r.status}")
            out.append((time.perf_counter() - t0) * 1000)
    return out


async def through_tools(url: str, calls: int) -> list[float]:
    """The same calls through GymResourceTools (its session handling, output formatting)."""
    tools = GymResourceTools(url, timeout=60, max_output_chars=16384)
    ctx = SolveContext("0:0")
    out: list[float] = []
    try:
        await tools.specs(ctx)
        seeded = await tools.open_session(SeedResult("", "", metadata={"initial_count": 0}), ctx)
        if seeded.error:
            raise RuntimeError(seeded.content)
        for i in range(calls):
            name, args = CALLS[i % 2]
            t0 = time.perf_counter()
            got = await tools.call(name, args, ctx)
            out.append((time.perf_counter() - t0) * 1000)
            if got.error:
                raise RuntimeError(f"tools {name}: {got.error}")
    finally:
        await tools.close()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=200, help="tool calls per side per round")
    args = p.parse_args()
    venv = Path(os.environ.get("NEL_PEER_GYM") or REPO / ".venv-peers" / "nemo-gym")
    if not (venv / "bin" / "ng_run").is_file():
        sys.exit(f"NeMo Gym is not installed in {venv} (run `make peers`)")
    with tempfile.TemporaryDirectory(prefix="bench-gym-") as tmp:
        print("starting ng_run (Ray, the resources server) ...", flush=True)
        gym = start_gym(venv, Path(tmp), {"counter": {"resources_servers": {
            SERVER: {"entrypoint": "app.py", "domain": "agent"}}}})
        try:
            url = gym.urls["counter"]
            asyncio.run(bare(url, 20))  # warm both paths once
            asyncio.run(through_tools(url, 20))
            stats: dict[str, list[tuple[float, float]]] = {"bare": [], "tools": []}
            for r in range(args.rounds):
                order = (("bare", bare), ("tools", through_tools))
                for name, fn in order if r % 2 == 0 else order[::-1]:
                    lat = asyncio.run(fn(url, args.calls))
                    stats[name].append((_pct(lat, 0.5), _pct(lat, 0.95)))
        finally:
            stop_gym(gym)
    med = {k: (statistics.median(p50 for p50, _ in v), statistics.median(p95 for _, p95 in v))
           for k, v in stats.items()}
    print(f"rounds={args.rounds} calls/round/side={args.calls} (sequential, one session)")
    for k, (p50, p95) in med.items():
        print(f"  {k:6s} p50 {p50:7.2f} ms   p95 {p95:7.2f} ms")
    print(f"  ratio tools/bare: p50 {med['tools'][0] / med['bare'][0]:.2f}x   "
          f"p95 {med['tools'][1] / med['bare'][1]:.2f}x")


if __name__ == "__main__":
    main()
