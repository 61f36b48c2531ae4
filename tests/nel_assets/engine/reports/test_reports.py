"""Report renderers on synthetic bundles: every format, escaping, plots, drill-down cap."""

from __future__ import annotations

import csv
import io
import json
import re

import numpy as np
import pyarrow as pa
import pytest

from nel_assets.engine.reports import FORMATS, render
from nel_assets.engine.reports.html import cap_samples
from nel_assets.engine.reports.report import render_json, render_markdown
from nel_assets.engine.reports.svg import _nice_ticks
from nel_assets.engine.reports.tables import tex_escape
from nel_assets.engine.results.bundle import build_bundle
from nel_resources.storage.schema import rows_to_table


def _table(n: int = 40, model: str = "m_1") -> pa.Table:
    rng = np.random.default_rng(0)
    rows = []
    for i in range(n):
        failed = i == 3
        rows.append({"benchmark": "mmlu_x", "model": model, "shard": 0, "problem_idx": i, "repeat": 0,
                     "sample_id": f"{i}:0", "category": ["alg & geo", "bio_100%"][i % 2],
                     "prompt": f"Q{i} <b>bold</b>", "response": f"answer {i}", "expected": "A",
                     "extracted": "A" if i % 3 else "B", "reward": None if failed else float(i % 3 != 0),
                     "error": "timeout" if failed else None, "failure_category": "timeout" if failed else None,
                     "model_ms": float(rng.uniform(5, 50)), "completion_tokens": 10, "total_ms": 60.0,
                     "timestamp": 1000.0 + i, "finish_reason": None if failed else "stop"})
    return rows_to_table(rows)


@pytest.fixture
def bundles() -> list[dict]:
    return [build_bundle(_table(), benchmark="mmlu_x", model="m_1")]


def test_every_format_renders(bundles: list[dict]) -> None:
    for fmt in FORMATS:
        assert render(fmt, bundles)
    with pytest.raises(ValueError, match="unknown report format"):
        render("pdf", bundles)
    assert render_markdown(bundles).startswith("# nel evaluation report")
    assert json.loads(render_json(bundles))["bundles"][0]["model"] == "m_1"


def test_csv_has_overall_and_category_rows(bundles: list[dict]) -> None:
    rows = list(csv.DictReader(io.StringIO(render("csv", bundles))))
    assert [r["category"] for r in rows] == ["", "alg & geo", "bio_100%"]
    assert float(rows[0]["mean"]) == pytest.approx(bundles[0]["score"]["mean"])


def test_latex_escapes_and_is_a_fragment(bundles: list[dict]) -> None:
    tex = render("latex", bundles)
    assert r"mmlu\_x" in tex and r"m\_1" in tex and "\\documentclass" not in tex
    assert tex.count(r"\begin{tabular}") == tex.count(r"\end{tabular}") == 1
    assert tex_escape("a_b&c%$#{}~^\\") == r"a\_b\&c\%\$\#\{\}\textasciitilde{}\textasciicircum{}\textbackslash{}"


def test_html_plots_escaping_and_drilldown(bundles: list[dict]) -> None:
    t = _table()
    details = {"mmlu_x/m_1": {"samples": t.to_pylist(), "n_total": t.num_rows,
                              "latency_ms": t.column("model_ms").to_pylist()}}
    comparison = {"baseline": {"model": "a"}, "candidate": {"model": "m_1"}, "max_drop": 0.01,
                  "missing": {"baseline": [], "candidate": ["gpqa"]},
                  "benchmarks": {"mmlu_x": {"n_paired": 40, "base_mean": 0.7, "cand_mean": 0.6, "delta": -0.1,
                                            "ci_low": -0.2, "ci_high": -0.01, "p_value": 0.03, "mde": 0.08,
                                            "verdict": "regression"}}}
    html = render("html", bundles, details=details, comparison=comparison)
    kinds = re.findall(r'data-plot="([a-z-]+)"', html)
    assert kinds == ["score-ci", "forest", "category-bars", "latency-histogram", "failure-breakdown"]
    assert "<b>bold</b>" not in html and "&lt;b&gt;bold&lt;/b&gt;" in html
    assert html.count('<tr data-verdict="failed">') == 1 and "Missing in candidate: gpqa" in html
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_cap_samples_keeps_failures_and_wrong_first() -> None:
    rows = [{"reward": 1.0, "i": i} for i in range(10)] + [{"reward": 0.0, "i": 10}, {"reward": None, "i": 11}]
    kept = cap_samples(rows, 3)
    assert [r["i"] for r in kept] == [11, 10, 0]
    assert cap_samples(rows, 100) == rows


def test_nice_ticks() -> None:
    assert _nice_ticks(0, 100) == [0, 20, 40, 60, 80, 100]
    assert _nice_ticks(-3.3, 3.3) == [-2, 0, 2]


def test_undefined_mde_is_said_not_printed_as_zero() -> None:
    """Identical answers: compare text, markdown, HTML and LaTeX say "undefined", not 0.00."""
    from nel_assets.engine.reports.compare_text import format_comparison
    from nel_assets.engine.verdicts.compare import compare_scores

    side = {"items": list(range(50)), "scores": [float(i % 3 == 0) for i in range(50)]}
    comp = compare_scores(side, side)
    doc = {"baseline": {"model": "a", "source": "x"}, "candidate": {"model": "b", "source": "y"},
           "max_drop": None, "alpha": 0.05, "benchmarks": {"gsm8k": comp},
           "missing": {"baseline": [], "candidate": []}, "regressions": []}
    text = format_comparison(doc)
    assert "MDE at 80% power, α=0.05: undefined (no variance in the differences)" in text, text
    assert "paired SE undefined (no variance in the differences)" in text and "(newcombe)" in text
    assert "0.00 pts for n=" not in text
    for fmt in ("markdown", "html", "latex"):
        out = render(fmt, [], comparison=doc)
        assert "undefined (no variance in the differences)" in out, (fmt, out)
