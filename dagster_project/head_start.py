"""The runner's head start: the first stale shard of a run, evaluated before Dagster is
imported, its outcome handed to the Dagster run that records it through the run's
`nel_head_start` resource (nel_assets.engine.evaluation.head_start.HeadStartOutcomes)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
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

    Dagster is never imported in a thread during the shard: an import holding the GIL made the
    event loop wait a switch interval (5 ms) at every turn, which cost a 10,552-sample run 40%
    of its wall time. It is imported in this process while the shard runs in a forked child
    (below), or after the shard when it runs here.

    Only for shards that need nothing Dagster provides: no launched model server (its URL
    comes from the launch) and no sandbox (a Dagster resource).

    When the shard is its model's only stale one and the run builds bundles, the model's
    bundle is built right after it, for the bundle run whose id is chosen here
    (`outcomes.keep_bundle`). Same files, metadata and data version as when the run's step
    builds it. Where it can, a forked child evaluates the shard and then builds the bundle
    (`forked_steps.ForkedSteps`) while this process imports Dagster, opens its instance and
    builds the definitions on the other core: those ~1.5 s of CPU overlap the requests
    instead of following the last one, and the shard's and bundle's working sets (rows,
    export batches) are in the child, never on top of Dagster's imports (~70 MB) here. Where
    a fork is not safe (a progress bar's thread) both run here, before Dagster, and what they
    freed goes back to the OS before Dagster's imports arrive.
    """

    def __init__(self, bench: Any, task: Any, run: Any, store: Any, *, with_bundle: bool) -> None:
        import uuid

        # Imported here: `nel eval run` imports this module before it knows it has a head start.
        from nel_assets.engine.evaluation.head_start import HeadStartOutcomes

        self.bench, self.task, self.run, self.store = bench, task, run, store
        self.run_id = str(uuid.uuid4())
        self.failed = False
        self.started = False  # `evaluate` has run (once per run)
        self.with_bundle = with_bundle
        self._bundle_run_id: str | None = None  # set once a bundle (or its error) is kept
        self._child: Any = None  # the forked shard and bundle (forked_steps.ForkedSteps)
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
        """Evaluate the shard and keep its outcome (or its error) for the Dagster run; then,
        when it is the model's only stale shard, build and keep the model's bundle.

        Where it can fork, both are steps of a forked child (`forked_steps.ForkedSteps`) and
        this returns at once: the caller imports Dagster on the other core while the shard
        runs, then `settle()`s. Elsewhere both run here before this returns."""
        import uuid

        from nel_assets.engine.evaluation import forked

        self.started = True
        key = (self.bench.name, self.task.model, self.task.shard, self.run_id[:12])
        bundle_run_id = str(uuid.uuid4()) if self.with_bundle else None
        if advance is None and forked.can_fork() and not os.environ.get("NEL_HEAD_START_INLINE"):
            from nel_assets.engine.evaluation.forked_steps import ForkedSteps

            what = f"evaluating {self.bench.name}/{self.task.model} shard {self.task.shard}"
            names = ["its results"] + (["its bundle"] if bundle_run_id else [])
            # Signals go on to the child until the shard is done (its loop stops on them);
            # the bundle step ignores them, so its files are complete on exit.
            self._child = ForkedSteps(what, names, self._steps, config_json, forward_steps=1)
            self.outcomes.keep(*key, later=self._child.step(0))
            if bundle_run_id is not None:
                self.outcomes.keep_bundle(self.bench.name, self.task.model, bundle_run_id,
                                          later=self._child.step(1))
                self._bundle_run_id = bundle_run_id
            return
        try:
            out = self._shard(advance)
        except Exception as exc:  # the Dagster run's step raises it, as if it had run the shard
            self.outcomes.keep(*key, error=exc)
            self.failed = True
            return
        self.outcomes.keep(*key, outcome=out)
        del out
        if bundle_run_id is None:
            return
        try:
            built = self._bundle(config_json)
        except Exception as exc:  # the bundle run's step raises it, as if it had built it
            self.outcomes.keep_bundle(self.bench.name, self.task.model, bundle_run_id, error=exc)
        else:
            self.outcomes.keep_bundle(self.bench.name, self.task.model, bundle_run_id, outcome=built)
            del built
        self._bundle_run_id = bundle_run_id
        # What the shard and bundle freed goes back to the OS before Dagster's imports
        # allocate theirs: without it the peak held both (212 against 197 MB, 10,552 rows).
        from nel_resources.runtime import heap

        heap.give_back_freed()

    def settle(self) -> None:
        """Wait for the shard of a forked head start (nothing to do otherwise). An interrupt
        that ended it (Ctrl-C, SIGTERM) is raised here, before any Dagster run, as it was
        raised by `evaluate` when the shard ran in this process; a failure is kept for the
        shard's run (its step raises it)."""
        if self._child is None:
            return
        self._child.wait_for(0)
        try:
            self._child.result(0)
        except Exception:
            self.failed = True
        # a BaseException (KeyboardInterrupt) propagates, as from the shard run here

    def abandon(self) -> None:
        """The run stops (an interrupt, a failed instance): wait for the forked shard to end
        before the output directory is released (it got the same signal)."""
        if self._child is not None:
            self._child.wait_for(0)

    def _steps(self, config_json: str | None) -> Iterator[Any]:
        """In the forked child: the shard's outcome, then (when kept for a run) the bundle."""
        yield self._shard(None)
        if not self.with_bundle:
            return
        # The bundle's files must be complete when the command ends: a signal now would
        # only tear them (the caller has stopped forwarding; a group's Ctrl-C reaches here).
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)
        from nel_resources.runtime import heap

        heap.give_back_freed()  # what the shard freed: the bundle's peak does not add to it
        yield self._bundle(config_json)

    def _shard(self, advance: Callable[[int], None] | None) -> Any:
        from nel_assets.engine.evaluation import evaluate as ev

        return ev.evaluate_shard(self.run, self.store, self.task.shard, run_id=self.run_id[:12],
                                 base_url=self.run.service.config.url, on_progress=advance)

    def _bundle(self, config_json: str | None) -> Any:
        from nel_assets.engine.evaluation import evaluate as ev

        return ev.build_model_bundle(self.run, self.store, self.bench.name, self.task.model,
                                     config_json=config_json)

    def results(self) -> tuple[Any, Any] | None:
        """The shard's outcome and the built bundle, both left for the Dagster runs that take
        them (waits for them); None when either failed (their runs fail the same way) or no
        bundle is kept."""
        if self._bundle_run_id is None or self.failed:
            return None
        name, model = self.bench.name, self.task.model
        try:
            shard = self.outcomes.peek(name, model, self.task.shard, self.run_id[:12])
            bundle = self.outcomes.peek_bundle(name, model, self._bundle_run_id)
        except Exception:
            return None
        return (shard, bundle) if shard is not None and bundle is not None else None

    def is_whole_run(self, resolved: ResolvedConfig, plans: list[tuple[Any, list[Any], list[Any]]],
                     artifact_issues: dict[tuple[str, str], list[str]], *, bundle: bool, merged: bool,
                     shard_only: tuple[int, int] | None) -> bool:
        """Whether this head start is the whole run: one benchmark, one model, its one stale
        shard (this one), the model's bundle built with it, no comparison, nothing else to
        rebuild. Only then can Dagster's recording wait until after the command
        (background_recording.RecordLater)."""
        if not self.with_bundle or not bundle or merged or shard_only is not None:
            return False
        if len(plans) != 1 or resolved.comparison.baseline:
            return False
        bench, tasks, todo = plans[0]
        model = self.task.model
        return (bench is self.bench and len(todo) == 1 and todo[0] is self.task
                and all(t.model == model for t in tasks)
                and not any(v for (_, m), v in artifact_issues.items() if m != model))

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
