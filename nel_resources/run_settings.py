"""What a config sets for the whole process, and a saved run's specs for a worker.

A config names where datasets live, whether they may be downloaded, and BYOB modules that
register benchmarks; all three must be in effect before the config is resolved (a BYOB
benchmark is unknown until its module is loaded). The CLI, the Dagster definitions and a
launched worker (a container, a subprocess, a Ray task) apply them the same way, here.
"""

from __future__ import annotations

from pathlib import Path

from nel_resources.config import ConfigError, NelConfig, load_config
from nel_resources.specs import ResolvedConfig, resolve

__all__ = ["apply_data_settings", "apply_run_settings", "load_saved_specs", "name_benchmark_files"]


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
    name_benchmark_files(cfg)
    for bench in cfg.benchmarks:
        if bench.module:
            load_module(bench.module)


def name_benchmark_files(cfg: NelConfig) -> None:
    """`name: ./file.py` (NeMo Evaluator's spelling of a BYOB benchmark) becomes the name the
    file registers, with the file as the entry's `module`: results, exports, compare and gate
    policies then know the benchmark by the name the file gives it, as NeMo Evaluator does."""
    from benchmarks._registry import is_file_reference
    from benchmarks.errors import NelError
    from benchmarks.plugins import resolve_benchmark_ref

    for i, b in enumerate(cfg.benchmarks):
        if b.module is not None or not is_file_reference(b.name):
            continue
        ref = b.name
        file_part = ref.rpartition(":")[0] if ".py:" in ref else ref
        base = Path(cfg._where).resolve().parent if cfg._where != "<config>" else None
        if base is not None and not Path(file_part).expanduser().is_absolute() \
                and not Path(file_part).exists() and (base / file_part).exists():
            ref = str(base / ref)
            file_part = str(base / file_part)
        try:
            name = resolve_benchmark_ref(ref)
        except NelError as exc:
            line = cfg.line_of("benchmarks", i, "name")
            raise ConfigError(f"{cfg._where}:{line or '?'}: benchmarks[{i}].name: {exc}") from None
        # absolute: the saved config (`<out>/nel-config.yaml`) works from any directory
        module = str(Path(file_part).expanduser().resolve())
        cfg.benchmarks[i] = b.model_copy(update={"name": name, "module": module})


def load_saved_specs(config_path: str) -> ResolvedConfig:
    """The specs of a run's saved effective config (`<out>/nel-config.yaml`), for a worker
    that evaluates some of its partitions: the run's settings applied, then resolved.

    Raises:
        NelError: the file cannot be read or does not resolve (one line).
    """
    cfg = load_config(config_path)
    apply_run_settings(cfg)
    return resolve(cfg)
