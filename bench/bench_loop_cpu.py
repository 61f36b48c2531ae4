"""CPU per sample of the evaluation loop alone (`run_shard`), in process.

What `nel eval run` spends per sample between its first request and its last row: seed
lookup, the model client's request path (raw HTTP transport), response parsing, the
benchmark's scoring, row building, journaling and progress accounting. Dagster, Parquet
and exports are not in it (bench_eval_throughput.py measures the whole command).

Runs GSM8K x `--repeats` at concurrency 64 against the reference server (answering at
once, in its own process) and prints this process's CPU (user+sys) per sample, the
samples/s and the mean reward, as medians over `--rounds`.

    NEL_DATA_DIR=../shared/datasets python bench/bench_loop_cpu.py --repeats 8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import get_benchmark  # noqa: E402
from nel_assets.engine.evaluation.journal import Journal  # noqa: E402
from nel_assets.engine.evaluation.loop import ShardSpec, run_shard  # noqa: E402
from nel_resources.model_client import ModelClient  # noqa: E402
from nel_resources.reference_server import start_reference_server  # noqa: E402


async def one_round(url: str, repeats: int, concurrency: int) -> tuple[float, float, list[dict]]:
    env = get_benchmark("gsm8k")
    spec = ShardSpec(benchmark="gsm8k", model="m", model_id="m", shard=0,
                     indices=list(range(len(env))), repeats=repeats, run_id="bench")
    with tempfile.TemporaryDirectory() as d:
        journal = Journal(Path(d) / "journal.jsonl")
        done = [0]

        def progress(n: int) -> None:
            done[0] += n

        async with ModelClient(url, "m", max_concurrent=concurrency) as client:
            await env.seed(0)  # dataset load outside the timed part
            c0, t0 = time.process_time(), time.perf_counter()
            rows = await run_shard(env, client, spec, journal=journal, on_progress=progress)
            return time.process_time() - c0, time.perf_counter() - t0, rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dump", help="write the rows of the last round (minus timings) as JSON here")
    a = ap.parse_args()
    proc, url = start_reference_server(default_content="Step by step.\n#### 42")
    res = []
    try:
        for _ in range(a.rounds):
            cpu, wall, rows = asyncio.run(one_round(url, a.repeats, a.concurrency))
            res.append((cpu, wall, len(rows), sum(r["reward"] or 0 for r in rows) / len(rows)))
    finally:
        proc.stop()
    if a.dump:
        timing = {"seed_ms", "model_ms", "verify_ms", "total_ms", "timestamp"}
        Path(a.dump).write_text(json.dumps([{k: v for k, v in r.items() if k not in timing}
                                            for r in rows], sort_keys=True))
    n = res[0][2]
    print(json.dumps({
        "samples": n,
        "loop_cpu_us_per_sample": round(statistics.median(1e6 * c / n for c, _, _, _ in res), 1),
        "loop_samples_per_s": round(statistics.median(n / w for _, w, _, _ in res), 1),
        "mean_reward": res[0][3],
    }, indent=2))


if __name__ == "__main__":
    main()
