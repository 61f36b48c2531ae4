"""The `mlflow` exporter's settings: NeMo Evaluator 0.3.0's keys, so its configs work unchanged.

Settings come from `output.export_config.mlflow` (or a dict item of `output.export`) and from
`nel export --dest mlflow -o KEY=VALUE / -c FILE`. The keys and defaults are 0.3.0's
`MLflowExportSettings`, except the experiment's default name (`nel`) and the tracking URI:
0.3.0 refuses to run without one, nel then keeps a local SQLite store under the run's output
directory. This module imports no MLflow: the config check validates settings before a run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from benchmarks.errors import NelError

DEFAULT_EXPERIMENT = "nel"
LOCAL_STORE_DIR = "mlflow"  # under the output directory: mlflow.db and artifacts/


class MlflowSettings(BaseModel):
    """`output.export_config.mlflow` (NeMo Evaluator 0.3.0's keys)."""

    model_config = ConfigDict(extra="forbid")

    tracking_uri: str | None = Field(
        default=None, description="tracking server or store URI (an environment variable's name is "
        "read as its value); default MLFLOW_TRACKING_URI, else a SQLite store in <output>/mlflow/")
    # `experiment` is how NeMo Evaluator's docs spell it (its code takes only experiment_name)
    experiment_name: str = Field(default=DEFAULT_EXPERIMENT, min_length=1,
                                 validation_alias=AliasChoices("experiment_name", "experiment"),
                                 description="experiment the runs go to (also `experiment`)")
    log_config_params: bool = Field(default=False, description="also log the bundle's config as config.* params")
    log_config_params_max_depth: int = Field(default=10, ge=1, description="nesting depth of config.* params")
    skip_existing: bool = Field(default=False, description="leave a bundle's existing run untouched")
    run_name: str | None = Field(default=None, description="run name (default <benchmark>/<model>)")
    description: str | None = Field(default=None, description="the run's note")
    tags: dict[str, str] | None = Field(default=None, description="extra run tags")
    extra_metadata: dict[str, Any] | None = Field(default=None, description="extra run params")
    copy_artifacts: bool = Field(default=True, description="log the bundle, results and report as artifacts")
    only_required: bool = Field(default=True, description="only eval-*.json, results.jsonl and the report "
                                "(false: the other 0.3.0 files beside the bundle too)")
    copy_logs: bool = Field(default=False, description="also log the run's logs/ folder")
    exclude_patterns: list[str] = Field(default_factory=list, description="file name patterns not logged")
    # 0.3.0 emits one MLflow trace per sample by default; nel only when asked (`true`): a
    # trace is several tracking-server calls per sample, and the samples are in the
    # results.jsonl artifact either way (mlflow_traces).
    emit_traces: bool | None = Field(default=None, description="one MLflow trace per sample, linked "
                                     "to the run (default: off; 0.3.0's default is on)")
    emit_traces_max_samples: int | None = Field(default=None, ge=0, description="at most this many "
                                                "samples get a trace (default: all)")
    emit_traces_content_max: int = Field(default=4000, ge=1, description="characters kept of each "
                                         "text in a trace (prompt, answer, details)")


def parse_settings(settings: dict[str, Any]) -> MlflowSettings:
    """The validated settings.

    Raises:
        NelError: one line naming the first bad key and what to write.
    """
    try:
        parsed = MlflowSettings.model_validate(settings)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err.get("loc", ())) or "?"
        if err.get("type") == "extra_forbidden":
            known = ", ".join(MlflowSettings.model_fields)
            raise NelError(f"mlflow exporter: unknown setting {key!r}; the settings are {known}") from None
        raise NelError(f"mlflow exporter: setting {key!r}: {err.get('msg')}") from None
    return parsed


def tracking_uri(settings: MlflowSettings, output_dir: Path) -> str:
    """Where the runs go: the setting, else MLFLOW_TRACKING_URI, else `output_dir`'s store.

    As in 0.3.0, a setting without `://` that names an environment variable is read as
    that variable's value (`tracking_uri: MY_MLFLOW_URI`).
    """
    uri = settings.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or ""
    if uri and "://" not in uri:
        uri = os.environ.get(uri, uri)
    if not uri:
        return "sqlite:///" + str((output_dir / LOCAL_STORE_DIR / "mlflow.db").resolve())
    return uri.rstrip("/")


def is_local_store(uri: str) -> bool:
    """A SQLite database or a folder on this machine (no server to reach)."""
    return uri.startswith(("sqlite:", "file:")) or "://" not in uri


def local_artifact_root(uri: str) -> str | None:
    """Where a local store's artifacts go: beside its database or inside its folder.

    MLflow's default for a SQLite store is `./mlruns` in the current directory, which would
    scatter artifacts wherever `nel` happened to run; a server decides for itself (None).
    """
    if uri.startswith("sqlite:///"):
        db = Path(uri.removeprefix("sqlite:///"))
        db = db if db.is_absolute() else Path.cwd() / db  # sqlite:///rel.db is relative
        return (db.parent / "artifacts").resolve().as_uri()
    return None
