"""Drop thresholds are in score units: refuse one written in points (``3`` for 3 points).

Shared by ``nel compare -t``, gate policies and ``compare_runs``. No Dagster import.
"""

from __future__ import annotations

from benchmarks.errors import NelError

__all__ = ["check_drop_units"]


def check_drop_units(value: float | None, what: str = "max_drop") -> None:
    """Refuse a drop threshold that was written in points instead of score units.

    Scores are per-item means on a 0–1 scale, so a drop above 1 is impossible to exceed and
    almost certainly meant as points (``3`` for "3 points" = ``0.03``).

    Raises:
        NelError: When ``value > 1`` or negative.
    """
    if value is None:
        return
    if value < 0:
        raise NelError(f"{what} must be ≥ 0 (got {value})")
    if value > 1:
        raise NelError(f"{what}={value:g} is in score units (0.01 = 1 point of accuracy, "
                       f"scores are 0–1); did you mean {value / 100:g}?")
