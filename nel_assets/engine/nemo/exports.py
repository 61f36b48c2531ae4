"""NeMo Evaluator 0.3.0's result files, written from the store: `eval-<ts>-<bench>.json`,
`results.jsonl`, `trajectories.jsonl`, `runtime_stats.json` and, when some step failed,
`failure_analysis.json` (names, keys and shapes in `nemo_format.py`).

Each file is written to a temp name and renamed into place, so a crash leaves either the old
file or the new one, never a torn one (`artifacts.py` checks them on every run)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # only annotations: the table arrives built
    import pyarrow as pa

import orjson

from nel_assets.engine.nemo import nemo_bundle as nb
from nel_assets.engine.nemo import nemo_format as nf
from nel_resources.storage.store import write_json_atomic

ARTIFACT_NAMES = ("results.jsonl", "trajectories.jsonl", "runtime_stats.json", "failure_analysis.json")


# The columns the run-level documents read as rows (failure_analysis, the eval JSON's
# scores): not the texts, which only the per-line files need, nor those `runtime_block`
# sums straight from the table.
_SUMMARY_COLUMNS = ("problem_idx", "repeat", "reward", "error", "failure_category", "category", "details")
_BATCH_ROWS = 256  # rows turned into Python objects at a time (one write call per file each)


def _write_line_files(results: Path, trajectories: Path, batches: Iterable[pa.RecordBatch]
                      | Callable[[int], Iterable[pa.RecordBatch]], *, messages: bool = False,
                      n_rows: int = 0) -> None:
    """`results.jsonl` and `trajectories.jsonl`, written side by side batch by batch.

    Only one batch of rows exists as Python objects at a time (never the whole table's);
    `nemo_lines` builds both lines of a row from the batch's columns. `batches` may be a
    function of a start row returning the rows from there on: with `n_rows` of at least
    `line_halves.SPLIT_MIN_ROWS`, where a fork is safe, a forked child then writes the
    second half (`line_halves`).
    """
    from nel_assets.engine.evaluation.forked import can_fork
    from nel_assets.engine.nemo.line_halves import (
        SPLIT_MIN_ROWS,
        write_lines,
        write_lines_in_halves,
    )

    tmp_r = results.with_name(f".{results.name}.tmp{os.getpid()}")
    tmp_t = trajectories.with_name(f".{trajectories.name}.tmp{os.getpid()}")
    if callable(batches) and n_rows >= SPLIT_MIN_ROWS and can_fork():
        write_lines_in_halves(tmp_r, tmp_t, batches, n_rows, messages=messages)
    else:
        write_lines(tmp_r, tmp_t, batches(0) if callable(batches) else batches, messages=messages)
    os.replace(tmp_r, results)
    os.replace(tmp_t, trajectories)


def eval_file_name(bundle: dict[str, Any]) -> str:
    """`eval-<ts>-<bench>.json` of a nel bundle (its `created_at` is the timestamp)."""
    return f"{nf.run_id(bundle['benchmark'], float(bundle['created_at']))}.json"


def has_failures(table: pa.Table) -> bool:
    """Whether any step has a failure category (0.3.0 writes failure_analysis.json then)."""
    return "failure_category" in table.column_names and table.column("failure_category").null_count < table.num_rows


def move_other_model_exports(bench_dir: Path, model: str, place: Callable[[str], Path]) -> None:
    """Move another model's 0.3.0 files out of the benchmark folder, into `place(owner)`.

    The benchmark folder holds the files of the benchmark's only model; once a second model
    arrives every model has its own folder. The first model's files move there whole
    (renames), before the second model's export sweeps the benchmark folder: the sweep used
    to delete them, so a run of model B lost model A's exports, sequential runs included.
    The owner is the `model` its eval file names; the current model's own files stay (the
    sweep takes them).
    """
    evals = list(bench_dir.glob("eval-*.json"))
    if len(evals) != 1:
        return
    try:
        owner = orjson.loads(evals[0].read_bytes()).get("model")
    except (OSError, orjson.JSONDecodeError, AttributeError):
        return  # torn or foreign: the sweep and the artifact check deal with it
    if not isinstance(owner, str) or owner == model:
        return
    dest = place(owner)
    if dest == bench_dir:
        return
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("eval-*.json"):
        old.unlink()  # 0.3.0's tools skip a folder with two bundles
    for name in ARTIFACT_NAMES:
        if (bench_dir / name).exists():
            os.replace(bench_dir / name, dest / name)
        else:
            (dest / name).unlink(missing_ok=True)  # not part of the moved set
    os.replace(evals[0], dest / evals[0].name)  # the bundle last, as write_exports does


def write_exports(out_dir: Path, table: pa.Table, bundle: dict[str, Any], *,
                  config: dict[str, Any], nel_config: dict[str, Any] | None = None,
                  sweep: tuple[Path, ...] = (),
                  batches: Iterable[pa.RecordBatch] | Callable[[int], Iterable[pa.RecordBatch]]
                  | None = None) -> dict[str, Path]:
    """Write 0.3.0's files for one (benchmark, model) into `out_dir`; returns their paths.

    Args:
        out_dir: the benchmark's 0.3.0 folder (`ResultStore.export_dir`).
        table: every stored row of (benchmark, model): all columns, or at least
            `bundle.BUNDLE_COLUMNS` when `batches` brings the rows.
        bundle: nel's bundle of those rows (`build_bundle`).
        config: the bundle's `config` in 0.3.0's shape (`nemo_format.run_config`).
        nel_config: nel's resolved config without secrets (kept as `nel_config`); its
            `output.trajectory_messages` adds nel's `messages` key to trajectory lines.
        sweep: folders whose 0.3.0 files go once the new ones are in place: nel's older
            `exports/<model>/`, or `<out>/<bench>/` when the benchmark gained a second
            model (0.3.0's `eval report`/`eval merge` search a directory tree for
            `eval-*.json` and `results.jsonl` and would count a stale copy).
        batches: the same rows with every column, in the same order, a batch at a time
            (`ResultStore.iter_shard_batches`), or a function of a start row returning the
            rows from there on (then the line files of a large table are written by two
            processes); default: `table`'s rows.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "eval": out_dir / eval_file_name(bundle),
        "results": out_dir / "results.jsonl",
        "trajectories": out_dir / "trajectories.jsonl",
        "runtime_stats": out_dir / "runtime_stats.json",
        "failure_analysis": out_dir / "failure_analysis.json",
    }
    # The run-level documents first: they read a few short columns, as dicts only until the
    # documents are built, and the per-line files then reuse that memory.
    runtime = nb.runtime_block(table, bundle["runtime"])
    # numpy arrays and codes, not a dict per row (~500 MB at 1,000,000 rows)
    steps = nb.step_columns(table.select([c for c in _SUMMARY_COLUMNS if c in table.column_names]))
    failures = nb.failure_block(steps, bundle["failures"]) if has_failures(table) else None
    eval_doc = nb.bundle_document(steps, bundle, config, nel_config, runtime=runtime)
    del steps
    _write_line_files(paths["results"], paths["trajectories"],
                      table.to_batches(max_chunksize=_BATCH_ROWS) if batches is None else batches,
                      messages=bool(((nel_config or {}).get("output") or {}).get("trajectory_messages")),
                      n_rows=table.num_rows)
    write_json_atomic(paths["runtime_stats"], runtime)
    if failures is not None:
        write_json_atomic(paths["failure_analysis"], failures)
    else:
        # 0.3.0 writes it only when a step failed; a stale one from an earlier run would
        # report failures this run does not have.
        paths["failure_analysis"].unlink(missing_ok=True)
        del paths["failure_analysis"]
    # The bundle last: a reader that finds it finds the files it describes.
    write_json_atomic(paths["eval"], eval_doc)
    # Old files go only once the new ones are in place: a crash above leaves the previous
    # complete set, never a gap. Temp files of a writer that died are swept too. 0.3.0's
    # tools skip a folder holding two bundles, so there is only ever one.
    for old in [*out_dir.glob("eval-*.json"), *out_dir.glob(".*.tmp*")]:
        if old != paths["eval"]:
            old.unlink(missing_ok=True)
    for d in sweep:
        if d != out_dir and d.is_dir():
            for old in [*d.glob("eval-*.json"), *(d / n for n in ARTIFACT_NAMES)]:
                old.unlink(missing_ok=True)
    run_exporters(paths["eval"], (nel_config or {}).get("output") or {})
    return paths


def run_exporters(bundle_path: Path, output: dict[str, Any]) -> None:
    """Run the exporters a config's `output.export` names on one written bundle, each with
    its `output.export_config.<name>` settings (the exporter registry loads each on use)."""
    from nel_resources.exporters import EXPORTERS

    for item in output.get("export") or []:
        name = str(item.get("type") if isinstance(item, dict) else item)
        settings = {**((output.get("export_config") or {}).get(name) or {}),
                    **({k: v for k, v in item.items() if k != "type"} if isinstance(item, dict) else {})}
        EXPORTERS.load(name)([bundle_path], settings, None)
