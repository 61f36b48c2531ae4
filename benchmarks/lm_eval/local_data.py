"""Where an lm-eval task's data comes from here: local files only, never the Hub.

lm-eval tasks name a Hugging Face dataset (`dataset_path: cais/mmlu`, `dataset_name:
abstract_algebra`) and call `datasets.load_dataset` for it. nel downloads nothing, so while
tasks are built, `load_dataset` is pointed at a local copy laid out like the Hub id:

    <data_dir>/<dataset_path>/<dataset_name>/<split>.{jsonl,json,parquet,csv}
    <data_dir>/<dataset_path>/<split>.{...}            (a dataset without a name)

A task whose `dataset_path` is already local (`json`/`parquet`/`csv` with `data_files` in
its `dataset_kwargs`, or a local directory, as in an `include_path` task YAML) is loaded
as written, offline.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.errors import DataMissingError

# Nothing downloads: set before `datasets` is imported (it reads these once, at import).
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

#: File suffix -> the `datasets` builder that reads it.
BUILDERS: dict[str, str] = {".jsonl": "json", ".json": "json", ".parquet": "parquet",
                            ".csv": "csv"}
_LOCAL_BUILDERS = frozenset({"json", "parquet", "csv", "text", "arrow"})


def default_data_dir() -> Path:
    """`NEL_LM_EVAL_DATA_DIR`, else `$NEL_DATA_DIR/lm_eval`, else `~/.cache/nel/lm_eval`."""
    given = os.environ.get("NEL_LM_EVAL_DATA_DIR")
    if given:
        return Path(given).expanduser()
    base = os.environ.get("NEL_DATA_DIR")
    return (Path(base).expanduser() / "lm_eval") if base else Path.home() / ".cache/nel/lm_eval"


def split_files(data_dir: Path, path: str, name: str | None) -> dict[str, str]:
    """Split -> file for a Hub dataset id's local copy under `data_dir` ({} when absent)."""
    folder = data_dir / path / name if name else data_dir / path
    if not folder.is_dir() and name is None:
        folder = data_dir / path / "default"
    files: dict[str, str] = {}
    if folder.is_dir():
        for f in sorted(folder.iterdir()):
            if f.suffix in BUILDERS and f.stem not in files:
                files[f.stem] = str(f)
    return files


def where_to_put(data_dir: Path, path: str, name: str | None) -> str:
    """The one-line fix for a missing local copy."""
    folder = data_dir / path / name if name else data_dir / path
    return (f"put its splits at {folder}/<split>.jsonl (or .parquet/.csv), or set "
            "`params: {data_dir: ...}` / NEL_LM_EVAL_DATA_DIR to the folder holding "
            f"{path}/")


class MissingTaskData(DataMissingError):
    """An lm-eval task's dataset has no local copy (nel downloads nothing); a dry run plans
    the task and lists this check."""


@contextlib.contextmanager
def local_datasets(data_dir: Path) -> Iterator[None]:
    """Within the block, `datasets.load_dataset` reads Hub ids from `data_dir`.

    lm-eval calls `datasets.load_dataset` inside each task's constructor and offers no
    hook for a per-task data location; this swaps the function for the duration of task
    construction only (one thread, at environment load) and restores it after.
    """
    import datasets

    real = datasets.load_dataset

    def load(path: str, name: str | None = None, **kwargs: Any) -> Any:
        if path in _LOCAL_BUILDERS or Path(path).exists():
            return real(path, name, **kwargs)  # already local: as written, offline
        files = split_files(data_dir, path, name)
        if not files:
            what = f"{path}" + (f" ({name})" if name else "")
            raise MissingTaskData(f"lm-eval dataset {what} has no local copy and nel "
                                  f"downloads nothing: {where_to_put(data_dir, path, name)}")
        suffix = Path(next(iter(files.values()))).suffix
        kwargs.pop("data_files", None)
        kwargs.pop("trust_remote_code", None)
        return real(BUILDERS[suffix], data_files=files, **kwargs)

    datasets.load_dataset = load
    try:
        yield
    finally:
        datasets.load_dataset = real
