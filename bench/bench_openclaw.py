"""What one sample of the `openclaw` solver costs, and where the time goes, in one command.

Each round runs, in alternating order:

* baseline: `openclaw --version` (the OpenClaw CLI on its Node, nothing else), wall time;
* one `OpenClawSolver` sample against an instant local reference server that scripts one
  tool call (`exec echo Paris`) and then the answer: the sample's wall time, the time from
  its start to its first model request reaching the server (OpenClaw's start-up), its model
  turns through nel's capture proxy (latency as the proxy measured it), and the `exec` call's
  duration as OpenClaw recorded it.

Prints the medians over `--rounds` and the sample/baseline ratio; `--json` adds the raw
figures. Needs the CLI (`make peers`, or `--openclaw PATH`).

    python bench/bench_openclaw.py --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks._types import SeedResult  # noqa: E402
from nel_assets.engine.solvers.base import SolveContext  # noqa: E402
from nel_assets.engine.solvers.openclaw import OpenClawSolver  # noqa: E402
from nel_resources.config import ServiceConfig  # noqa: E402
from nel_resources.reference_server import start_reference_server  # noqa: E402

SCRIPT = [{"match": "capital of France", "turns": [
    {"tool_calls": [{"name": "exec", "arguments": {"command": "echo Paris"}}]},
    {"content": "{last_tool}"}]}]


def _stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url.removesuffix("/v1") + "/stats", timeout=10) as r:
        return json.load(r)


def _reset(url: str) -> None:
    req = urllib.request.Request(url.removesuffix("/v1") + "/stats/reset", method="POST")
    urllib.request.urlopen(req, timeout=10).read()


def baseline(binary: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([binary, "--version"], check=True, capture_output=True)
    return time.perf_counter() - t0


async def sample(solver: OpenClawSolver, url: str, n: int) -> dict[str, Any]:
    _reset(url)
    seed = SeedResult(prompt="What is the capital of France? Answer with the city only.",
                      expected_answer="Paris")
    started = time.time()
    t0 = time.perf_counter()
    res = await solver.solve(seed, SolveContext(f"{n}:0", n))
    wall = time.perf_counter() - t0
    if res.error is not None or res.response != "Paris":
        raise SystemExit(f"the sample failed: {res.error or res.response!r}")
    first = _stats(url)["first_at"]["/v1/chat/completions"]
    turns = [s for s in res.steps if s["source"] == "agent"]
    tools = [s for s in res.steps if (s.get("extra") or {}).get("function_name")]
    return {"wall_s": wall, "to_first_request_s": first - started, "turns": len(turns),
            "turn_latency_ms": [s["extra"]["latency_ms"] for s in turns],
            "exec_ms": [s["extra"]["latency_ms"] for s in tools]}


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--openclaw", default=str(REPO / ".venv-peers" / "openclaw" / "bin" / "openclaw"))
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    proc, url = start_reference_server(tool_script=SCRIPT, match_conversation=True)
    solver = OpenClawSolver(ServiceConfig(type="api", url=url, model="ref"),
                            openclaw_bin=args.openclaw, thinking="off", timeout=600)
    base: list[float] = []
    runs: list[dict[str, Any]] = []
    try:
        await solver.prepare()
        for r in range(args.rounds):
            if r % 2 == 0:
                base.append(baseline(args.openclaw))
                runs.append(await sample(solver, url, r))
            else:
                runs.append(await sample(solver, url, r))
                base.append(baseline(args.openclaw))
    finally:
        await solver.close_tools()
        proc.stop()
    med = statistics.median
    wall = med(r["wall_s"] for r in runs)
    first = med(r["to_first_request_s"] for r in runs)
    turn_ms = med(x for r in runs for x in r["turn_latency_ms"])
    exec_ms = med(x for r in runs for x in r["exec_ms"])
    turns = med(r["turns"] for r in runs)
    print(f"rounds: {args.rounds} (medians)")
    print(f"openclaw --version (baseline)      {med(base):8.2f} s")
    print(f"one sample (1 tool call, 2 turns)  {wall:8.2f} s   x{wall / med(base):.0f} the baseline")
    print(f"  start to first model request     {first:8.2f} s")
    print(f"  model turn through the proxy     {turn_ms:8.1f} ms")
    print(f"  exec tool call (OpenClaw's time) {exec_ms:8.0f} ms")
    print(f"  model turns per second           {turns / wall:8.3f}")
    if args.json:
        print(json.dumps({"baseline_s": base, "samples": runs}, indent=1))


if __name__ == "__main__":
    asyncio.run(main())
