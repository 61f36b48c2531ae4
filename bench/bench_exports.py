"""What writing NeMo Evaluator 0.3.0's files costs next to the store write of the same rows.

`write_exports` turns a (benchmark, model)'s rows into `eval-*.json`, `results.jsonl`,
`trajectories.jsonl` (an ATIF document per step in both), `runtime_stats.json` and
`failure_analysis.json`. The baseline, run in the same command and alternated round by round,
is the Parquet write of the same table (`write_parquet_atomic`, what a shard commit costs).
Prints the medians and their ratio.

    python bench/bench_exports.py --rows 40000 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from nel_assets.engine.nemo import nemo_format as nf
from nel_assets.engine.nemo.exports import write_exports
from nel_assets.engine.results.bundle import build_bundle
from nel_resources.storage.schema import rows_to_table
from nel_resources.storage.store import write_parquet_atomic


def _rows(n: int, repeats: int = 4) -> list[dict]:
    prompt = "What is 2 + 2? Show your work. " * 10
    msgs = json.dumps([{"role": "system", "content": "Be brief."}, {"role": "user", "content": prompt}])
    return [{"run_id": "r", "benchmark": "b", "model": "m", "model_id": "m", "shard": 0,
             "problem_idx": i // repeats, "repeat": i % repeats, "sample_id": f"{i // repeats}:{i % repeats}",
             "category": f"c{i % 5}", "prompt": prompt, "system": "Be brief.", "messages": msgs,
             "expected": "4", "response": "Two plus two is four. The answer is 4.", "reward": float(i % 3 == 0),
             "extracted": "4", "method": "last_number",
             "details": json.dumps({"method": "last_number", "correct": i % 3 == 0}),
             "metadata": json.dumps({"idx": i // repeats, "category": f"c{i % 5}"}),
             "finish_reason": "stop", "prompt_tokens": 60, "completion_tokens": 12, "seed_ms": 0.1,
             "model_ms": 10.0 + i % 7, "verify_ms": 0.2, "total_ms": 10.5 + i % 7, "attempts": 1,
             "timestamp": 1.7e9 + i / 100} for i in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=40_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    table = rows_to_table(_rows(args.rows))
    bundle = build_bundle(table, benchmark="b", model="m")
    config = nf.run_config("b", model_id="m", base_url=None, repeats=4, max_problems=None, shuffle=None)
    base: list[float] = []
    files: list[float] = []
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            write_parquet_atomic(Path(d) / "part-0.parquet", table)
            base.append(time.perf_counter() - t0)
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            write_exports(Path(d), table, bundle, config=config)
            files.append(time.perf_counter() - t0)
    b, f = statistics.median(base), statistics.median(files)
    print(f"rows={args.rows} rounds={args.rounds}")
    print(f"parquet write (baseline)   median {b * 1000:8.1f} ms")
    print(f"NeMo Evaluator files       median {f * 1000:8.1f} ms   ({f / args.rows * 1e6:.1f} us/row)")
    print(f"ratio files/parquet        {f / b:.1f}x")


if __name__ == "__main__":
    main()
