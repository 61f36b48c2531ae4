"""Code-execution throughput of nel's `local` and `docker` sandboxes, in one command.

Every HumanEval problem's canonical solution is run as a scorer runs it (prompt +
canonical solution + tests + `check(entry_point)`, as `python3 program.py` in a fresh
sandbox that is stopped afterwards), `--repeats` times each, by four runners at the same
concurrency:

- bare:        `python3 program.py` as a plain subprocess (the floor: no isolation at all)
- local:       nel's `local` sandbox (bubblewrap), one sandbox per execution
- docker:      nel's `docker` sandbox, one sandbox per execution on warm, wiped containers
- docker-run:  one `docker run --rm -i --network none IMAGE python3 -` per execution, the
               program on stdin. NeMo Evaluator 0.3.0 starts and removes a container per
               sandbox (`docker run -d`, then `docker cp`, `docker exec`, `docker rm -f`),
               so this single call is the cheapest form of its approach: the docker ratio
               is a conservative one. It runs `--baseline-repeats` times (default 1).

Rounds alternate the runners' order; the figures are medians over rounds (executions/s)
and p50/p95 over every execution's latency (sandbox start to stop). Every execution must
pass (exit 0): a failure aborts the benchmark.

    NEL_DATA_DIR=../shared/datasets python bench/bench_sandboxes.py            # 164 x 10
    NEL_DATA_DIR=../shared/datasets python bench/bench_sandboxes.py --rounds 3 --repeats 2

Needs bwrap and the project's Docker engine (started here with deploy/docker/start_engine.sh
if DOCKER_HOST is not set).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nel_resources.config import SandboxConfig  # noqa: E402
from nel_resources.sandboxes import SandboxFactory, SandboxSpec, make_factory, running  # noqa: E402
from nel_resources.sandboxes.local import host_python  # noqa: E402

IMAGE = "localdebian:bookworm-py"
Runner = Callable[[str], Awaitable[None]]


def programs(data_dir: Path) -> list[str]:
    """The 164 HumanEval programs with their canonical solutions."""
    path = data_dir / "humaneval" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt") as f:
        rows = [json.loads(line) for line in f]
    return [f"{r['prompt']}{r['canonical_solution']}\n\n{r['test']}\n\ncheck({r['entry_point']})\n"
            for r in rows]


def ensure_docker() -> None:
    """Export DOCKER_HOST, starting the project's engine if it is not set."""
    if os.environ.get("DOCKER_HOST"):
        return
    out = subprocess.run(["bash", str(REPO / "deploy" / "docker" / "start_engine.sh")],
                         capture_output=True, text=True, check=True, timeout=1200,
                         env={**os.environ, "NEL_DOCKER_PY_BASE": "1"})
    for line in out.stdout.splitlines():
        if line.startswith("export DOCKER_HOST="):
            os.environ["DOCKER_HOST"] = line.split("=", 1)[1]


def _fail(what: str, code: int | None, err: bytes | str) -> None:
    text = err.decode(errors="replace") if isinstance(err, bytes) else err
    raise SystemExit(f"{what} failed (exit {code}): {text.strip()[-500:]}")


def bare_runner(workdir: Path) -> Runner:
    python = os.path.join(host_python().bin_dir, "python3")
    counter = iter(range(1 << 62))

    async def one(program: str) -> None:
        path = workdir / f"p{next(counter)}.py"
        path.write_text(program)
        proc = await asyncio.create_subprocess_exec(
            python, str(path), cwd=workdir, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        _, err = await proc.communicate()
        path.unlink()
        if proc.returncode != 0:
            _fail("bare", proc.returncode, err)
    return one


def sandbox_runner(factory: SandboxFactory, name: str) -> Runner:
    async def one(program: str) -> None:
        async with running(factory.create(SandboxSpec(files={"program.py": program}))) as sb:
            r = await sb.exec(["python3", "program.py"], timeout_sec=60)
        if not r.ok:
            _fail(name, r.return_code, f"{r.stopped} {r.stderr}")
    return one


def docker_run_runner() -> Runner:
    async def one(program: str) -> None:
        proc = await asyncio.create_subprocess_exec(
            "/usr/bin/docker", "run", "--rm", "-i", "--network", "none", IMAGE, "python3", "-",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        _, err = await proc.communicate(program.encode())
        if proc.returncode != 0:
            _fail("docker-run", proc.returncode, err)
    return one


async def timed(runner: Runner, work: list[str], concurrency: int) -> tuple[float, list[float]]:
    """Run every program with `concurrency` workers: (seconds, per-execution latencies)."""
    it = iter(work)
    lat: list[float] = []

    async def worker() -> None:
        for program in it:
            t = time.perf_counter()
            await runner(program)
            lat.append(time.perf_counter() - t)
    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - t0, lat


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


async def main_async(args: argparse.Namespace) -> None:
    progs = programs(Path(args.data_dir))[: args.problems]
    ensure_docker()
    conc = args.concurrency
    local = make_factory(SandboxConfig(type="local", concurrency=conc))
    docker = make_factory(SandboxConfig(type="docker", image=IMAGE, concurrency=conc))
    with tempfile.TemporaryDirectory(prefix="nel-bench-bare-") as tmp:
        runners: dict[str, tuple[Runner, int]] = {
            "bare": (bare_runner(Path(tmp)), args.repeats),
            "local": (sandbox_runner(local, "local"), args.repeats),
            "docker": (sandbox_runner(docker, "docker"), args.repeats),
            "docker-run": (docker_run_runner(), args.baseline_repeats),
        }
        # one warm-up execution each (imports, page cache, first container)
        for runner, _ in runners.values():
            await runner(progs[0])
        rates: dict[str, list[float]] = {k: [] for k in runners}
        lats: dict[str, list[float]] = {k: [] for k in runners}
        names = list(runners)
        try:
            for rnd in range(args.rounds):
                order = names[rnd % len(names):] + names[: rnd % len(names)]
                for name in order:
                    runner, reps = runners[name]
                    work = progs * reps
                    secs, lat = await timed(runner, work, conc)
                    rates[name].append(len(work) / secs)
                    lats[name] += lat
                    print(f"round {rnd + 1} {name:<10} {len(work):>5} executions "
                          f"{secs:7.1f} s  {len(work) / secs:6.1f}/s", flush=True)
        finally:
            await local.aclose()
            await docker.aclose()
    print(f"\n{len(progs)} HumanEval problems, canonical solutions, concurrency {conc}, "
          f"{args.rounds} rounds, {os.cpu_count()} CPUs")
    print(f"{'runner':<11}{'executions':>11}{'exec/s':>9}{'p50 ms':>9}{'p95 ms':>9}")
    med = {k: statistics.median(v) for k, v in rates.items()}
    for name in names:
        n = len(progs) * runners[name][1]
        print(f"{name:<11}{n:>11}{med[name]:>9.1f}{pct(lats[name], .5) * 1e3:>9.0f}"
              f"{pct(lats[name], .95) * 1e3:>9.0f}")
    print(f"\nlocal / bare        = {med['local'] / med['bare']:.2f}x   (target >= 0.5x)")
    print(f"docker / docker-run = {med['docker'] / med['docker-run']:.2f}x   (target >= 3x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=os.environ.get("NEL_DATA_DIR", str(REPO.parent / "shared" / "datasets")))
    ap.add_argument("--problems", type=int, default=164)
    ap.add_argument("--repeats", type=int, default=10, help="executions per problem per round")
    ap.add_argument("--baseline-repeats", type=int, default=1,
                    help="executions per problem per round for docker-run (slow)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=os.cpu_count() or 2)
    asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    main()
