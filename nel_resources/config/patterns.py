"""Checks of the regexes a config may hold (`checkpoints.step_pattern`), shared by the config
schema (which refuses a bad one in one line) and the code that applies them."""

from __future__ import annotations

import re


def check_step_pattern(pattern: str) -> re.Pattern[str]:
    """`checkpoints.step_pattern` compiled; it must be a regex with exactly one group.

    Raises:
        ValueError: not a regex, or not one capturing group (one line naming the fix).
    """
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"step_pattern '{pattern}' is not a valid regex ({exc}); "
                         r"write one such as 'ep(\d+)'") from None
    if rx.groups != 1:
        raise ValueError(f"step_pattern '{pattern}' has {rx.groups} groups; it needs exactly one, "
                         r"around the step number (e.g. 'ep(\d+)')")
    return rx
