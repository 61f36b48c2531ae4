"""The checkpoint regression alarm by simulation: detection of a planted drop, false alarms.

Each simulated series is one training run evaluated at ``--checkpoints`` checkpoints
(steps 1000, 2000, …) on the same ``--items`` items, ``--repeats`` samples per item:

* item i has a fixed difficulty b_i ~ N(0, 1.5²) (logit scale);
* the model's ability improves slowly, a_t = a_0 + 0.02·t logits (about +0.4 points of
  accuracy per checkpoint), a_0 set for ≈ 60% accuracy;
* every checkpoint perturbs every item independently, e_{i,t} ~ N(0, 0.3²) (training moves
  some items up and others down: the item-level step-to-step noise); with ``--walk`` the
  perturbations accumulate instead (e_{i,t} = e_{i,t−1} + N(0, 0.3²): an item that moved stays
  moved), which makes consecutive deltas independent, the calibration's own model, while
  fresh perturbations make them negatively correlated and the alarm more conservative;
* each sample is correct with probability sigmoid(a_t − b_i + e_{i,t}).

A *planted* series loses ``--drop`` of accuracy (e.g. 0.05 = 5 points) at a checkpoint drawn
uniformly from the 4th to the 4th-from-last, and stays down (ability lowered by the logit
shift that costs exactly that much accuracy over the item population). A *clean* series has
no drop. ``checkpoint_alarm`` (alpha 0.05, horizon = the series length) is run on every series
through its public API (dicts of per-item repeat scores), and the bench prints:

* detection at the right checkpoint: the first alarm is the planted checkpoint;
* early alarms on planted series (a first alarm before the drop);
* the detection delay distribution (first alarm step − drop step, in checkpoints);
* the false-alarm rate on clean series (any alarm), with its 95% Wilson interval.

    python bench/bench_checkpoint_alarm.py --series 200 --items 500 --drop 0.05 --repeats 8

Power is set by drop / step noise: a drop fires at once when its z is below −(h + k), so the
smallest drop caught at once in 90% of series is ≈ (h + k + 1.28) × the paired SE (printed).
With 500 items a 5-point drop needs the SE of 8 repeats per item (or 1000 items with 4); one
sample per item at this noise level gives an SE of ≈ 2.6 points and cannot see 5 points.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

import numpy as np
from scipy.optimize import brentq
from scipy.special import expit

from nel_assets.engine.stats.checkpoint_alarm import checkpoint_alarm
from nel_assets.engine.stats.intervals import wilson_ci

DRIFT = 0.02  # logits per checkpoint: the run keeps improving slowly
ITEM_NOISE = 0.3  # sd of each item's per-checkpoint perturbation (logits)
DIFFICULTY_SD = 1.5
BASE_ABILITY = 0.55  # ≈ 60% accuracy at the first checkpoint


def _drop_shift(difficulty: np.ndarray, ability: float, drop: float) -> float:
    """The ability decrease (logits) that costs exactly ``drop`` accuracy over these items."""
    acc = float(expit(ability - difficulty).mean())
    if drop <= 0.0:
        return 0.0
    if drop >= acc:
        raise SystemExit(f"--drop {drop} is larger than the accuracy {acc:.3f} it drops from")
    return brentq(lambda s: acc - float(expit(ability - s - difficulty).mean()) - drop, 0.0, 20.0)


def simulate_series(
    rng: np.random.Generator, *, items: int, checkpoints: int, repeats: int, drop: float,
    drop_at: int | None, walk: bool = False,
) -> list[tuple[int, dict[int, list[float]]]]:
    """One run's checkpoints as ``(step, {item: [repeat scores]})``, drop from ``drop_at`` on."""
    difficulty = rng.normal(0.0, DIFFICULTY_SD, items)
    ability = BASE_ABILITY + DRIFT * np.arange(checkpoints)
    if drop_at is not None:
        ability[drop_at:] -= _drop_shift(difficulty, float(ability[drop_at]), drop)
    noise = rng.normal(0, ITEM_NOISE, (checkpoints, items))
    if walk:
        noise = np.cumsum(noise, axis=0)
    logits = ability[:, None] - difficulty[None, :] + noise
    correct = rng.random((checkpoints, items, repeats)) < expit(logits)[:, :, None]
    scores = correct.astype(float).tolist()
    return [(1000 * (t + 1), dict(enumerate(scores[t]))) for t in range(checkpoints)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--series", type=int, default=200, help="planted series, and as many clean")
    ap.add_argument("--items", type=int, default=500)
    ap.add_argument("--drop", type=float, default=0.05, help="planted accuracy drop (0.05 = 5 points)")
    ap.add_argument("--checkpoints", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--walk", action="store_true", help="item perturbations accumulate")
    ap.add_argument("--seed", type=int, default=20240531)
    args = ap.parse_args()
    if args.checkpoints < 8:
        raise SystemExit("--checkpoints must be at least 8 (the drop is planted away from the ends)")
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()

    right = early = missed = 0
    delays: Counter[int] = Counter()
    z_at_drop: list[float] = []
    noise: list[float] = []
    for _ in range(args.series):
        at = int(rng.integers(3, args.checkpoints - 3))
        series = simulate_series(rng, items=args.items, checkpoints=args.checkpoints,
                                 repeats=args.repeats, drop=args.drop, drop_at=at, walk=args.walk)
        res = checkpoint_alarm(series, alpha=args.alpha, horizon=args.checkpoints)
        z_at_drop.append(float(res.rows[at].statistic))
        noise.append(float(res.step_noise))
        drop_step = series[at][0]
        if res.first_alarm_step is None:
            missed += 1
        elif res.first_alarm_step < drop_step:
            early += 1
        else:
            delay = (res.first_alarm_step - drop_step) // 1000
            delays[delay] += 1
            right += delay == 0

    false_alarms = 0
    for _ in range(args.series):
        series = simulate_series(rng, items=args.items, checkpoints=args.checkpoints,
                                 repeats=args.repeats, drop=0.0, drop_at=None, walk=args.walk)
        res = checkpoint_alarm(series, alpha=args.alpha, horizon=args.checkpoints)
        false_alarms += res.first_alarm_step is not None
        noise.append(float(res.step_noise))
    elapsed = time.perf_counter() - t0

    n = args.series
    lo, hi = wilson_ci(false_alarms, n)
    print(f"series: {n} planted + {n} clean; {args.checkpoints} checkpoints, {args.items} items, "
          f"{args.repeats} repeats, {'random-walk' if args.walk else 'fresh'} item noise; drop {args.drop:.3f}; alpha {args.alpha}; seed {args.seed}")
    print(f"threshold h = {res.threshold:.3f} SE, reference k = {res.reference} SE; "
          f"step-to-step noise (RMS paired SE) median {np.median(noise):.4f}")
    mdd = (res.threshold + res.reference + 1.2816) * float(np.median(noise))
    print(f"smallest drop detected at once in 90% of series ≈ (h + k + z_0.9) · noise = {mdd:.3f}")
    print(f"z at the planted drop: median {np.median(z_at_drop):.2f}, "
          f"weakest 5% above {np.percentile(z_at_drop, 95):.2f}")
    print(f"detected at the right checkpoint: {right}/{n} = {right / n:.1%} (target ≥ 90%)")
    print(f"early alarm (before the drop): {early}/{n}; missed (never): {missed}/{n}")
    print("detection delay (checkpoints after the drop: series): "
          + ", ".join(f"{d}: {c}" for d, c in sorted(delays.items())))
    print(f"false alarms on clean series: {false_alarms}/{n} = {false_alarms / n:.1%} "
          f"(95% Wilson {lo:.1%}–{hi:.1%}; target ≤ 5%)")
    print(f"elapsed {elapsed:.1f} s")


if __name__ == "__main__":
    main()
