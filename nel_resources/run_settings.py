"""What a config sets for the whole process, and a saved run's specs for a worker.

A config names where datasets live, whether they may be downloaded, and BYOB modules that
register benchmarks; all three must be in effect before the config is resolved (a BYOB
benchmark is unknown until its module is loaded). The CLI, the Dagster definitions and a
launched worker (a container, a subprocess, a Ray task) apply them the same way, here.
"""

from __future__ import annotations

from nel_resources.config import NelConfig, load_config
from nel_resources.specs import ResolvedConfig, resolve

__all__ = ["apply_data_settings", "apply_run_settings", "load_saved_specs"]


def apply_data_settings(cfg: NelConfig) -> None:
    """The config's dataset location and download permission, for this process."""
    from benchmarks.datasets import set_allow_downloads, set_data_dir

    set_allow_downloads(cfg.allow_downloads)
    if cfg.data_dir:
        set_data_dir(cfg.data_dir)


def apply_run_settings(cfg: NelConfig) -> None:
    """The data settings, and every BYOB module the config's benchmarks name, loaded."""
    from benchmarks.plugins import load_module

    apply_data_settings(cfg)
    for bench in cfg.benchmarks:
        if bench.module:
            load_module(bench.module)


def load_saved_specs(config_path: str) -> ResolvedConfig:
    """The specs of a run's saved effective config (`<out>/nel-config.yaml`), for a worker
    that evaluates some of its partitions: the run's settings applied, then resolved.

    Raises:
        NelError: the file cannot be read or does not resolve (one line).
    """
    cfg = load_config(config_path)
    apply_run_settings(cfg)
    return resolve(cfg)
