"""The `checkpoint_trends` asset: every benchmark's checkpoint series with the regression alarm.

Downstream of every benchmark's `bundle` (all model partitions), so a new checkpoint's bundle
makes it stale and `eager()` automation rebuilds it once the bundles it reads are in place.
It reads the store (`engine.results.trends`), writes
`<out>/checkpoint_trends/checkpoint_trends/trends.parquet` (the DuckDB `checkpoint_trends`
view) and one SVG plot per (benchmark, family) beside it, and shows per series a markdown
table and the plot in the Dagster UI.

Built when the config watches a checkpoint directory or names two or more services whose
names carry a training step; elsewhere there is no series to show.
"""

# No `from __future__ import annotations`: Dagster inspects the context annotation.

import base64
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import dagster as dg

from nel_assets.engine.results.trend_store import trends_dir
from nel_resources.resources import ResultStoreResource
from nel_resources.specs import ResolvedConfig

TRENDS_KEY = dg.AssetKey(["checkpoint_trends"])


def wants_trends(resolved: ResolvedConfig) -> bool:
    """Whether the config has (or will have) checkpoint series."""
    from nel_resources.exporters.steps import checkpoint_family_step

    if resolved.checkpoints.dir:
        return True
    pattern = resolved.checkpoints.step_pattern
    return sum(checkpoint_family_step(m, pattern) is not None for m in resolved.services) >= 2


def write_trends(resolved: ResolvedConfig, root: Path) -> tuple[list[Any], dict[str, str]]:
    """Compute every series from the store; write the Parquet table and the SVG plots.

    Returns:
        (the series, {series label: its SVG}).
    """
    from nel_assets.engine.reports.trend_svg import trend_chart
    from nel_assets.engine.results.trends import (
        TREND_COLUMNS,
        checkpoint_trends,
        series_label,
        trend_rows,
    )
    from nel_resources.storage.arrow import pa
    from nel_resources.storage.store import (
        ResultStore,
        slugify,
        write_parquet_atomic,
        write_text_atomic,
    )

    store = ResultStore(root)
    series = checkpoint_trends(store, [(b.name, b.asset_name) for b in resolved.benchmarks],
                               step_pattern=resolved.checkpoints.step_pattern)
    schema = pa.schema([(name, getattr(pa, kind)()) for name, kind in TREND_COLUMNS])
    d = trends_dir(store.root)
    write_parquet_atomic(d / "trends.parquet", pa.Table.from_pylist(trend_rows(series), schema=schema))
    plots = {}
    for s in series:
        label = series_label(s)
        plots[label] = trend_chart(s.rows, title=f"{label}: score vs step")
        write_text_atomic(d / f"{slugify(label.replace(' / ', '__'))}.svg", plots[label])
    return series, plots


def export_trends(resolved: ResolvedConfig, root: Path, series: list[Any]) -> int:
    """The trend's step metrics into each checkpoint's MLflow run, when `output.export` names
    mlflow (the exporter logged the scores at the same steps). Returns the runs updated."""
    from nel_assets.engine.results.trends import trend_rows

    output = (json.loads(resolved.config_json or "{}").get("output") or {})
    n = 0
    for item in output.get("export") or []:
        name = str(item.get("type") if isinstance(item, dict) else item)
        if name != "mlflow":
            continue
        from nel_resources.exporters.mlflow_trends import log_trend_metrics

        settings = {**((output.get("export_config") or {}).get(name) or {}),
                    **({k: v for k, v in item.items() if k != "type"} if isinstance(item, dict) else {})}
        n += log_trend_metrics(trend_rows(series), settings, root)
    return n


def build_trend_assets(resolved: ResolvedConfig) -> list[dg.AssetsDefinition]:
    """`[checkpoint_trends]`, or `[]` when the config has no checkpoint series."""
    if not wants_trends(resolved):
        return []
    bundle_keys = [dg.AssetKey([b.asset_name, "bundle"]) for b in resolved.benchmarks]
    code_version = hashlib.sha256(json.dumps(
        {"step_pattern": resolved.checkpoints.step_pattern, "v": 1}).encode()).hexdigest()[:12]

    @dg.asset(key=TRENDS_KEY, group_name="comparison", deps=bundle_keys, code_version=code_version,
              kinds={"parquet"}, automation_condition=dg.AutomationCondition.eager(),
              description="Each benchmark's score against training step per checkpoint family, with "
              "paired step-to-step deltas, their noise and the CUSUM regression alarm.")
    def checkpoint_trends(context: dg.AssetExecutionContext, nel_store: ResultStoreResource) -> dg.MaterializeResult:
        from benchmarks.errors import NelError
        from nel_assets.engine.results.trends import series_label, series_markdown

        t0 = time.perf_counter()
        try:
            series, plots = write_trends(resolved, nel_store.store().root)
        except NelError as exc:
            raise dg.Failure(description=str(exc)) from None
        elapsed = time.perf_counter() - t0
        logged = export_trends(resolved, nel_store.store().root, series)
        d = trends_dir(nel_store.store().root)
        md: dict[str, Any] = {
            "n_series": len(series), "n_checkpoints": sum(len(s.rows) for s in series),
            "alarms": ", ".join(f"{series_label(s)} @ step {s.first_alarm_step}" for s in series
                                if s.first_alarm_step is not None) or "none",
            "elapsed_s": round(elapsed, 3), "path": dg.MetadataValue.path(str(d / "trends.parquet")),
            "mlflow_runs_updated": logged,
        }
        for s in series:
            label = series_label(s)
            context.log.info(f"{label}: {len(s.rows)} checkpoints, first alarm "
                             f"{s.first_alarm_step if s.first_alarm_step is not None else 'none'}")
            # The plot as a data-URI image: the UI's markdown shows images, not inline SVG.
            uri = "data:image/svg+xml;base64," + base64.b64encode(plots[label].encode()).decode()
            md[label] = dg.MetadataValue.md(f"{series_markdown(s)}\n\n![{label} trend]({uri})")
        version = hashlib.sha256(json.dumps([s.rows for s in series], sort_keys=True, default=str)
                                 .encode()).hexdigest()[:16]
        return dg.MaterializeResult(metadata=md, data_version=dg.DataVersion(version))

    return [checkpoint_trends]
