"""Extraction scales linearly: time(2n) / time(n) for every scorer on adversarial replies.

For each scorer, every adversarial shape (`bench/support/adversarial_text.py`, balanced
nests included) is scored at n and at 2n characters, in the same process, best of
`--repeats`; the ratio of the totals and the worst single-shape ratio are printed. Linear
code gives about 2, quadratic about 4.

    python bench/bench_extraction_scaling.py --size 250000
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.support.adversarial_text import SCORERS, SHAPES, adversarial  # noqa: E402

# Below this a shape is too fast for its ratio to mean anything (timer noise dominates).
MIN_SECONDS = 0.02


def _best(fn: object, text: str, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(text)  # type: ignore[operator]
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    """Print one line per scorer: total at n, total at 2n, ratio, worst shape ratio."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--size", type=int, default=250_000, help="n, characters")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--scorer", action="append", help="only these scorers")
    args = ap.parse_args()
    n = args.size
    print(f"{'scorer':22s} {'t(n) s':>8s} {'t(2n) s':>8s} {'ratio':>6s}  worst shape")
    worst_overall = 0.0
    for name in args.scorer or sorted(SCORERS):
        fn = SCORERS[name]
        t1 = t2 = 0.0
        worst = (0.0, "-")
        for shape in SHAPES:
            a = _best(fn, adversarial(shape, n), args.repeats)
            b = _best(fn, adversarial(shape, 2 * n), args.repeats)
            t1, t2 = t1 + a, t2 + b
            if a >= MIN_SECONDS:
                worst = max(worst, (b / a, shape))
        ratio = t2 / t1 if t1 else float("nan")
        worst_overall = max(worst_overall, worst[0])
        print(f"{name:22s} {t1:8.3f} {t2:8.3f} {ratio:6.2f}  {worst[1]} {worst[0]:.2f}")
    print(f"worst single-shape ratio: {worst_overall:.2f} (linear ~2, quadratic ~4)")


if __name__ == "__main__":
    main()
