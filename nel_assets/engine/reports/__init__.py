"""Report renderers: markdown, HTML (inline SVG plots + drill-down), CSV, JSON, LaTeX.

``collect`` reads bundles and per-sample details from a result store; ``render`` turns them
into one format. No Dagster import.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nel_assets.engine.reports.html import MAX_ROWS, cap_samples, render_html
from nel_assets.engine.reports.report_images import embedded_images
from nel_assets.engine.reports.tables import render_csv, render_latex, render_markdown

__all__ = ["EXTENSIONS", "FORMATS", "collect", "render", "render_csv", "render_html", "render_json",
           "render_latex", "render_markdown"]

FORMATS = ("markdown", "html", "csv", "json", "latex")
EXTENSIONS = {"markdown": "md", "html": "html", "csv": "csv", "json": "json", "latex": "tex"}

_SAMPLE_COLUMNS = ("sample_id", "prompt", "response", "expected", "extracted", "reward",
                   "failure_category", "model_ms", "error", "images")


def render_json(bundles: Sequence[Mapping[str, Any]], comparison: Mapping[str, Any] | None = None) -> str:
    """The bundles (and comparison) as one JSON document."""
    doc: dict[str, Any] = {"bundles": list(bundles)}
    if comparison is not None:
        doc["comparison"] = comparison
    return json.dumps(doc, indent=2, sort_keys=True, default=str)


def collect(store: Any, *, models: Iterable[str] | None = None, benchmarks: Iterable[str] | None = None,
            with_samples: bool = True, max_rows: int = MAX_ROWS) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Bundles and per-sample details from a ``ResultStore``.

    Args:
        store: The result store.
        models: Only these model keys (default all).
        benchmarks: Only these benchmark folders (default all).
        with_samples: Read shard rows for the latency histogram and drill-down.
        max_rows: Drill-down rows kept per (benchmark, model).

    Returns:
        ``(bundles, details)``; ``details`` is keyed ``"<benchmark>/<model>"``.
    """
    wanted_m = None if models is None else set(models)
    bundles: list[dict[str, Any]] = []
    details: dict[str, Any] = {}
    for folder in benchmarks if benchmarks is not None else store.benchmarks():
        for m in store.models(folder):
            if wanted_m is not None and m not in wanted_m:
                continue
            b = store.read_bundle(folder, m)
            if b is None:
                continue
            bundles.append(b)
            if not with_samples:
                continue
            d = details[f"{b['benchmark']}/{b['model']}"] = sample_details(store.read_shards(folder, m), max_rows)
            # images the samples show, from the dataset's folder (stored once, named by hash)
            d["images"] = embedded_images(d["samples"], store.images_dir(folder))
    return bundles, details


def sample_details(table: Any, max_rows: int = MAX_ROWS) -> dict[str, Any]:
    """The per-sample part of a report for one (benchmark, model)'s result rows: capped
    drill-down rows, their total, and the latencies of successful requests."""
    cols = [c for c in _SAMPLE_COLUMNS if c in table.column_names]
    rows = table.select(cols).to_pylist()
    return {
        "samples": cap_samples(rows, max_rows),
        "n_total": len(rows),
        "latency_ms": [r["model_ms"] for r in rows if r.get("model_ms") is not None and r.get("error") is None],
    }


def render(fmt: str, bundles: Sequence[Mapping[str, Any]], *, details: Mapping[str, Any] | None = None,
           comparison: Mapping[str, Any] | None = None,
           trends: Sequence[Mapping[str, Any]] | None = None) -> str:
    """Render ``bundles`` in ``fmt`` (one of ``FORMATS``); ``trends`` (``checkpoint_trends``
    rows) feed the HTML report's trend section."""
    if fmt == "markdown":
        return render_markdown(bundles, comparison)
    if fmt == "html":
        return render_html(bundles, details=details, comparison=comparison, trends=trends)
    if fmt == "csv":
        return render_csv(bundles)
    if fmt == "json":
        return render_json(bundles, comparison)
    if fmt == "latex":
        return render_latex(bundles, comparison)
    raise ValueError(f"unknown report format {fmt!r} (choose from {', '.join(FORMATS)})")
