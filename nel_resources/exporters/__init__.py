"""Exporters: a run's results written for another tool (`output.export`, `nel export --dest`).

`EXPORTERS` maps a name to its `export(bundles, settings, output_dir) -> int` function,
imported on first use; `KNOWN_EXPORTERS` are the names NeMo Evaluator 0.3.0 has, so a config
naming one nel has not built yet is refused as "not supported yet" rather than unknown.
This module imports nothing heavy: the config package asks it which names exist and which
are built. A new exporter is its own module plus one line in `EXPORTERS`; its module may
define `check_settings(settings) -> str | None` (the problem, in one line), which the config
check asks before a run (`check_settings` here).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.errors import NelError
from benchmarks.registries import Registry

#: An exporter: (the `eval-*.json` bundles, its settings, an output dir or None) -> exit status.
Exporter = Callable[[list[Path], dict[str, Any], "str | None"], int]

EXPORTERS: Registry[Exporter] = Registry("exporter", {
    "every_eval_ever": "nel_resources.exporters.every_eval_ever:export",
    "inspect": "nel_resources.exporters.inspect_log:export",
    "mlflow": "nel_resources.exporters.mlflow_export:export",
    "wandb": "nel_resources.exporters.wandb_export:export",
})
#: Every exporter name a config may write (NeMo Evaluator 0.3.0's, and nel's own).
KNOWN_EXPORTERS: tuple[str, ...] = tuple(sorted({"inspect", "mlflow", "wandb", *EXPORTERS}))


def is_built(name: str) -> bool:
    """True when nel has exporter `name` (a known name it has not built is False)."""
    return name in EXPORTERS


def check_settings(name: str, settings: dict[str, Any]) -> str | None:
    """What is wrong with built exporter `name`'s settings, in one line, or None.

    Asks the exporter's module: its `check_settings(settings) -> str | None`, else its
    `parse_settings(settings)` (a NelError's one line is the problem); an exporter with
    neither takes any settings.
    """
    check = EXPORTERS.module_attr(name, "check_settings")
    if check is not None:
        return check(settings)
    parse = EXPORTERS.module_attr(name, "parse_settings")
    if parse is None:
        return None
    try:
        parse(settings)
    except NelError as exc:
        return str(exc)
    return None
