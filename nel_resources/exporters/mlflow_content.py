"""What one MLflow run holds for one bundle: the shared content (`bundle_content`) plus tags.

Pure (no MLflow). The run is found again on re-export by its `nel.bundle_key` tag (the
content's key): the same evaluation updates its run, a changed one (other generation settings,
another endpoint) gets a new run, since MLflow never lets a param change its value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nel_resources.exporters.bundle_content import (
    BUNDLE_ARTIFACT,
    bundle_content,
    metric_key,
    run_root,
)
from nel_resources.exporters.mlflow_settings import MlflowSettings

__all__ = ["BUNDLE_ARTIFACT", "BUNDLE_KEY_TAG", "RunContent", "metric_key", "run_content", "run_root"]

BUNDLE_KEY_TAG = "nel.bundle_key"
_TAG_MAX = 5000


@dataclass
class RunContent:
    """One bundle's MLflow run, ready to log."""

    benchmark: str
    model: str
    step: int
    run_name: str
    key: str
    params: dict[str, str]
    metrics: dict[str, float]
    tags: dict[str, str]
    artifacts: list[tuple[Path, str]] = field(default_factory=list)  # (file, its path in the run)


def run_content(doc: dict[str, Any], bundle_path: Path, settings: MlflowSettings) -> RunContent:
    """The run of the bundle document `doc` read from `bundle_path`."""
    c = bundle_content(doc, bundle_path, settings)
    tags = {BUNDLE_KEY_TAG: c.key, "nel.benchmark": c.benchmark, "nel.model": c.model,
            "nel.step": str(c.step), "job_id": c.job_id, **c.provenance_tags}
    tags.update({k: v for k, v in (settings.tags or {}).items() if v})
    return RunContent(
        benchmark=c.benchmark, model=c.model, step=c.step,
        run_name=settings.run_name or f"{c.benchmark}/{c.model}", key=c.key,
        params=c.params, metrics=c.metrics,
        tags={metric_key(k): str(v)[:_TAG_MAX] for k, v in tags.items() if v}, artifacts=c.artifacts)
