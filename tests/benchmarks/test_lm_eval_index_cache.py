"""lm-eval's task index kept on disk (benchmarks/lm_eval/index_cache.py): the kept index is
the one lm-eval builds, it is used while the YAMLs are unchanged, and a changed, added or
removed YAML (or another lm-eval version) builds it again. Real lm-eval (TaskIndex.build on
real YAML files) and a real TaskManager."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from lm_eval.tasks import TaskManager
from lm_eval.tasks._index import TaskIndex

from benchmarks.lm_eval import index_cache

TASK = """task: {name}
dataset_path: json
dataset_kwargs:
  data_files: {data}
output_type: generate_until
test_split: train
doc_to_text: "Q: {{{{question}}}}\\nA:"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: exact_match
"""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NEL_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "lm-eval-index"


def _tasks(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / f"{name}.yaml").write_text(TASK.format(name=name, data=folder / "data.jsonl"))
    return folder


def _counting_build() -> tuple[list[int], object]:
    calls: list[int] = []

    def build(paths: list[Path]) -> dict:
        calls.append(1)
        return TaskIndex.build(paths)

    return calls, build


def test_the_kept_index_is_lm_evals_and_is_used_while_the_files_are_unchanged(
        tmp_path: Path, cache: Path) -> None:
    folder = _tasks(tmp_path / "tasks", "nel_kept_a", "nel_kept_b")
    calls, build = _counting_build()
    first = index_cache.cached_build(build, [folder], "0.4.13")
    again = index_cache.cached_build(build, [folder], "0.4.13")
    assert calls == [1]  # the second came from disk
    assert again == first == TaskIndex.build([folder])
    assert set(first) == {"nel_kept_a", "nel_kept_b"}
    assert len(list(cache.glob("*.pickle"))) == 1


def test_a_changed_added_or_removed_yaml_or_another_version_builds_again(
        tmp_path: Path, cache: Path) -> None:
    folder = _tasks(tmp_path / "tasks", "nel_kept_a")
    calls, build = _counting_build()
    index_cache.cached_build(build, [folder], "0.4.13")
    _tasks(folder, "nel_kept_b")  # added
    assert set(index_cache.cached_build(build, [folder], "0.4.13")) == {"nel_kept_a", "nel_kept_b"}
    path = folder / "nel_kept_a.yaml"
    path.write_text(path.read_text().replace("generate_until", "loglikelihood"))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))  # edited
    changed = index_cache.cached_build(build, [folder], "0.4.13")
    assert changed["nel_kept_a"].cfg["output_type"] == "loglikelihood"
    (folder / "nel_kept_b.yaml").unlink()  # removed
    assert set(index_cache.cached_build(build, [folder], "0.4.13")) == {"nel_kept_a"}
    index_cache.cached_build(build, [folder], "0.4.14")  # another lm-eval
    assert len(calls) == 5


def test_a_torn_cache_file_is_rebuilt_and_an_unwritable_cache_is_only_skipped(
        tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _tasks(tmp_path / "tasks", "nel_kept_a")
    calls, build = _counting_build()
    index_cache.cached_build(build, [folder], "0.4.13")
    (kept,) = cache.glob("*.pickle")
    kept.write_bytes(kept.read_bytes()[:100])  # torn
    assert set(index_cache.cached_build(build, [folder], "0.4.13")) == {"nel_kept_a"}
    assert len(calls) == 2
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("NEL_CACHE_DIR", str(blocked))
    assert set(index_cache.cached_build(build, [folder], "0.4.13")) == {"nel_kept_a"}


def test_nels_task_manager_uses_the_kept_index_and_leaves_lm_eval_as_it_was(
        tmp_path: Path, cache: Path) -> None:
    from lm_eval.tasks import manager

    folder = _tasks(tmp_path / "tasks", "nel_kept_local")
    with index_cache.index_kept_on_disk():
        tm = TaskManager(include_path=str(folder))
    assert manager.TaskIndex is TaskIndex  # swapped back
    assert "nel_kept_local" in tm.all_tasks and "gsm8k" in tm.all_tasks
    assert len(list(cache.glob("*.pickle"))) == 1
    with index_cache.index_kept_on_disk():
        again = TaskManager(include_path=str(folder))
    assert again.all_tasks == tm.all_tasks and again.task_index == tm.task_index
