"""Dagster entry point: `dagster dev -m dagster_project.definitions`.

Builds the asset graph from the config named by `NEL_CONFIG` (a YAML path), or from the
embedded default config (the tiny llama.cpp model on GSM8K) when it is unset, and adds
what makes it operable: launched-service resources, the checkpoint sensor, declarative
automation and the CI jobs (`evaluate`, `compare`, `gate`).

The user's `nel config` values are defaults for unset `NEL_*` variables here too, so
`dagster dev` sees the same data and model as the `make run` that recorded them. Loading
never touches the network: benchmark data is looked up locally only (a benchmark whose
data is absent still gets its assets, fingerprinted as unloaded).
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from benchmarks.datasets import hub_local_only
from dagster_project.automation import automation_sensor, with_automation
from dagster_project.config_loading import load_definitions_config
from dagster_project.jobs import build_jobs
from dagster_project.run_validation import validate_before_run
from dagster_project.sensors import (
    build_checkpoint_sensor,
    checkpoints_enabled,
    with_checkpoint_services,
)
from nel_assets.factory import build_defs
from nel_resources.config import NelConfig
from nel_resources.launchers.registry import get_launcher
from nel_resources.runtime.user_config import apply_user_config
from nel_resources.services.launch import launched_resources
from nel_resources.specs import resolve


def build_definitions(cfg: NelConfig, output_dir: str) -> dg.Definitions:
    """The full Definitions for a config (assets, checks, resources, sensors, jobs).

    The config goes through the same checks and resolution as `nel eval run` and its
    `--dry-run` (validate_before_run), so the definitions accept and refuse exactly the
    configs the CLI does, with the same one-line message; then it is resolved, once, into
    run specs with a service per checkpoint already on disk. Everything below takes specs.

    Raises:
        NelError: the config cannot run (one line naming what to fix).
    """
    validate_before_run(cfg)
    full_cfg = with_checkpoint_services(cfg)
    full = resolve(full_cfg)
    base = build_defs(full, output_dir)
    resources = launched_resources(full, dict(base.resources or {}), Path(output_dir) / "logs")
    # The cluster type's own resources (the SLURM launcher `nel eval run` uses), shown in the UI.
    resources.update(get_launcher(cfg.cluster.type).resources())
    assets = with_automation(list(base.assets or []))
    checks = list(base.asset_checks or [])
    sensors: list[dg.SensorDefinition] = [
        automation_sensor(min(30, cfg.checkpoints.interval_seconds))]
    if checkpoints_enabled(full):
        sensors.append(build_checkpoint_sensor(cfg, output_dir))
    return dg.Definitions(assets=assets, asset_checks=checks, resources=resources, sensors=sensors,
                          jobs=build_jobs(full_cfg, full, [*assets, *checks], resources))


def load_definitions() -> dg.Definitions:
    """The Definitions of `NEL_CONFIG` (or the embedded default), built offline."""
    apply_user_config()
    with hub_local_only():
        return build_definitions(*load_definitions_config(os.environ.get("NEL_CONFIG")))


defs: dg.Definitions = load_definitions()
