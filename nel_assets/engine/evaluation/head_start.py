"""Shard outcomes computed before the Dagster run that records them exists.

`nel eval run` evaluates its first stale shard before it imports Dagster (the head start:
~1 s of imports, instance and definitions off the path to the first request), then executes
that shard's Dagster run with a run id chosen in advance. The run's `shard_results` step
asks the run's `HeadStartOutcomes` (the `nel_head_start` resource the runner built its
definitions with) for that run id, takes the outcome kept there (or raises the error the
head start met) instead of evaluating again: the run records the same materialization,
metadata and data version, and its step fails the same way, as if it had evaluated the
shard itself. No Dagster import here; no module-level state: each run has its own object.

When that shard is its model's only stale one, the model's bundle (report, 0.3.0 exports) is
built right after it too, still before Dagster is imported, and kept the same way for the
bundle run chosen in advance (`keep_bundle` / `take_bundle`): the bundle's memory is freed
before Dagster's imports take theirs, so the two peaks do not add up. The bundle may still be
building in a forked child while Dagster is imported (a `Later`): the run that takes it waits.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Protocol

_Key = tuple[str, str, int, str]  # (benchmark, model, shard, run id)
_BUNDLE = -1  # the "shard" under which a model's bundle is kept


class Later(Protocol):
    """An outcome still being computed elsewhere (`forked.ForkedCall`)."""

    def result(self) -> Any:
        """The outcome once computed (waits); raises the error that ended it."""

    def wait(self) -> None:
        """Wait until it is computed, whatever the outcome."""


@dataclass(frozen=True)
class _Done:
    outcome: Any = None
    error: BaseException | None = None
    later: Later | None = None


class HeadStartOutcomes:
    """What a run's head start computed, by (benchmark, model, shard, run id), handed to the
    Dagster runs that record it (as the `nel_head_start` resource). Empty outside the CLI."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done: dict[_Key, _Done] = {}

    def keep(self, benchmark: str, model: str, shard: int, run_id: str, *, outcome: Any = None,
             error: BaseException | None = None, later: Later | None = None) -> None:
        """Keep a shard's outcome (or the exception that ended it, or the `later` that will
        give either) for the run `run_id`."""
        with self._lock:
            self._done[(benchmark, model, shard, run_id)] = _Done(outcome, error, later)

    def take(self, benchmark: str, model: str, shard: int, run_id: str) -> Any | None:
        """The outcome kept for this shard and run (once), None when there is none;
        re-raises the kept exception."""
        with self._lock:
            done = self._done.pop((benchmark, model, shard, run_id), None)
        return _outcome_of(done)

    def keep_bundle(self, benchmark: str, model: str, run_id: str, *, outcome: Any = None,
                    error: BaseException | None = None, later: Later | None = None) -> None:
        """Keep a model's built bundle (what `build_model_bundle` returned, or the exception
        that ended it, or the `later` still building it) for the bundle run `run_id`."""
        self.keep(benchmark, model, _BUNDLE, run_id, outcome=outcome, error=error, later=later)

    def peek(self, benchmark: str, model: str, shard: int, run_id: str) -> Any | None:
        """The outcome kept for this shard and run, left for its run to `take` (waits for one
        still being computed); None when there is none; raises the kept exception."""
        with self._lock:
            done = self._done.get((benchmark, model, shard, run_id))
        return _outcome_of(done)

    def peek_bundle(self, benchmark: str, model: str, run_id: str) -> Any | None:
        """The bundle kept for this model and run, left for its run (as `peek`)."""
        return self.peek(benchmark, model, _BUNDLE, run_id)

    def take_bundle(self, benchmark: str, model: str, run_id: str) -> Any | None:
        """The bundle kept for this model and run (once), None when there is none; re-raises
        the kept exception."""
        return self.take(benchmark, model, _BUNDLE, run_id)

    def discard(self, run_id: str) -> None:
        """Forget what was kept for `run_id` (its Dagster run did not take it); what is
        still being computed for it is waited for (its files are complete on return)."""
        with self._lock:
            dropped = [self._done.pop(k) for k in [k for k in self._done if k[3] == run_id]]
        for done in dropped:
            if done.later is not None:
                done.later.wait()


def _outcome_of(done: _Done | None) -> Any | None:
    """What `done` holds: the outcome (waiting for a `later`), None for nothing kept, or the
    kept exception raised."""
    if done is None:
        return None
    if done.later is not None:
        return done.later.result()
    if done.error is not None:
        raise done.error
    return done.outcome
