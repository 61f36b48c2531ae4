"""lm-eval's own task definitions: the TaskManager index, tasks built on local data, and
what `nel list -s lm-eval` shows.

Indexing lm-eval's ~16k task YAMLs takes seconds, so the TaskManager is made once per
process (per `include_path`), from an index kept on disk between processes
(`index_cache`) when the YAMLs are unchanged.
"""

from __future__ import annotations

import functools
import re
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

    from benchmarks.lm_eval.index_cache import index_kept_on_disk

    with index_kept_on_disk():
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


_KEYS = re.compile(r"^[\"']?(dataset_path|dataset_name|output_type|include)[\"']?:[ \t]*['\"]?([^'\"#\n]*?)['\"]?[ \t]*$",
                   re.M)


def _top_keys(path: Path, depth: int = 0) -> dict[str, str]:
    """The few top-level YAML keys `local_tasks` needs, read as text (parsing ~15k YAMLs
    with their `!function` tags would take a minute), following `include:` once or twice."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return {}
    keys = {m.group(1): m.group(2).strip() for m in _KEYS.finditer(text)}
    inc = keys.pop("include", "")
    if inc and depth < 2:
        keys = {**_top_keys(path.parent / inc, depth + 1), **keys}
    return keys


def local_tasks(data_dir: Path, include_path: str | None = None) -> list[tuple[str, str, str]]:
    """(task, output type, dataset) for each leaf task whose data is here: its Hub dataset
    has a local copy under `data_dir` (see `local_data`), or its `dataset_path` is a local
    folder. Tasks whose data is given as `data_files` show only through `include_path`."""
    if not data_dir.is_dir() and include_path is None:
        return []  # nothing can be local: no need to index lm-eval's tasks
    tm = task_manager(include_path)
    out: list[tuple[str, str, str]] = []
    for name in tm.all_subtasks:
        yaml_path = getattr(tm.task_index.get(name), "yaml_path", None)
        if yaml_path is None:
            continue
        cfg = _top_keys(Path(yaml_path))
        path, dname = cfg.get("dataset_path", ""), cfg.get("dataset_name") or None
        if not path:
            continue
        in_include = include_path is not None and Path(yaml_path).is_relative_to(include_path)
        if in_include or Path(path).is_dir() or split_files(data_dir, path, dname):
            out.append((name, cfg.get("output_type") or "generate_until",
                        path + (f"/{dname}" if dname else "")))
    return out
