"""Per-(benchmark, model) reports rendered from bundles.

``render_markdown`` and ``render_json`` are the entry points the asset factory and the CLI
call; every format lives in ``nel_assets.engine.reports`` (markdown, HTML with inline SVG
plots, CSV, JSON, LaTeX).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nel_assets.engine.reports import render, render_csv, render_html, render_json, render_latex
from nel_assets.engine.reports.tables import render_markdown as _render_markdown

__all__ = ["render", "render_csv", "render_html", "render_json", "render_latex", "render_markdown"]


def render_markdown(bundles: Sequence[Mapping[str, Any]], comparison: Mapping[str, Any] | None = None) -> str:
    """A markdown report for one or more bundles (plus a comparison section when given)."""
    return _render_markdown(bundles, comparison)
