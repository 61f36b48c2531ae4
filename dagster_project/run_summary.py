"""What a run reports: its outcome per benchmark, the summary `nel eval run` prints and
exits with, and the files written from it (`checkpoint.json`, `report.<ext>`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.uri_schemes import is_uri
from dagster_project import exit_codes
from dagster_project.checkpoint import BenchFailure, checkpoint_doc, checkpoint_path
from dagster_project.run_output import os_reason
from nel_resources.specs import ResolvedConfig


@dataclass
class BenchOutcome:
    """What happened to one benchmark in a run."""

    benchmark: str
    shards_total: int = 0
    shards_run: list[tuple[str, int]] = field(default_factory=list)
    shards_fresh: int = 0
    requests_sent: int = 0
    bundles: dict[str, dict[str, Any]] = field(default_factory=dict)
    exports: dict[str, str] = field(default_factory=dict)
    # model -> what was missing or torn in its bundle/report/exports (rebuilt from the store)
    artifacts_rebuilt: dict[str, list[str]] = field(default_factory=dict)
    # "model/shard" -> why it ran (the planner's reason, e.g. "3 failed samples to retry")
    run_reasons: dict[str, str] = field(default_factory=dict)


@dataclass
class RunSummary:
    """The result of `run_eval`."""

    output_dir: Path
    dagster_home: Path
    benchmarks: list[BenchOutcome]
    elapsed_s: float
    dagster_runs: int
    gates: dict[str, dict[str, Any]] = field(default_factory=dict)
    failures: list[BenchFailure] = field(default_factory=list)
    log_path: Path | None = None
    checkpoint_path: Path | None = None

    @property
    def exit_status(self) -> int:
        """The status `nel eval run` exits with (see dagster_project.exit_codes)."""
        return exit_codes.eval_run_status(len(self.failures), (g.get("decision") for g in self.gates.values()),
                                          budget_only=all(f.stage == "budget" for f in self.failures))


def drop_empty_models(bench: str, tasks: list[Any], failures: list[BenchFailure]) -> list[Any]:
    """A model with no problem to evaluate (max_problems / problem_range select none) is a
    failure, not a silent success; its tasks are dropped."""
    if is_uri(bench, "container"):
        return tasks  # the harness image picks its own problems
    models = {t.model for t in tasks}
    empty = sorted(m for m in models if not any(t.indices for t in tasks if t.model == m))
    for m in empty:
        failures.append(BenchFailure(bench, m, "nothing to evaluate: no problem selected "
                                     "(check max_problems / problem_range)", "plan"))
    return [t for t in tasks if t.model not in empty]


def all_samples_failed(bundle: dict[str, Any]) -> str | None:
    """A one-line reason when no sample of a bundle could be scored, else None."""
    s = bundle.get("score") or {}
    n_failed = int(s.get("n_failed_samples") or 0)
    if s.get("n_samples") or not n_failed:
        return None
    first = ""
    for cat in (bundle.get("failures") or {}).get("categories", {}).values():
        for ex in cat.get("examples", []):
            if ex.get("error"):
                first = str(ex["error"]).strip().splitlines()[0][:200]
                break
        if first:
            break
    return f"every sample failed ({n_failed} of {n_failed})" + (f"; first error: {first}" if first else "")


def failed_models(failures: list[BenchFailure]) -> set[str]:
    return {f.model for f in failures}


def write_checkpoint(summary: RunSummary, started: float) -> Path | None:
    """Write `<out>/checkpoint.json`; a write error becomes one more failure."""
    from nel_resources.storage.store import write_json_atomic

    completed = []
    for oc in summary.benchmarks:
        for m, b in sorted(oc.bundles.items()):
            s = b.get("score") or {}
            # `bundle_path` is the benchmark's folder, as NeMo Evaluator records it (its
            # --resume reads the eval-*.json there); nel's own bundle file is `nel_bundle_path`.
            completed.append({"name": oc.benchmark, "model": m,
                              "bundle_path": oc.exports.get(m) or str(summary.output_dir / oc.benchmark),
                              "nel_bundle_path": str(
                                  summary.output_dir / oc.benchmark / "bundle" / f"model={m}" / "bundle.json"),
                              "score": s.get("mean"),
                              "n_samples": s.get("n_samples"), "n_failed_samples": s.get("n_failed_samples")})
    failed_pairs = {(f.benchmark, f.model) for f in summary.failures}
    completed = [c for c in completed if (c["name"], c["model"]) not in failed_pairs]
    path = checkpoint_path(summary.output_dir)
    doc = checkpoint_doc(started_at=started, finished_at=time.time(), completed=completed,
                         failed=summary.failures, gates=summary.gates,
                         exit_status=summary.exit_status, log=summary.log_path or Path())
    try:
        write_json_atomic(path, doc)
    except OSError as exc:
        summary.failures.append(BenchFailure("*", "*", f"cannot write {path}: {os_reason(exc)}", "run"))
        return None
    return path


def write_run_reports(formats: list[str], store: Any, summary: RunSummary) -> None:
    """`<out>/report.<ext>` per `output.report` format over every bundle in the output
    directory, as NeMo Evaluator writes them after a run; a write error is one more failure."""
    if not formats:
        return  # before the imports: an unchanged rerun loads neither pyarrow nor numpy
    from nel_assets.engine.reports import EXTENSIONS, collect, render
    from nel_assets.engine.results.trend_store import read_trend_rows
    from nel_resources.storage.store import write_text_atomic

    bundles, details = collect(store, with_samples="html" in formats)
    if not bundles:
        return
    for fmt in formats:
        path = summary.output_dir / f"report.{EXTENSIONS[fmt]}"
        try:
            write_text_atomic(path, render(fmt, bundles, details=details, trends=read_trend_rows(store.root)))
        except OSError as exc:
            summary.failures.append(BenchFailure("*", "*", f"cannot write {path}: {os_reason(exc)}", "run"))


def missing_comparisons(resolved: ResolvedConfig, store: Any) -> bool:
    from nel_assets.comparison_assets import comparison_dir
    from nel_assets.engine.results.artifacts import json_problem

    baseline = resolved.comparison.baseline
    return any(json_problem(comparison_dir(store.root, m) / "regression.json") is not None
               for m in resolved.models if m != baseline)


def stored_gates(resolved: ResolvedConfig, store: Any, failed: set[str]) -> dict[str, dict[str, Any]]:
    """The gate decisions already on disk (an up-to-date rerun reports them too), except for
    candidates compared against a side that failed in this run."""
    from nel_assets.comparison_assets import comparison_dir
    from nel_assets.engine.results.artifacts import read_json

    out: dict[str, dict[str, Any]] = {}
    baseline = resolved.comparison.baseline or ""
    if baseline in failed:
        return out
    for b in resolved.benchmarks:
        for m in b.models:
            p = comparison_dir(store.root, m) / "regression.json"
            doc = read_json(p) if m != baseline and m not in out and m not in failed else None
            if isinstance(doc, dict):
                g = doc.get("gate") or {}
                out[m] = {"decision": g.get("decision"), "baseline": baseline, "details": {}}
    return out
