"""The checkpoint series in MLflow: each checkpoint's run gets the trend's step metrics.

The `mlflow` exporter logs one run per (benchmark, checkpoint) with its scores at the
checkpoint's step. Once `checkpoint_trends` has the paired delta and the regression alarm,
they go into the same run at the same step (`trend/delta`, `trend/delta_se`, `trend/cusum`,
`trend/alarm` as 0/1), so the tracker plots the alarm beside the score curve. A run is found
by its `nel.benchmark` and `nel.model` tags (the latest one); a value already logged is not
logged again. A failure is one line on stderr and never fails the trend.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from nel_resources.exporters.mlflow_settings import is_local_store, parse_settings, tracking_uri
from nel_resources.wire.endpoint_url import redact_url

__all__ = ["TREND_METRICS", "log_trend_metrics"]

#: checkpoint_trends column -> MLflow metric key.
TREND_METRICS = {"delta": "trend/delta", "delta_se": "trend/delta_se", "cusum": "trend/cusum",
                 "alarm": "trend/alarm"}


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


def log_trend_metrics(rows: Iterable[Mapping[str, Any]], settings: dict[str, Any], output_dir: str | Path) -> int:
    """Log each row's trend metrics into its checkpoint's MLflow run at its step.

    Args:
        rows: `checkpoint_trends` rows.
        settings: the `mlflow` exporter's settings (tracking URI, experiment).
        output_dir: the run's output directory (its `mlflow/` is the default store).

    Returns:
        How many runs got new metrics (0 when MLflow is missing or unreachable: said in one line).
    """
    parsed = parse_settings(settings)
    uri = tracking_uri(parsed, Path(output_dir))
    try:
        from mlflow.entities import Metric
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=uri)
        exp = client.get_experiment_by_name(parsed.experiment_name)
        if exp is None:
            return 0
        updated = 0
        now = int(time.time() * 1000)
        for r in rows:
            if r.get("delta") is None:
                continue  # the first checkpoint of a series has no trend yet
            found = client.search_runs(
                [exp.experiment_id], max_results=1, order_by=["attributes.start_time DESC"],
                filter_string=f"tags.`nel.benchmark` = '{_quoted(str(r['benchmark']))}' and "
                              f"tags.`nel.model` = '{_quoted(str(r['model']))}'")
            if not found:
                continue  # this checkpoint was not exported (yet)
            have = found[0].data.metrics
            metrics = [Metric(key, float(r[col]), now, int(r["step"])) for col, key in TREND_METRICS.items()
                       if r.get(col) is not None and have.get(key) != float(r[col])]
            if metrics:
                client.log_batch(found[0].info.run_id, metrics=metrics)
                updated += 1
        return updated
    except Exception as exc:  # the tracker's failure never fails the trend
        text = " ".join(str(exc).split())[:300]
        shown = uri if is_local_store(uri) else redact_url(uri)  # a server URL may hold credentials
        print(f"mlflow: could not log the checkpoint trend to {shown}: {type(exc).__name__}: {text}",
              file=sys.stderr, flush=True)
        return 0
