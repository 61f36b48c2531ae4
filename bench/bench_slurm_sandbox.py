"""What a `slurm` sandbox costs per command, next to running the same program directly.

In one command, alternating rounds: (a) the bare floor, `python3 -c <program>` as a plain
subprocess; (b) one `srun` step of an already started slurm sandbox (the per-exec cost);
(c) a whole sandbox: `salloc` + one step + `scancel` (the per-problem cost when every
problem gets its own sandbox). Medians over `--rounds`, and (b)/(a), (c)/(a) ratios.
Needs the cluster: `bash deploy/slurm/start_slurm.sh` (it prints the SLURM_CONF to export).

    SLURM_CONF=/var/lib/nel-slurm/slurm.conf python bench/bench_slurm_sandbox.py --rounds 20
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nel_resources.config.benchmarks import SandboxConfig  # noqa: E402
from nel_resources.sandboxes.base import SandboxSpec, running  # noqa: E402
from nel_resources.sandboxes.slurm import SlurmSandboxFactory  # noqa: E402

PROGRAM = "def add(a, b):\n    return a + b\n\nassert add(2, 3) == 5\nprint('ok')\n"


async def _bare() -> float:
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", PROGRAM,
                                                stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    assert out == b"ok\n"
    return time.perf_counter() - t0


async def main(rounds: int) -> None:
    factory = SlurmSandboxFactory(SandboxConfig(type="slurm", cpus=1, timeout=600))
    bare: list[float] = []
    step: list[float] = []
    whole: list[float] = []
    async with running(factory.create(SandboxSpec(files={"p.py": PROGRAM}))) as warm:
        for _ in range(rounds):
            bare.append(await _bare())
            t0 = time.perf_counter()
            r = await warm.exec(["python3", "p.py"])
            step.append(time.perf_counter() - t0)
            assert r.ok and r.stdout == "ok\n", r
            t0 = time.perf_counter()
            async with running(factory.create(SandboxSpec(files={"p.py": PROGRAM}))) as fresh:
                assert (await fresh.exec(["python3", "p.py"])).ok
            whole.append(time.perf_counter() - t0)
    b, s, w = (statistics.median(x) for x in (bare, step, whole))
    print(f"rounds={rounds}  median seconds per command")
    print(f"  bare subprocess          {b:.3f}")
    print(f"  srun step in a sandbox   {s:.3f}  ({s / b:.1f}x bare)")
    print(f"  salloc + step + scancel  {w:.3f}  ({w / b:.1f}x bare)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    asyncio.run(main(ap.parse_args().rounds))
