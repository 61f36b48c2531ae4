"""The `wandb` exporter's settings: NeMo Evaluator 0.3.0's keys, so its configs work unchanged.

Settings come from `output.export_config.wandb` (or a dict item of `output.export`) and from
`nel export --dest wandb -o KEY=VALUE / -c FILE`. 0.3.0's `WandBExporter` takes `project`,
`entity` and `tags`; nel adds the mode (offline unless told otherwise), where the run files
go, the run's name, group, job type and notes, and the content keys it shares with the mlflow
exporter (`bundle_content`). 0.3.0 silently ignores any other key; nel refuses it in one line,
so a misspelt setting is never silently dropped. This module imports no wandb.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator

from benchmarks.errors import NelError

DEFAULT_PROJECT = "nel"
_TAG_MAX = 64  # W&B refuses a longer tag
# WANDB_MODE values and what they mean here; "disabled" / "shared" write no offline run files.
_ENV_MODES = {"offline": "offline", "dryrun": "offline", "online": "online", "run": "online"}


class WandbSettings(BaseModel):
    """`output.export_config.wandb` (NeMo Evaluator 0.3.0's keys and nel's)."""

    model_config = ConfigDict(extra="forbid")

    project: str = Field(default=DEFAULT_PROJECT, min_length=1, description="W&B project of the runs")
    entity: str | None = Field(default=None, description="W&B entity (user or team) of the runs")
    tags: list[str] | None = Field(default=None, description="run tags (at most 64 characters each)")
    mode: Literal["offline", "online"] | None = Field(
        default=None, description="offline (the default: run files only, nothing leaves the machine; "
        "`wandb sync` uploads them later) or online; default WANDB_MODE, else offline")
    dir: str | None = Field(default=None, description="folder whose wandb/ holds the run files "
                            "(default: the run's output directory)")
    run_name: str | None = Field(default=None, validation_alias=AliasChoices("run_name", "name"),
                                 description="run name (also `name`; default <benchmark>/<model>)")
    group: str | None = Field(default=None, description="run group")
    job_type: str | None = Field(default=None, description="run job type")
    notes: str | None = Field(default=None, validation_alias=AliasChoices("notes", "description"),
                              description="the run's notes (also `description`)")
    log_config_params: bool = Field(default=False, description="also put the bundle's config in the run config as config.*")
    log_config_params_max_depth: int = Field(default=10, ge=1, description="nesting depth of config.* keys")
    extra_metadata: dict[str, Any] | None = Field(default=None, description="extra run config entries")
    copy_artifacts: bool = Field(default=True, description="save the bundle, results and report as run files")
    only_required: bool = Field(default=True, description="only eval-*.json, results.jsonl and the report "
                                "(false: the other 0.3.0 files beside the bundle too)")
    copy_logs: bool = Field(default=False, description="also save the run's logs/ folder")
    exclude_patterns: list[str] = Field(default_factory=list, description="file name patterns not saved")

    @field_validator("tags")
    @classmethod
    def _short_tags(cls, tags: list[str] | None) -> list[str] | None:
        for tag in tags or []:
            if not tag or len(tag) > _TAG_MAX:
                raise ValueError(f"tag {tag!r} must be 1 to {_TAG_MAX} characters (W&B's limit)")
        return tags


def parse_settings(settings: dict[str, Any]) -> WandbSettings:
    """The validated settings.

    Raises:
        NelError: one line naming the first bad key and what to write.
    """
    try:
        return WandbSettings.model_validate(settings)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err.get("loc", ())) or "?"
        if err.get("type") == "extra_forbidden":
            known = ", ".join(WandbSettings.model_fields)
            raise NelError(f"wandb exporter: unknown setting {key!r}; the settings are {known}") from None
        msg = str(err.get("msg")).removeprefix("Value error, ")
        raise NelError(f"wandb exporter: setting {key!r}: {msg}") from None


def run_mode(settings: WandbSettings) -> Literal["offline", "online"]:
    """offline or online: the setting, else WANDB_MODE, else offline (no account, no network).

    Raises:
        NelError: WANDB_MODE names a mode that writes no run (disabled) or is unknown.
    """
    if settings.mode:
        return settings.mode
    env = os.environ.get("WANDB_MODE", "").strip().lower()
    if not env:
        return "offline"
    if env not in _ENV_MODES:
        raise NelError(f"WANDB_MODE={env} is not a mode the wandb exporter writes; unset it or set "
                       "offline or online (or the exporter's `mode` setting)")
    return _ENV_MODES[env]  # type: ignore[return-value]


def run_dir(settings: WandbSettings, output_dir: Path) -> Path:
    """The folder whose `wandb/` holds the run files: the setting, else the run's output dir."""
    return Path(settings.dir).expanduser().resolve() if settings.dir else output_dir.resolve()
