"""A regression alarm over a training run's checkpoints: paired deltas and a one-sided CUSUM.

A checkpoint series is the same benchmark evaluated at increasing training steps. Two
consecutive checkpoints answered the *same* items, so their difference is measured item by
item (a paired design): the per-item differences cancel item difficulty, and their spread is
the step-to-step noise. The CI of a single run would overstate it (it carries the variance of
item difficulty, which the pairing removes).

For each consecutive pair (previous → current) over the items both scored:

* ``delta`` = mean over shared items of (current item mean − previous item mean); repeats of
  an item are averaged first (the item is the unit, as in the rest of this package) and
  failed samples (NaN/None) are left out.
* ``se`` = sd(differences, ddof=1) / sqrt(n): the paired standard error.
* ``statistic`` = the delta standardised to a N(0, 1) score under "no change": the paired t
  ``delta / se`` mapped through its Student-t(n − 1) CDF and the normal quantile, so the
  calibration below holds with few items too (for n ≥ 30 it is ≈ delta / se). When the
  differences do not vary (every shared item moved by the same amount) the SE is 0 and the
  t is undefined; the score then comes from the exact sign test (all n differences on one
  side has probability 2⁻ⁿ under a symmetric null), so identical checkpoints score 0 and a
  uniform drop of many items still alarms.

The alarm is a one-sided lower CUSUM (Page 1954) on the standardised deltas::

    C_0 = 0,   C_k = max(0, C_{k-1} − z_k − reference),   alarm at k when C_k > threshold

A single large drop fires at once (one z_k below −(threshold + reference)); a slow decline
of several moderate negative deltas accumulates and fires too. After an alarm the sum restarts
at 0, so a later, second drop is reported on its own row; ``first_alarm_step`` is the first.

False-alarm control: the threshold is chosen so that, when nothing drops, the probability of
*any* alarm over a series of ``horizon`` checkpoints (horizon − 1 deltas) is ``alpha``. Under
"no change" each z_k is ≈ N(0, 1); the threshold is found by bisection on the exact run-length
distribution of the CUSUM for i.i.d. N(0, 1) inputs, computed with the Brook & Evans (1972)
Markov-chain discretisation (a 400-cell grid on [0, threshold] plus the atom at 0, propagated
horizon − 1 steps; deterministic, a few ms, cached). A shorter series has a false-alarm
probability ≤ alpha (fewer chances); a series longer than ``horizon`` is calibrated to its own
length instead, so the guarantee always holds for the series given (the threshold then rises
as the series grows, and a marginal earlier alarm can disappear: set ``horizon`` to the
expected number of checkpoints to keep results stable as checkpoints arrive).

Two departures from the i.i.d. model make the real rate lower, not higher: a training run
that improves gives deltas with a positive mean, and consecutive deltas share a checkpoint
(delta_k = m_k − m_{k−1} and delta_{k+1} = m_{k+1} − m_k), which makes them negatively
correlated, so noise cannot accumulate in the sum as fast as i.i.d. noise. The simulation
in ``bench/bench_checkpoint_alarm.py`` checks the rate on item-level simulated series.

The paired test asks whether *these items* got worse beyond item-level noise. A drop shared
by every item alike (a checkpoint-wide wobble) is a real change on these items and is reported
as such.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise
from statistics import NormalDist
from typing import Any

import numpy as np

from benchmarks.errors import NelError

DEFAULT_ALPHA = 0.05
"""Per-series false-alarm probability the threshold is calibrated to."""

DEFAULT_HORIZON = 20
"""Series length (checkpoints) the default threshold is calibrated for."""

DEFAULT_REFERENCE = 1.5
"""CUSUM reference value k (in SE units). A regression that stays (the accuracy steps down at
one checkpoint and stays down) shows in consecutive deltas as ONE large negative delta, for
which the best test is a per-delta threshold; a large k approaches that (at alpha = 0.05 over
20 checkpoints a single delta fires from z < −2.86 with k = 1.5, against −2.78 for a Šidák
per-delta threshold and −3.15 with k = 1), while consecutive moderate drops (> k SE each)
still accumulate. Deltas smaller than k SE are forgotten."""

_GRID = 400
_NORMAL = NormalDist()

ItemScores = Mapping[Hashable, Any]
"""Item id → a score in [0, 1], or a sequence of repeat scores (NaN/None = failed sample)."""


@dataclass(frozen=True)
class Checkpoint:
    """One evaluated checkpoint: its training step and its per-item scores."""

    step: int
    scores: ItemScores


@dataclass(frozen=True)
class CheckpointDelta:
    """The alarm's row for one checkpoint (the first checkpoint has no delta).

    Attributes:
        step: This checkpoint's training step.
        prev_step: The previous checkpoint's step (None for the first).
        n_shared: Items scored at both checkpoints.
        delta: Mean per-item change (current − previous); negative is a drop.
        se: Paired standard error of ``delta`` (None with fewer than 2 shared items).
        statistic: ``delta`` standardised to N(0, 1) under "no change" (see module doc).
        cusum: The lower CUSUM after this checkpoint (before the restart if it alarmed).
        alarm: True when the CUSUM crossed the threshold at this checkpoint.
    """

    step: int
    prev_step: int | None
    n_shared: int | None
    delta: float | None
    se: float | None
    statistic: float | None
    cusum: float
    alarm: bool


@dataclass(frozen=True)
class AlarmResult:
    """The regression alarm over a checkpoint series.

    Attributes:
        rows: One row per checkpoint, in step order.
        first_alarm_step: The step of the first checkpoint that alarmed, or None.
        step_noise: Root mean square of the paired SEs: the typical size of a delta when
            nothing changes (None when no pair has an SE).
        threshold: CUSUM threshold h in SE units.
        reference: CUSUM reference value k in SE units.
        alpha: Per-series false-alarm probability the threshold is calibrated to.
        horizon: Series length (checkpoints) the threshold is calibrated for.
    """

    rows: tuple[CheckpointDelta, ...]
    first_alarm_step: int | None
    step_noise: float | None
    threshold: float
    reference: float
    alpha: float
    horizon: int

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (rows as a list of dicts)."""
        return {
            "rows": [row.__dict__.copy() for row in self.rows],
            "first_alarm_step": self.first_alarm_step,
            "step_noise": self.step_noise,
            "threshold": self.threshold,
            "reference": self.reference,
            "alpha": self.alpha,
            "horizon": self.horizon,
        }


# --------------------------------------------------------------------------- paired deltas


def _item_means(step: int, scores: ItemScores) -> dict[Hashable, float]:
    """Each item's mean over its valid repeats; items with no valid repeat are left out."""
    if not isinstance(scores, Mapping):
        raise NelError(
            f"checkpoint {step}: scores must map item id to a score or a list of repeat "
            f"scores, got {type(scores).__name__}"
        )
    out: dict[Hashable, float] = {}
    for item, value in scores.items():
        values = value if isinstance(value, Iterable) and not isinstance(value, str) else [value]
        valid = []
        for v in values:
            if v is None:
                continue
            try:
                f = float(v)
            except (TypeError, ValueError):
                raise NelError(
                    f"checkpoint {step}, item {item!r}: score {v!r} is not a number in [0, 1]"
                ) from None
            if math.isnan(f):
                continue
            if not 0.0 <= f <= 1.0:
                raise NelError(f"checkpoint {step}, item {item!r}: score {f} is outside [0, 1]")
            valid.append(f)
        if valid:
            out[item] = sum(valid) / len(valid)
    return out


def _standardise(delta: float, sd: float, n: int) -> float:
    """``delta`` as a N(0, 1) score under "no change" (t → normal; sign test when sd = 0)."""
    if sd > 0.0 and n >= 2:
        from scipy.special import ndtri, stdtr

        t = delta / (sd / math.sqrt(n))
        # Map through the t CDF from the side of the sign so extreme tails keep precision.
        tail = float(stdtr(n - 1, -abs(t)))
        z = -float(ndtri(tail)) if tail > 0.0 else 38.0
        return z if t >= 0 else -z
    if delta == 0.0:
        return 0.0
    # No spread: every shared item moved by the same amount. Exact one-sided sign test.
    p = 0.5**n
    z = -_NORMAL.inv_cdf(p) if p > 1e-300 else 38.0
    return z if delta > 0 else -z


def paired_delta(
    previous: Mapping[Hashable, float], current: Mapping[Hashable, float]
) -> tuple[int, float | None, float | None, float | None]:
    """The paired change between two checkpoints' item means.

    Args:
        previous: Item id → mean score at the earlier checkpoint.
        current: Item id → mean score at the later checkpoint.

    Returns:
        ``(n_shared, delta, se, statistic)``: delta, se and statistic are None when no item
        is shared; se is None with a single shared item.
    """
    shared = [item for item in current if item in previous]
    n = len(shared)
    if n == 0:
        return 0, None, None, None
    d = np.fromiter((current[i] - previous[i] for i in shared), dtype=np.float64, count=n)
    delta = float(d.mean())
    sd = float(d.std(ddof=1)) if n >= 2 else 0.0
    # Rounding of equal differences can leave a spread of ~1e-17; that is no spread.
    if sd <= 1e-12 * max(1.0, abs(delta)):
        sd = 0.0
    se = sd / math.sqrt(n) if n >= 2 else None
    return n, delta, se, _standardise(delta, sd, n)


# --------------------------------------------------------------------------- calibration


def _no_alarm_mass(threshold: float, reference: float, steps: int, grid: int = _GRID) -> float:
    """P(the lower CUSUM of i.i.d. N(0, 1) scores stays ≤ threshold for ``steps`` steps).

    Brook & Evans: state 0 is the atom C = 0, states 1..grid are cells of width h/grid on
    (0, h] represented by their midpoints; transitions are exact normal probabilities.
    """
    from scipy.special import ndtr

    h = threshold
    w = h / grid
    mids = (np.arange(grid) + 0.5) * w
    edges = np.arange(grid + 1) * w
    src = np.concatenate(([0.0], mids))[:, None]  # current state values
    # x = −z ~ N(0, 1); next C = src + x − k. Reaching C ≤ 0 is the atom.
    cdf = ndtr(edges[None, :] - src + reference)  # P(next C ≤ edge)
    trans = np.empty((grid + 1, grid + 1))
    trans[:, 0] = cdf[:, 0]
    trans[:, 1:] = np.diff(cdf, axis=1)
    v = np.zeros(grid + 1)
    v[0] = 1.0
    for _ in range(steps):
        v = v @ trans
    return float(v.sum())


@lru_cache(maxsize=64)
def cusum_threshold(alpha: float, n_deltas: int, reference: float = DEFAULT_REFERENCE) -> float:
    """The CUSUM threshold h with P(any alarm within ``n_deltas`` steps | no change) = alpha.

    Args:
        alpha: Per-series false-alarm probability, in (0, 1).
        n_deltas: Number of deltas in the series (checkpoints − 1), ≥ 1.
        reference: The CUSUM reference value k (SE units), ≥ 0.

    Returns:
        The threshold in SE units (bisection to 1e-6 on the Markov-chain run length).
    """
    if not 0.0 < alpha < 1.0:
        raise NelError(f"checkpoint alarm: alpha must be in (0, 1), got {alpha}")
    if n_deltas < 1:
        raise NelError(f"checkpoint alarm: needs at least 1 delta, got {n_deltas}")
    if reference < 0.0:
        raise NelError(f"checkpoint alarm: reference must be ≥ 0, got {reference}")
    lo, hi = 1e-6, 1.0
    while 1.0 - _no_alarm_mass(hi, reference, n_deltas) > alpha:
        lo, hi = hi, hi * 2.0
    while hi - lo > 1e-6:
        mid = 0.5 * (lo + hi)
        if 1.0 - _no_alarm_mass(mid, reference, n_deltas) > alpha:
            lo = mid
        else:
            hi = mid
    return hi


# --------------------------------------------------------------------------- the alarm


def _as_checkpoints(series: Sequence[Checkpoint | tuple[int, ItemScores]]) -> list[Checkpoint]:
    out = []
    for entry in series:
        if isinstance(entry, Checkpoint):
            out.append(entry)
            continue
        try:
            step, scores = entry
        except (TypeError, ValueError):
            raise NelError(
                f"checkpoint alarm: each checkpoint must be (step, scores), got {entry!r:.60}"
            ) from None
        out.append(Checkpoint(step, scores))
    return out


def checkpoint_alarm(
    series: Sequence[Checkpoint | tuple[int, ItemScores]],
    *,
    alpha: float = DEFAULT_ALPHA,
    horizon: int = DEFAULT_HORIZON,
    reference: float = DEFAULT_REFERENCE,
) -> AlarmResult:
    """Paired deltas between consecutive checkpoints and the CUSUM regression alarm.

    Args:
        series: Checkpoints in increasing step order, each a ``Checkpoint`` or a
            ``(step, scores)`` pair; scores map item id → score in [0, 1] or a list of repeat
            scores (NaN/None = failed sample, left out).
        alpha: Per-series false-alarm probability when nothing drops.
        horizon: Series length (checkpoints) the threshold is calibrated for; a longer series
            is calibrated to its own length (see the module docstring).
        reference: CUSUM reference value k in SE units.

    Returns:
        An ``AlarmResult`` with one row per checkpoint and the first alarm step.

    Raises:
        NelError: fewer than 2 checkpoints, steps not strictly increasing, two consecutive
            checkpoints sharing no scored item, or a score outside [0, 1].
    """
    points = _as_checkpoints(series)
    if len(points) < 2:
        raise NelError(
            f"checkpoint alarm needs at least 2 checkpoints to compare, got {len(points)}"
        )
    if horizon < 2:
        raise NelError(f"checkpoint alarm: horizon must be at least 2 checkpoints, got {horizon}")
    for p in points:
        if isinstance(p.step, bool) or not isinstance(p.step, int | np.integer):
            raise NelError(f"checkpoint alarm: step must be an integer, got {p.step!r}")
    for a, b in pairwise(points):
        if b.step <= a.step:
            raise NelError(
                f"checkpoint steps must increase: step {b.step} comes after step {a.step}; "
                "order the series by step (and drop duplicates)"
            )
    threshold = cusum_threshold(alpha, max(horizon, len(points)) - 1, reference)
    means = [_item_means(p.step, p.scores) for p in points]
    rows = [CheckpointDelta(int(points[0].step), None, None, None, None, None, 0.0, False)]
    cusum = 0.0
    first: int | None = None
    ses: list[float] = []
    for i in range(1, len(points)):
        n, delta, se, z = paired_delta(means[i - 1], means[i])
        if n == 0 or z is None:
            raise NelError(
                f"checkpoints {points[i - 1].step} and {points[i].step} share no scored item; "
                "evaluate the same items at every checkpoint"
            )
        cusum = max(0.0, cusum - z - reference)
        alarm = cusum > threshold
        if alarm and first is None:
            first = int(points[i].step)
        if se is not None:
            ses.append(se)
        rows.append(
            CheckpointDelta(int(points[i].step), int(points[i - 1].step), n, delta, se, z,
                            cusum, alarm)
        )
        if alarm:
            cusum = 0.0  # restart: a later drop is judged on its own
    noise = math.sqrt(sum(s * s for s in ses) / len(ses)) if ses else None
    return AlarmResult(tuple(rows), first, noise, threshold, reference, alpha, horizon)
