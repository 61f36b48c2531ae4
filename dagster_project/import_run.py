"""`nel data import-run`: a NeMo Evaluator 0.3.0 run into nel's Parquet store and Dagster.

The run's benchmarks become model partitions of the output dir's store (one shard partition
per shard process, or shard 0 of 1), their bundle, report and exports are built from those
rows as for a nel run, and the output's Dagster instance learns the model partition and gets
one materialization of each ``<bench>/bundle`` partition. A config whose
``comparison.baseline`` names that model then compares new checkpoints against the imported
results without evaluating the baseline again (the comparison reads it from the store).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.errors import NelError


@dataclass
class ImportResult:
    """What an import wrote."""

    output: Path
    dagster_home: Path
    bundles: list[dict[str, Any]] = field(default_factory=list)


def import_nemo_run(source: str | Path, output: str | Path, *, model: str | None = None,
                    dagster_home: str | None = None) -> ImportResult:
    """Import a NeMo Evaluator 0.3.0 output (run dir, benchmark dir, bundle file or
    ``shard_<N>/`` layout) into the nel output dir ``output``.

    Everything is read and checked first; bad input raises before anything is written.

    Args:
        source: The NeMo Evaluator output.
        output: The nel output directory (created if missing).
        model: The model partition to file it under (default: the run's ``config.model``).
        dagster_home: The instance to record it in (default ``<output>/.dagster``, as runs).

    Raises:
        NelError: Bad input (one line), or a model partition that already has results there.
    """
    from nel_assets.engine.evaluation.evaluate import build_model_bundle
    from nel_assets.engine.nemo.nemo_results import load_nemo_benches, store_nemo_benches
    from nel_assets.engine.results.bundle import bundle_row
    from nel_resources.storage.store import ResultStore

    src = Path(source).expanduser().resolve()
    if not src.exists():
        raise NelError(f"no such file or directory: {src}")
    if ResultStore(src).benchmarks() if src.is_dir() else False:
        raise NelError(f"{src} is already a nel output directory: compare or report it directly")
    benches = load_nemo_benches(src, model=model, combine_shards=False)
    out = Path(output).expanduser().resolve()
    if out.exists() and not out.is_dir():
        raise NelError(f"the output directory {out} is a file: give -o a directory")
    store = ResultStore(out)
    taken = sorted({f"{b.benchmark}/{b.model}" for b in benches if store.read_bundle(b.benchmark, b.model)
                    or store.shard_records(b.benchmark, b.model)})
    if taken:
        raise NelError(f"{out} already holds results for {', '.join(taken)}: import under another "
                       "name (--model NAME) or into another output directory")
    home = _dagster_home(out, dagster_home)
    pairs = store_nemo_benches(benches, out)
    result = ImportResult(output=out, dagster_home=home)
    for bench, m in pairs:
        bundle, _ = build_model_bundle(None, store, bench, m)
        src_of = next(b for b in benches if (b.benchmark, b.model) == (bench, m))
        bundle.update({"source_tool": f"nemo-evaluator {src_of.bundle.get('sdk_version')}",
                       "imported_from": str(src)})
        store.write_bundle(bench, m, bundle, bundle_row(bundle))  # with where it came from
        result.bundles.append(bundle)
    _record_in_dagster(home, store, result.bundles)
    return result


def _dagster_home(out: Path, given: str | None) -> Path:
    from dagster_project.run_output import dagster_home_for
    from nel_resources.config import NelConfig

    cfg = NelConfig.model_validate({"output": {"dir": str(out), "dagster_home": given}})
    try:
        return dagster_home_for(cfg)
    except OSError as exc:
        raise NelError(f"cannot use the Dagster home {given or out / '.dagster'}: {exc.strerror}") from None


def _record_in_dagster(home: Path, store: Any, bundles: list[dict[str, Any]]) -> None:
    """The model partitions, and one materialization per imported bundle partition."""
    import warnings

    import dagster as dg

    from nel_assets.partitions import MODEL_PARTITIONS
    from nel_resources.storage.store import asset_name

    for cat in (dg.BetaWarning, dg.PreviewWarning):
        warnings.filterwarnings("ignore", category=cat)
    instance = dg.DagsterInstance.from_config(str(home))
    models = sorted({b["model"] for b in bundles})
    existing = set(instance.get_dynamic_partitions(MODEL_PARTITIONS.name))
    if new := [m for m in models if m not in existing]:
        instance.add_dynamic_partitions(MODEL_PARTITIONS.name, new)
    for b in bundles:
        s = b["score"]
        path = store.bundle_dir(b["benchmark"], b["model"]) / "bundle.json"
        instance.report_runless_asset_event(dg.AssetMaterialization(
            asset_key=dg.AssetKey([asset_name(b["benchmark"]), "bundle"]), partition=b["model"],
            description=f"imported from {b.get('imported_from')} ({b.get('source_tool')})",
            metadata={"score": s.get("mean"), "se": s.get("se"), "ci_low": s.get("ci_low"),
                      "ci_high": s.get("ci_high"), "ci_method": s.get("ci_method"),
                      "n_items": s.get("n_items"), "n_samples": s.get("n_samples"),
                      "imported_from": str(b.get("imported_from")), "source_tool": str(b.get("source_tool")),
                      "bundle": dg.MetadataValue.path(str(path))},
            tags={"dagster/data_version": hashlib.sha256(
                json.dumps(s, sort_keys=True, default=str).encode()).hexdigest()[:16]},
        ))
