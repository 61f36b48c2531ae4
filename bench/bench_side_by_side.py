"""Time the side-by-side page of two large runs (issue 31: <= 5 s for 100,000 items each).

Two synthetic runs are stored in nel's real on-disk format (shard Parquet committed through
`ResultStore.write_shard`; prompts of 100 random words, responses of 50, 8 categories):
the baseline right on ~70% of items, the candidate differing on ~`--flip-rate` of them. Then
the page is generated `--rounds` times exactly as `nel compare --side-by-side` does it (DuckDB
query over the Parquet + HTML), and the median wall time, the flips counted and listed, and
the page size are printed as JSON.

    PYTHONPATH=$PWD python bench/bench_side_by_side.py --items 100000 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.support.synthetic_runs import write_run  # noqa: E402
from nel_assets.engine.reports.side_by_side import DEFAULT_LIMIT, write_side_by_side  # noqa: E402
from nel_resources.storage.store import ResultStore  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=100_000)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--flip-rate", type=float, default=0.1, help="share of items the candidate answers differently")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--limit", type=int, default=DEFAULT_LIMIT)
    ap.add_argument("--max-seconds", type=float, default=5.0, help="exit 1 when the median is above this")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    base = (rng.random(args.items) < 0.7).astype(float)
    cand = np.where(rng.random(args.items) < args.flip_rate, 1.0 - base, base)
    # Texts of random words (not one repeated phrase) so Parquet compresses them as it would
    # real prompts and answers: ~100 words per prompt, ~50 per response, each side its own.
    vocab = np.array([f"w{i:04d}" for i in range(5000)])
    prompts = [" ".join(r) for r in vocab[rng.integers(0, len(vocab), (args.items, 100))]]
    texts = {side: [" ".join(r) for r in vocab[rng.integers(0, len(vocab), (args.items, 50))]]
             for side in ("base", "cand")}
    with tempfile.TemporaryDirectory(prefix="nel-sbs-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        write_run(root, "synth", "base", base, shards=args.shards, prompts=prompts, responses=texts["base"])
        write_run(root, "synth", "cand", cand, shards=args.shards, prompts=prompts, responses=texts["cand"])
        build_s = time.perf_counter() - t0
        store = ResultStore(root)
        pairs = [("synth", store.committed_shard_files("synth", "base"), store.committed_shard_files("synth", "cand"))]
        page = root / "side_by_side.html"
        times = []
        for _ in range(args.rounds):
            t = time.perf_counter()
            flips = write_side_by_side(page, pairs, baseline="base", candidate="cand", limit=args.limit)
            times.append(time.perf_counter() - t)
        median = statistics.median(times)
        print(json.dumps({
            "items_per_run": args.items, "shards": args.shards, "store_build_s": round(build_s, 2),
            "rounds_s": [round(x, 3) for x in times], "median_s": round(median, 3),
            "flips_counted": flips[0].counts, "flips_listed": len(flips[0].rows),
            "page_bytes": page.stat().st_size, "parquet_bytes": sum(p.stat().st_size for p in root.rglob("*.parquet")),
        }, indent=2))
    return 0 if median <= args.max_seconds else 1


if __name__ == "__main__":
    raise SystemExit(main())
