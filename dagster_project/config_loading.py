"""Which config a process uses: an explicit path, `NEL_CONFIG`, or the embedded default."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from nel_resources.checks import load_checked_config
from nel_resources.config import NelConfig


def default_config_path() -> Path:
    """The embedded default config shipped in the package."""
    return Path(str(resources.files("dagster_project") / "configs" / "default.yaml"))


def load_definitions_config(path: str | None) -> tuple[NelConfig, str]:
    """(config, output dir) for `Definitions`: `path` if given, else the embedded default."""
    cfg = load_checked_config(path or default_config_path())
    from nel_resources.run_settings import apply_data_settings

    apply_data_settings(cfg)
    return cfg, cfg.output.dir
