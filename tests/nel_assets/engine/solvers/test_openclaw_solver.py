"""`OpenClawSolver` itself, with the real CLI and the reference server: a run whose model
hangs past the timeout is killed whole. OpenClaw starts its agent worker in a session of its
own, so this checks, while the proxy still holds the hung request, that no process of the
sample is left (the end-to-end runs are in tests/dagster_project/test_openclaw_e2e.py)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from benchmarks._types import SeedResult
from nel_assets.engine.solvers.base import SolveContext
from nel_assets.engine.solvers.openclaw import OpenClawSolver
from nel_resources.config import ServiceConfig
from nel_resources.reference_server import start_reference_server
from tests.support.agents import openclaw_bin


def _homes_in_use(root: Path) -> list[int]:
    """Processes whose HOME lies under `root`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(e.startswith(b"HOME=" + str(root).encode()) for e in env):
            found.append(int(pid))
    return found


def test_a_hung_run_is_a_timeout_and_leaves_no_process() -> None:
    proc, url = start_reference_server(hang_rate=1.0, fail_attempts=1000)
    solver = OpenClawSolver(ServiceConfig(type="api", url=url, model="ref"),
                            openclaw_bin=str(openclaw_bin()), thinking="off", timeout=5)

    async def go() -> None:
        await solver.prepare()
        try:
            seed = SeedResult(prompt="What is 2+2?", expected_answer="4")
            res = await solver.solve(seed, SolveContext("0:0"))
            assert res.failure_category == "timeout" and res.error is not None
            assert "within 5s" in res.error and res.response == ""
            # the proxy and the hung upstream are still there: a survivor would be, too
            assert solver._root is not None and _homes_in_use(solver._root) == []
        finally:
            await solver.close_tools()

    try:
        asyncio.run(go())
    finally:
        proc.stop()
