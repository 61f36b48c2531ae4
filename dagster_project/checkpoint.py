"""`<out>/checkpoint.json`: the run-level record of which (benchmark, model) pairs completed
and which failed, and why (the shape follows NeMo Evaluator's run checkpoint, whose
`failed_benchmarks` a suite runner reads to decide what to rerun)."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class BenchFailure:
    """One (benchmark, model) that did not produce a usable result in this run."""

    benchmark: str
    model: str
    reason: str
    stage: str  # plan | shard | budget | bundle | scores | comparison | run

    def as_dict(self) -> dict[str, str]:
        # "error" is NeMo Evaluator's key for the reason; "reason" stays for nel's readers.
        return {"name": self.benchmark, "model": self.model, "error": self.reason,
                "reason": self.reason, "stage": self.stage}


def keyed(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Entries keyed the way NeMo Evaluator keys its checkpoint: by benchmark name, or by
    ``name@model`` when the run has the benchmark on more than one model (``#2``, ``#3`` …
    only if the same pair is recorded twice, e.g. a shard and then its comparison)."""
    names = [e["name"] for e in entries]
    out: dict[str, dict[str, Any]] = {}
    for e in entries:
        key = e["name"] if names.count(e["name"]) == 1 else f"{e['name']}@{e['model']}"
        base, i = key, 1
        while key in out:
            i += 1
            key = f"{base}#{i}"
        out[key] = e
    return out


def iso(ts: float) -> str:
    """A UTC ISO-8601 timestamp."""
    return _dt.datetime.fromtimestamp(ts, tz=_dt.UTC).isoformat(timespec="seconds")


def checkpoint_doc(*, started_at: float, finished_at: float, completed: list[dict[str, Any]],
                   failed: list[BenchFailure], gates: dict[str, dict[str, Any]], exit_status: int,
                   log: Path) -> dict[str, Any]:
    """The checkpoint document of one run."""
    return {
        "started_at": iso(started_at),
        "finished_at": iso(finished_at),
        "status": "failed" if failed else "completed",
        "exit_status": exit_status,
        "completed_benchmarks": keyed(completed),
        "failed_benchmarks": keyed([f.as_dict() for f in failed]),
        "gates": {m: g.get("decision") for m, g in sorted(gates.items())},
        "log": str(log),
    }


def checkpoint_path(out: Path) -> Path:
    """Where a run writing to `out` keeps its checkpoint."""
    return out / "checkpoint.json"
