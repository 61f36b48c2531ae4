"""A background recording that never finished, recorded by the next run.

Before `nel eval run` leaves its Dagster recording to a background process
(background_recording), it writes `<out>/.nel-recording-pending.json`: the shard's outcome as
a launched worker reports one (`remote_shard.LaunchedShard`) and the run ids. The recording
process removes it when both runs are recorded. If that process was killed (or the machine
went down) first, the results and files are complete but Dagster lacks the two runs: the next
`nel eval run` on the directory (which holds the run lock, so no recording of it is alive)
finds the file and records them before anything else, as Dagster records a partition a
cluster worker evaluated (the `_launch.json` beside the shard's rows, the run tagged
`nel/launched_by`), then the model's bundle (rebuilt from the store). A shard whose rows
changed since (a `--fresh` rerun, say) needs no repair: its new run records it.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

PENDING_FILE = ".nel-recording-pending.json"


def write_pending(out: Path, doc: dict[str, Any]) -> Path:
    """Say that `doc`'s shard and its bundle are not recorded yet (atomically)."""
    from nel_resources.storage.store import write_json_atomic

    path = Path(out) / PENDING_FILE
    write_json_atomic(path, doc)
    return path


def clear_pending(out: Path) -> None:
    """The recording finished: nothing to repair."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(Path(out) / PENDING_FILE)


def read_pending(out: Path) -> dict[str, Any] | None:
    """What a recording left unrecorded in `out` (None when nothing, or unreadable)."""
    try:
        doc = json.loads((Path(out) / PENDING_FILE).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and {"benchmark", "model", "shard", "data_version"} <= doc.keys() else None


def repair(out: Path, resolved: Any, store: Any, record: Callable[[Any, str, int], None]) -> str | None:
    """Record the pending shard and bundle of `out` with `record(bench, model, shard)` (the
    runner's recording, which runs the shard's job as a launched partition's and the
    bundle's job); returns what was repaired, or None. Called with the run lock held."""
    from nel_assets.engine.evaluation.remote_shard import LAUNCH_FILE
    from nel_resources.storage.store import write_json_atomic

    doc = read_pending(out)
    if doc is None:
        clear_pending(out)  # torn or foreign: nothing it could repair
        return None
    bench = next((b for b in resolved.benchmarks if b.name == doc["benchmark"]), None)
    model, shard = str(doc["model"]), int(doc["shard"])
    if bench is None or bench.run_for(model) is None:
        return None  # not in this run's config: a later run of that config repairs it
    stored = store.shard_fingerprint(bench.name, model, shard) or {}
    if stored.get("data_version") != doc["data_version"]:
        clear_pending(out)  # the shard was evaluated again since: that run records it
        return None
    write_json_atomic(store.shard_dir(bench.name, model, shard) / LAUNCH_FILE, doc)
    record(bench, model, shard)
    clear_pending(out)
    return f"{bench.name} {model} shard {shard}"


def pending_doc(store: Any, bench: Any, task: Any, out: Any) -> dict[str, Any]:
    """The shard's record as a launched worker reports one (`remote_shard.LaunchedShard`),
    from its head-start outcome `out`: what `write_pending` keeps."""
    from nel_assets.engine.evaluation.remote_shard import LaunchedShard

    stored = store.shard_fingerprint(bench.name, task.model, task.shard) or {}
    return LaunchedShard(bench.name, task.model, task.shard, task.total, str(stored.get("fingerprint", "")),
                         out.data_version, out.n_rows, out.requests_sent, out.reused_from_journal,
                         out.mean_reward, out.n_errors, round(out.elapsed_s, 3),
                         f"nel eval run (pid {os.getpid()}); recorded by a later run").to_dict()


def repair_in_run(resolved: Any, store: Any, log_path: Path, *, ready_defs: Callable[[], Any],
                  register: Callable[..., None], run: Callable[..., Any],
                  jobs_of: Callable[[Any], dict[str, str]], step_failed: type[Exception]) -> int:
    """In the runner: record what an earlier run's background recording left unrecorded, its
    shard as a launched partition, its dataset partition and its model's bundle, with the
    runner's own `register` and `run`. A failed step (`step_failed`) is logged and left for a
    later run. Returns the Dagster runs executed."""
    import dataclasses

    import dagster as dg

    from dagster_project import run_log
    from nel_assets.engine.evaluation import evaluate as ev
    from nel_assets.engine.evaluation.remote_shard import LAUNCHED_TAG

    done = 0

    def record(bench: Any, model: str, shard: int) -> None:
        nonlocal done
        # planned again: fresh now, reported as stale so its inputs and dataset are recorded
        tasks = [dataclasses.replace(t, stored=None) for t in ev.plan(store, bench)
                 if t.model == model and t.shard == shard]
        register(bench, [model], tasks)
        run(jobs_of(bench)["shards"], dg.MultiPartitionKey({"model": model, "shard": str(shard)}),
            f"{bench.name} {model} shard {shard} (recorded late)", {LAUNCHED_TAG: "nel eval run"})
        run(jobs_of(bench)["bundle"], model, f"{bench.name} {model} bundle (recorded late)")
        done += 2

    ready_defs()
    try:
        what = repair(store.root, resolved, store, record)
        title = f"recorded {what} in Dagster: its run's recording had not finished" if what else None
        body = ""
    except step_failed as exc:
        title, body = "recording an earlier run's results failed (a later run tries again)", str(exc)
    if title is not None:
        with contextlib.suppress(OSError):
            run_log.append(log_path, title, body)
    return done
