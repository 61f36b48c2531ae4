"""What one sample of the `harbor` solver costs, and where the time goes, in one command.

Each round, in a fresh `docker` sandbox of the tmux image the harbor e2e test builds
(`nel-test/harbor-tmux:1`; build it with that test or `--image`):

* baseline: 20 `true` commands run straight through nel's sandbox (`sandbox.exec`), the
  mean latency of one;
* one `HarborSolver` sample: Harbor 0.24.0's terminus-2 against an instant local reference
  server scripted for 4 turns (two commands, then task complete twice), its model calls
  through nel's capture proxy, its commands through the sandbox bridge. Reported: the
  sample's wall time, turns per second, the agent's sandbox commands (count, mean latency
  through the bridge) and their ratio to the baseline.

Prints the medians over `--rounds`; `--json` adds the raw figures. Needs the Docker engine
(deploy/docker/start_engine.sh; DOCKER_HOST) and Harbor (`make peers`).

    DOCKER_HOST=unix:///var/lib/nel-docker/docker.sock python bench/bench_harbor.py --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks._types import SeedResult  # noqa: E402
from nel_assets.engine.solvers.base import SolveContext  # noqa: E402
from nel_assets.engine.solvers.harbor_agent import HarborSolver  # noqa: E402
from nel_resources.config import SandboxConfig, ServiceConfig  # noqa: E402
from nel_resources.reference_server import start_reference_server  # noqa: E402
from nel_resources.sandboxes.base import SandboxSpec  # noqa: E402
from nel_resources.sandboxes.docker import build  # noqa: E402


def _turn(analysis: str, *keys: str, complete: bool = False) -> dict[str, str]:
    return {"content": json.dumps({"analysis": analysis, "plan": analysis, "task_complete": complete,
                                   "commands": [{"keystrokes": k, "duration": 0.1} for k in keys]})}


SCRIPT = [{"match": "Task greet", "turns": [
    _turn("write", "echo hello > /app/greeting.txt\n"), _turn("check", "cat /app/greeting.txt\n"),
    _turn("done", complete=True), _turn("confirmed", complete=True)]}]


async def one_round(solver: HarborSolver, image: str) -> dict[str, Any]:
    factory = build(SandboxConfig(type="docker", image=image, concurrency=1))
    try:
        sandbox = factory.create(SandboxSpec(image=image, workdir="/app"))
        await sandbox.start()
        t0 = time.perf_counter()
        for _ in range(20):
            await sandbox.exec("true", 30)
        direct_ms = (time.perf_counter() - t0) * 1000 / 20
        task = SeedResult(prompt="Task greet: write the word hello into /app/greeting.txt.",
                          expected_answer="", metadata={})
        t0 = time.perf_counter()
        res = await solver.solve(task, SolveContext("0:0", sandbox=sandbox))
        wall = time.perf_counter() - t0
        await sandbox.stop()
    finally:
        await factory.aclose()
    if res.error:
        raise SystemExit(f"the sample failed: {res.error}")
    d = res.scoring_details
    bridged_ms = d["sandbox_command_ms"] / max(1, d["sandbox_commands"])
    return {"wall_s": wall, "turns": res.turns, "turns_per_s": res.turns / wall,
            "commands": d["sandbox_commands"], "bridged_ms": bridged_ms, "direct_ms": direct_ms,
            "bridge_ratio": bridged_ms / direct_ms}


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    proc, url = start_reference_server(tool_script=SCRIPT, match_conversation=True)
    service = ServiceConfig(type="api", url=f"{url}/chat/completions", model="ref")
    solver = HarborSolver(service, agent="terminus-2", agent_kwargs={"max_turns": 8})
    try:
        await solver.prepare()
        return [await one_round(solver, args.image) for _ in range(args.rounds)]
    finally:
        await solver.close_tools()
        proc.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--image", default="nel-test/harbor-tmux:1")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    rounds = asyncio.run(main_async(args))
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    print(f"harbor solver, terminus-2, {args.rounds} rounds (medians):")
    print(f"  sample wall time      {med['wall_s']:.2f} s for {med['turns']:.0f} turns "
          f"({med['turns_per_s']:.2f} turns/s)")
    print(f"  sandbox commands      {med['commands']:.0f} per sample, {med['bridged_ms']:.1f} ms each "
          "through the bridge")
    print(f"  baseline              {med['direct_ms']:.1f} ms per `true` straight through sandbox.exec")
    per_round = ", ".join(f"{r['bridge_ratio']:.2f}" for r in rounds)
    print(f"  bridge / baseline     {med['bridged_ms'] / med['direct_ms']:.2f}x (medians; per round: "
          f"{per_round})")
    if args.json:
        print(json.dumps({"rounds": rounds, "median": med}, indent=1))


if __name__ == "__main__":
    main()
