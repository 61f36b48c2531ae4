"""lm-eval's own task definitions: the TaskManager index, tasks built on local data, and
what `nel list -s lm-eval` shows.

Indexing lm-eval's ~15k task YAMLs takes seconds, so the TaskManager is made once per
process (per `include_path`).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from benchmarks.errors import NelError
from benchmarks.lm_eval.local_data import local_datasets, split_files

INSTALL_HINT = "install it with `pip install 'nel[lm-eval]'` (lm-eval==0.4.13)"


def require_lm_eval() -> None:
    """NelError (one line) when the optional `lm-eval` package is absent."""
    import importlib.util

    if importlib.util.find_spec("lm_eval") is None:
        raise NelError(f"lm-eval:// benchmarks need the lm-evaluation-harness package: "
                       f"{INSTALL_HINT}")


@functools.lru_cache(maxsize=4)
def task_manager(include_path: str | None = None) -> Any:
    """lm-eval's TaskManager over its built-in tasks plus `include_path` (local YAMLs)."""
    require_lm_eval()
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=include_path)


def load_tasks(name: str, data_dir: Path, include_path: str | None = None) -> dict[str, Any]:
    """Leaf task name -> lm-eval Task for a task, group or tag, its data read locally.

    Raises:
        NelError: an unknown task name (with suggestions) or data with no local copy.
    """
    tm = task_manager(include_path)
    if name not in tm.all_tasks and not Path(name).is_file():
        import difflib

        near = difflib.get_close_matches(name, tm.all_tasks, n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        raise NelError(f"unknown lm-eval task {name!r}{hint} (`nel list -s lm-eval` lists "
                       "the tasks whose data is here)")
    with local_datasets(data_dir):
        loaded = tm.load([name])
    tasks: dict[str, Any] = loaded["tasks"]
    return dict(sorted(tasks.items()))


def _yaml_of(tm: Any, name: str) -> dict[str, Any]:
    entry = tm.task_index.get(name)
    path = getattr(entry, "yaml_path", None)
    if path is None:
        return {}
    from lm_eval.tasks._yaml_loader import load_yaml

    try:
        cfg = load_yaml(path, resolve_func=False)
    except Exception:  # an unreadable YAML is not listed, never a crash of `nel list`
        return {}
    return cfg if isinstance(cfg, dict) else {}


def local_tasks(data_dir: Path, include_path: str | None = None) -> list[tuple[str, str, str]]:
    """(task, output type, dataset) for each leaf task whose data is here: its
    `dataset_path` has a local copy under `data_dir` or is a local builder/file."""
    tm = task_manager(include_path)
    out: list[tuple[str, str, str]] = []
    for name in tm.all_subtasks:
        cfg = _yaml_of(tm, name)
        if "include" in cfg:  # the base YAML holds dataset_path / output_type
            base = Path(tm.task_index[name].yaml_path).parent / str(cfg["include"])
            if base.is_file():
                from lm_eval.tasks._yaml_loader import load_yaml

                try:
                    cfg = {**load_yaml(base, resolve_func=False), **cfg}
                except Exception:
                    continue
        path, dname = cfg.get("dataset_path"), cfg.get("dataset_name")
        if not isinstance(path, str) or not path:
            continue
        kwargs = cfg.get("dataset_kwargs") or {}
        files = kwargs.get("data_files") if isinstance(kwargs, dict) else None
        named = list(files.values()) if isinstance(files, dict) else [files] if files else []
        local = (Path(path).is_dir() or (path in ("json", "parquet", "csv") and bool(named)
                                         and all(Path(str(f)).is_file() for f in named)))
        if local or split_files(data_dir, path, dname if isinstance(dname, str) else None):
            out.append((name, str(cfg.get("output_type", "generate_until")),
                        f"{path}" + (f"/{dname}" if dname else "")))
    return out
