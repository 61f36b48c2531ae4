"""The checkpoint sensor: every new checkpoint in a watched directory gets evaluated.

A checkpoint is an entry of `checkpoints.dir` matching `checkpoints.pattern` (a file such
as `step-1000.gguf`, or a subdirectory when `checkpoints.directories` is true). For each
new one the sensor adds a `model` partition (its slug), records its real path, and requests
one run per (benchmark, shard); `eager()` automation then builds the bundle, report and
comparison (with its gate) once the last shard lands.

The cursor (JSON) remembers accepted checkpoints, so ticks are idempotent, and the size
and mtime of candidates seen last tick: an entry younger than `min_age_seconds`, still
growing, without a GGUF header yet, or gone by the time we look is skipped with a logged
reason and looked at again next tick.
"""

# No `from __future__ import annotations`: Dagster inspects the context annotation.

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from nel_resources.config import CheckpointsConfig, NelConfig, ServiceConfig
from nel_resources.specs import ResolvedConfig, resolve
from nel_resources.storage.store import slugify

GGUF_MAGIC = b"GGUF"


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint on disk: its partition slug, path, total size and newest mtime."""

    name: str
    path: Path
    size: int
    mtime: float


def _stat_entry(path: Path) -> tuple[int, float] | None:
    """(total size, newest mtime) of a file or directory tree; None if it vanished."""
    try:
        if path.is_dir():
            size, newest = 0, path.stat().st_mtime
            for p in path.rglob("*"):
                st = p.stat()
                newest = max(newest, st.st_mtime)
                if p.is_file():
                    size += st.st_size
            return size, newest
        st = path.stat()
        return st.st_size, st.st_mtime
    except FileNotFoundError:
        return None


def checkpoint_name(path: Path) -> str:
    """The model partition key of a checkpoint (slug of its file stem or directory name)."""
    return slugify(path.name if path.is_dir() else path.stem)


def discover_checkpoints(ck: CheckpointsConfig) -> list[Checkpoint]:
    """Checkpoint candidates in `ck.dir`, oldest first (no readiness checks here)."""
    if not ck.dir:
        return []
    root = Path(ck.dir).expanduser()
    if not root.is_dir():
        return []
    # The default pattern names files; for directory checkpoints it means "every entry".
    pattern = "*" if ck.directories and ck.pattern == "*.gguf" else ck.pattern
    out = []
    for p in sorted(root.glob(pattern)):
        if p.name.startswith(".") or p.is_dir() != ck.directories:
            continue  # hidden entries are temp files of writers that rename into place
        st = _stat_entry(p)
        if st is not None:
            out.append(Checkpoint(checkpoint_name(p), p.resolve(), st[0], st[1]))
    return sorted(out, key=lambda c: (c.mtime, c.name))


def checkpoint_service(ck: CheckpointsConfig, cp: Checkpoint) -> ServiceConfig:
    """The service that serves checkpoint `cp`: the template with its path filled in."""

    def fill(v: Any) -> Any:
        if isinstance(v, str):
            return v.replace("{checkpoint}", str(cp.path)).replace("{checkpoint_name}", cp.name)
        if isinstance(v, list):
            return [fill(x) for x in v]
        if isinstance(v, dict):
            return {k: fill(x) for k, x in v.items()}
        return v

    data = fill(ck.service_template.model_dump(mode="json"))
    if data.get("type") != "api" and not data.get("model_path"):
        data["model_path"] = str(cp.path)
    data["model"] = data.get("model") or cp.name
    return ServiceConfig.model_validate(data)


def with_checkpoint_services(cfg: NelConfig) -> NelConfig:
    """`cfg` plus one service per checkpoint on disk, evaluated on every benchmark.

    Run workers load the definitions afresh, so a checkpoint accepted by the sensor after
    the code server started still resolves to its service (and launched server) at run time.
    """
    cps = discover_checkpoints(cfg.checkpoints)
    if not cps:
        return cfg
    # Only the keys the config wrote: a full dump validated again marks every default as set.
    data = cfg.model_dump(mode="json", exclude_unset=True)
    data.setdefault("services", {})
    taken = {slugify(n) for n in data["services"]}
    added = []
    for cp in cps:
        if cp.name in taken:
            continue  # a configured service of that name wins
        data["services"][cp.name] = checkpoint_service(cfg.checkpoints, cp).model_dump(
            mode="json", exclude_unset=True)
        added.append(cp.name)
    for b in data.get("benchmarks", []):
        if b.get("service") is not None:
            names = [b["service"]] if isinstance(b["service"], str) else list(b["service"])
            b["service"] = names + [n for n in added if n not in names]
    return NelConfig.model_validate(data)


def _readiness(ck: CheckpointsConfig, cp: Checkpoint, prior: list[float] | None, now: float) -> str | None:
    """Why `cp` is not ready yet (None when it is)."""
    st = _stat_entry(cp.path)
    if st is None:
        return "vanished before it could be read"
    size, mtime = st
    if size == 0:
        return "is empty"
    if now - mtime < ck.min_age_seconds:
        return f"was modified {now - mtime:.1f}s ago (< min_age_seconds={ck.min_age_seconds:g}); still being written?"
    if prior is not None and (int(prior[0]), prior[1]) != (size, mtime):
        return f"changed since the last look (size {int(prior[0])} -> {size})"
    if cp.path.is_file() and cp.path.suffix == ".gguf":
        try:
            with open(cp.path, "rb") as f:
                if f.read(4) != GGUF_MAGIC:
                    return "has no GGUF header (half-written?)"
        except FileNotFoundError:
            return "vanished before it could be read"
    return None


def build_checkpoint_sensor(cfg: NelConfig, output_dir: str) -> dg.SensorDefinition:
    """The sensor watching `checkpoints.dir` (running by default).

    `cfg` is the config without checkpoint services: each tick that accepts new
    checkpoints resolves it again with them, into new run specs.
    """
    from nel_assets.partitions import MODEL_PARTITIONS

    resolved = resolve(cfg)
    ck = resolved.checkpoints

    @dg.sensor(name="checkpoint_sensor", minimum_interval_seconds=ck.interval_seconds,
               default_status=dg.DefaultSensorStatus.RUNNING,
               asset_selection=dg.AssetSelection.assets(
                   *[dg.AssetKey([b.asset_name, "shard_results"]) for b in resolved.benchmarks]),
               description=f"Evaluates every new checkpoint in {ck.dir} ({ck.pattern}).")
    def checkpoint_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        state = json.loads(context.cursor) if context.cursor else {}
        accepted: dict[str, str] = state.get("accepted", {})
        watching: dict[str, list[float]] = state.get("watching", {})
        now = time.time()
        listed = discover_checkpoints(ck)
        listed_names = {c.name for c in listed}
        for name in [n for n in watching if n not in listed_names]:
            context.log.info(f"checkpoint {name!r} vanished before it was ready; forgetting it")
            watching.pop(name)
        ready: list[Checkpoint] = []
        for cp in listed:
            if cp.name in accepted:
                continue
            reason = _readiness(ck, cp, watching.get(cp.name), now)
            if reason is not None:
                context.log.info(f"skipping checkpoint {cp.path}: it {reason}; will retry")
                st = _stat_entry(cp.path)
                if st is None:
                    watching.pop(cp.name, None)
                else:
                    watching[cp.name] = [st[0], st[1]]
                continue
            ready.append(cp)
        run_requests: list[dg.RunRequest] = []
        events: list[dg.AssetObservation] = []
        if ready:
            full = resolve(with_checkpoint_services(cfg))
            names = [c.name for c in ready]
            events = _safe_observations(context, full, output_dir, ready)
            _record_datasets(context, full, output_dir, names)
            for cp in ready:
                accepted[cp.name] = str(cp.path)
                watching.pop(cp.name, None)
                context.log.info(f"new checkpoint {cp.path} -> model partition {cp.name!r}")
                for bench in full.benchmarks:
                    key = dg.AssetKey([bench.asset_name, "shard_results"])
                    for shard in range(bench.shards):
                        run_requests.append(dg.RunRequest(
                            run_key=f"{cp.name}:{bench.name}:{shard}:{int(cp.mtime)}",
                            asset_selection=[key],
                            partition_key=dg.MultiPartitionKey({"model": cp.name, "shard": str(shard)}),
                            tags={"nel/checkpoint": str(cp.path), "nel/model": cp.name,
                                  "nel/benchmark": bench.name},
                        ))
            partitions = [dg.AddDynamicPartitionsRequest(MODEL_PARTITIONS.name, names)]
        else:
            partitions = []
        return dg.SensorResult(run_requests=run_requests, dynamic_partitions_requests=partitions,
                               asset_events=events,
                               cursor=json.dumps({"accepted": accepted, "watching": watching},
                                                 sort_keys=True))

    return checkpoint_sensor


def _safe_observations(context: dg.SensorEvaluationContext, resolved: ResolvedConfig, output_dir: str,
                       ready: list[Checkpoint]) -> list[dg.AssetObservation]:
    """Shard-input observations of the new checkpoints (never fails the tick)."""
    from dagster_project.automation import shard_input_observations

    try:
        return shard_input_observations(
            resolved, output_dir, models=[c.name for c in ready],
            metadata={c.name: {"checkpoint_path": str(c.path)} for c in ready})
    except Exception as exc:  # data not loadable here: the runs will report the error
        context.log.warning(f"could not fingerprint new checkpoints: {type(exc).__name__}: {exc}")
        return []


def _record_datasets(context: dg.SensorEvaluationContext, resolved: ResolvedConfig, output_dir: str,
                     models: list[str]) -> None:
    """The dataset partitions the new checkpoints' shard runs read, recorded before those
    runs start (as `nel eval run` does; never fails the tick)."""
    from dagster_project.automation import record_dataset_shards
    from nel_assets.engine.evaluation import evaluate as ev
    from nel_resources.storage.store import ResultStore

    store = ResultStore(output_dir)
    try:
        for bench in resolved.benchmarks:
            record_dataset_shards(context.instance, bench,
                                  [t for t in ev.plan(store, bench) if t.model in models], store)
    except Exception as exc:  # data not loadable here: the runs will report the error
        context.log.warning(f"could not record the datasets: {type(exc).__name__}: {exc}")


def checkpoints_enabled(resolved: ResolvedConfig) -> bool:
    """Whether the config watches a checkpoint directory."""
    ck = resolved.checkpoints
    return bool(ck.dir) and bool(os.path.expanduser(ck.dir))
