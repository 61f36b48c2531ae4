"""NeMo Evaluator 0.3.0's result files, written from the store: `eval-<ts>-<bench>.json`,
`results.jsonl`, `trajectories.jsonl`, `runtime_stats.json` and, when some step failed,
`failure_analysis.json` (names, keys and shapes in `nemo_format.py`).

Each file is written to a temp name and renamed into place, so a crash leaves either the old
file or the new one, never a torn one (`artifacts.py` checks them on every run)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:  # only annotations: the table arrives built
    import pyarrow as pa

from nel_assets.engine import nemo_format as nf
from nel_resources.store import write_json_atomic

ARTIFACT_NAMES = ("results.jsonl", "trajectories.jsonl", "runtime_stats.json", "failure_analysis.json")


def _write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    buf: list[bytes] = []
    with open(tmp, "wb") as f:
        # Lines are built one at a time (never the whole file's dicts at once) and written
        # in batches: one write call per 1,000 lines, not two per line.
        for r in rows:
            buf.append(orjson.dumps(r, default=str, option=orjson.OPT_APPEND_NEWLINE))
            if len(buf) >= 1000:
                f.write(b"".join(buf))
                buf.clear()
        f.write(b"".join(buf))
    os.replace(tmp, path)


def _spliced(line: dict[str, Any], traj: Any) -> dict[str, Any]:
    """`line` with its `trajectory` replaced by the already-serialized ATIF document (the
    same bytes orjson would write; each document is serialized once for both files)."""
    if traj is not None and "trajectory" in line:
        line["trajectory"] = traj
    return line


def eval_file_name(bundle: dict[str, Any]) -> str:
    """`eval-<ts>-<bench>.json` of a nel bundle (its `created_at` is the timestamp)."""
    return f"{nf.run_id(bundle['benchmark'], float(bundle['created_at']))}.json"


def has_failures(table: pa.Table) -> bool:
    """Whether any step has a failure category (0.3.0 writes failure_analysis.json then)."""
    return "failure_category" in table.column_names and table.column("failure_category").null_count < table.num_rows


def write_exports(out_dir: Path, table: pa.Table, bundle: dict[str, Any], *,
                  config: dict[str, Any], nel_config: dict[str, Any] | None = None,
                  sweep: tuple[Path, ...] = ()) -> dict[str, Path]:
    """Write 0.3.0's files for one (benchmark, model) into `out_dir`; returns their paths.

    Args:
        out_dir: the benchmark's 0.3.0 folder (`ResultStore.export_dir`).
        table: every stored row of (benchmark, model).
        bundle: nel's bundle of those rows (`build_bundle`).
        config: the bundle's `config` in 0.3.0's shape (`nemo_format.run_config`).
        nel_config: nel's resolved config without secrets (kept as `nel_config`).
        sweep: folders whose 0.3.0 files go once the new ones are in place: nel's older
            `exports/<model>/`, or `<out>/<bench>/` when the benchmark gained a second
            model (0.3.0's `eval report`/`eval merge` search a directory tree for
            `eval-*.json` and `results.jsonl` and would count a stale copy).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = table.to_pylist()
    paths = {
        "eval": out_dir / eval_file_name(bundle),
        "results": out_dir / "results.jsonl",
        "trajectories": out_dir / "trajectories.jsonl",
        "runtime_stats": out_dir / "runtime_stats.json",
        "failure_analysis": out_dir / "failure_analysis.json",
    }
    trajs = [nf.atif(r) for r in rows]  # one ATIF document per step, in both files
    frags = [None if t is None else orjson.Fragment(orjson.dumps(t, default=str)) for t in trajs]
    _write_jsonl(paths["results"], (_spliced(nf.result_row(r, t), f)
                                    for r, t, f in zip(rows, trajs, frags, strict=True)))
    _write_jsonl(paths["trajectories"], (_spliced(nf.trajectory_row(r, t), f)
                                         for r, t, f in zip(rows, trajs, frags, strict=True)))
    runtime = nf.runtime_block(rows, bundle["runtime"])
    write_json_atomic(paths["runtime_stats"], runtime)
    if has_failures(table):
        write_json_atomic(paths["failure_analysis"], nf.failure_block(rows, bundle["failures"]))
    else:
        # 0.3.0 writes it only when a step failed; a stale one from an earlier run would
        # report failures this run does not have.
        paths["failure_analysis"].unlink(missing_ok=True)
        del paths["failure_analysis"]
    # The bundle last: a reader that finds it finds the files it describes.
    write_json_atomic(paths["eval"], nf.bundle_document(rows, bundle, config, nel_config, runtime=runtime))
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
    return paths
