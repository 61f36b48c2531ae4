"""The runner's head start: the first stale shard of a run, evaluated before Dagster is
imported, its outcome handed to the Dagster run that records it through the run's
`nel_head_start` resource (nel_assets.engine.evaluation.head_start.HeadStartOutcomes)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nel_resources.specs import ResolvedConfig

if TYPE_CHECKING:
    from nel_assets.engine.evaluation.head_start import HeadStartOutcomes


class HeadStart:
    """The first stale shard of a run, evaluated before Dagster is imported.

    Importing Dagster, opening its instance and building the definitions cost about a second
    before the first request. So the runner evaluates this shard first, with the engine alone,
    and keeps the outcome for the Dagster run it then executes for that partition with the
    run id chosen here: that run's step takes the outcome (`outcomes`, the `nel_head_start`
    resource of the runner's definitions) and
    records the same materialization, metadata and data version, or fails the same way.

    Dagster is imported after the shard, not in a thread during it: an import holding the GIL
    made the event loop wait a switch interval (5 ms) at every turn, which cost a 10,552-sample
    run 40% of its wall time; and the shard's rows are freed before Dagster's memory is taken.

    Only for shards that need nothing Dagster provides: no launched model server (its URL
    comes from the launch) and no sandbox (a Dagster resource).

    When the shard is its model's only stale one and the run builds bundles, the model's
    bundle is built right after it, for the bundle run whose id is chosen here
    (`outcomes.keep_bundle`). Same files, metadata and data version as when the run's step
    builds it. Where it can, a forked child builds it (`forked.ForkedCall`) while this process
    imports Dagster and records the shard's run: the tail after the last request overlaps on
    two cores instead of adding up, and the bundle's working set (rows, export batches) is in
    the child, never on top of Dagster's imports (~70 MB) here. Where a fork is not safe it is
    built here, before Dagster, and freed before Dagster's imports arrive.
    """

    def __init__(self, bench: Any, task: Any, run: Any, store: Any, *, with_bundle: bool) -> None:
        import uuid

        # Imported here: `nel eval run` imports this module before it knows it has a head start.
        from nel_assets.engine.evaluation.head_start import HeadStartOutcomes

        self.bench, self.task, self.run, self.store = bench, task, run, store
        self.run_id = str(uuid.uuid4())
        self.failed = False
        self.with_bundle = with_bundle
        self._bundle_run_id: str | None = None  # set once a bundle (or its error) is kept
        #: what the shard (and bundle) runs take: the run's `nel_head_start` resource
        self.outcomes: HeadStartOutcomes = HeadStartOutcomes()

    @classmethod
    def pick(cls, resolved: ResolvedConfig, plans: list[tuple[Any, list[Any], list[Any]]],
             store: Any, *, bundle: bool = True) -> HeadStart | None:
        """The head start of this run, or None (Dagster first, as before). `bundle`: whether
        the run builds bundles at all (not for `--only` stages)."""
        from nel_resources.config.services import LAUNCHED_TYPES

        if os.environ.get("NEL_NO_HEAD_START") or not plans or not plans[0][2]:
            return None
        if any(resolved.services[s].config.type in LAUNCHED_TYPES for s in resolved.used_services):
            return None
        bench, _, todo = plans[0]
        run = bench.run_for(todo[0].model)
        if run is None or bench.sandbox is not None:
            return None
        model = todo[0].model
        only_stale = sum(1 for t in todo if t.model == model) == 1
        return cls(bench, todo[0], run, store, with_bundle=bundle and only_stale)

    def evaluate(self, advance: Callable[[int], None] | None, config_json: str | None) -> None:
        """Evaluate the shard now and keep its outcome (or its error) for the Dagster run;
        then, when it is the model's only stale shard, build and keep the model's bundle."""
        from nel_assets.engine.evaluation import evaluate as ev
        key = (self.bench.name, self.task.model, self.task.shard, self.run_id[:12])
        try:
            out = ev.evaluate_shard(self.run, self.store, self.task.shard, run_id=self.run_id[:12],
                                    base_url=self.run.service.config.url, on_progress=advance)
        except Exception as exc:  # the Dagster run's step raises it, as if it had run the shard
            self.outcomes.keep(*key, error=exc)
            self.failed = True
            return
        self.outcomes.keep(*key, outcome=out)
        del out
        if not self.with_bundle:
            return
        import uuid

        from nel_assets.engine.evaluation import forked
        from nel_resources.runtime import heap

        run_id = str(uuid.uuid4())
        bundle_args = (self.run, self.store, self.bench.name, self.task.model)
        if forked.can_fork():
            # What the shard freed goes back to the OS first: the child starts from the
            # smaller heap, and this process's Dagster imports find it returned too.
            heap.give_back_freed()
            # Built in a child while this process imports Dagster and records the shard's run
            # (both are CPU-bound Python: the tail after the last request overlaps on two
            # cores); the bundle run waits for it, and the process's exit does too.
            later = forked.ForkedCall(f"building the bundle of {self.bench.name}/{self.task.model}",
                                      ev.build_model_bundle, *bundle_args, config_json=config_json)
            self.outcomes.keep_bundle(self.bench.name, self.task.model, run_id, later=later)
            self._bundle_run_id = run_id
            return
        try:
            built = ev.build_model_bundle(*bundle_args, config_json=config_json)
        except Exception as exc:  # the bundle run's step raises it, as if it had built it
            self.outcomes.keep_bundle(self.bench.name, self.task.model, run_id, error=exc)
        else:
            self.outcomes.keep_bundle(self.bench.name, self.task.model, run_id, outcome=built)
            del built
        self._bundle_run_id = run_id
        # What the shard and bundle freed goes back to the OS before Dagster's imports
        # allocate theirs: without it the peak held both (212 against 197 MB, 10,552 rows).
        heap.give_back_freed()

    def bundle_run_id(self, bench: Any, model: str) -> str | None:
        """The run id to give (bench, model)'s bundle run: the one its kept bundle waits
        for, or None (the run's step builds the bundle itself)."""
        if bench is not self.bench or model != self.task.model or self._bundle_run_id is None:
            return None
        run_id, self._bundle_run_id = self._bundle_run_id, None
        return run_id

    def forget_bundle(self) -> None:
        """Drop a kept bundle no run took (its model failed, or got no bundle run)."""
        if self._bundle_run_id is not None:
            self.outcomes.discard(self._bundle_run_id)
            self._bundle_run_id = None
