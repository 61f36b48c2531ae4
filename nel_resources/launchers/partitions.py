"""What a cluster launcher is given (one job per stale partition) and what it hands back.

No Dagster here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PartitionJob:
    """One (benchmark, model, shard) partition to evaluate elsewhere."""

    benchmark: str
    model: str
    shard: int
    total: int
    config_path: str  # the run's effective config (`<out>/nel-config.yaml`)
    base_url: str | None = None  # the endpoint of a service the runner launched

    @property
    def label(self) -> str:
        """`bench model shard i` (log lines, failures)."""
        return f"{self.benchmark} {self.model} shard {self.shard}"


@dataclass
class PartitionResult:
    """How one launched partition ended: `outcome` (the worker's `_launch.json`) or `error`."""

    job: PartitionJob
    outcome: dict[str, Any] | None = None
    error: str | None = None  # one line
    details: str = field(default="", repr=False)  # the worker's log tail, for the run log

    @property
    def ok(self) -> bool:
        """The worker committed its shard."""
        return self.error is None and self.outcome is not None


def last_line(text: str, default: str = "(no output)") -> str:
    """The last non-empty line of a log (a worker's one-line error)."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else default


#: The line a shard worker prints last (nel_assets.engine.evaluation.remote_shard): its outcome.
OUTCOME_PREFIX = "NEL_SHARD_OUTCOME "


def read_outcome(stdout: str) -> dict[str, Any] | None:
    """The outcome a worker printed (its last OUTCOME_PREFIX line), or None."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(OUTCOME_PREFIX):
            try:
                doc = json.loads(line[len(OUTCOME_PREFIX):])
            except json.JSONDecodeError:
                return None
            return doc if isinstance(doc, dict) else None
    return None
