"""The config checks that need implementations: each kind's own refusal and preflight,
asked through its registry, after the schema (nel_resources.config) has validated a config.

- `load_checked_config`: `load_config` and the load-time checks (`check_schema`: interceptor
  fields, cluster type and keys); what every entry point that reads a user's config calls.
- `check_supported`: the keys nel cannot honour yet, or that cannot run here; what a run,
  `--dry-run` and the Dagster definitions check before anything else.
"""

from __future__ import annotations

from typing import Any

from nel_resources.checks.schema import check_schema
from nel_resources.checks.supported import check_supported
from nel_resources.config import NelConfig, load_config

__all__ = ["check_schema", "check_supported", "load_checked_config"]


def load_checked_config(*args: Any, **kwargs: Any) -> NelConfig:
    """`nel_resources.config.load_config` (same arguments), then `check_schema`.

    Raises:
        ConfigError: with file:line and the key for every problem.
    """
    cfg = load_config(*args, **kwargs)
    check_schema(cfg)
    return cfg
