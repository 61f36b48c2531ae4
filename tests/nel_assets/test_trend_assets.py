"""The `checkpoint_trends` asset materialized in-process over a store with a planted drop: its
Parquet (through nel's DuckDB view), its SVG plots, its UI metadata, and when it exists."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from nel_assets.engine.reports.html import render_html
from nel_assets.engine.results.trend_store import read_trend_rows, trends_dir
from nel_assets.trend_assets import TRENDS_KEY, build_trend_assets
from nel_resources.config import NelConfig
from nel_resources.resources import ResultStoreResource
from nel_resources.specs import resolve
from nel_resources.storage.store import ResultStore
from nel_resources.storage.views import available_views, connect
from tests.nel_assets.engine.results.test_trends import _put

STEPS = (1, 2, 3, 4, 5, 6)


def _config(services: list[str], **checkpoints: object) -> NelConfig:
    return NelConfig.model_validate({
        "services": {s: {"type": "api", "url": "http://127.0.0.1:9/v1"} for s in services},
        "benchmarks": [{"name": "gsm8k", "service": services}], "checkpoints": checkpoints})


def test_only_configs_with_checkpoint_series_get_the_asset(tmp_path: Path) -> None:
    assert build_trend_assets(resolve(_config(["a", "b"]))) == []
    assert build_trend_assets(resolve(_config(["a", "run-step-1"]))) == []
    assert len(build_trend_assets(resolve(_config(["run-step-1", "run-step-2"])))) == 1
    assert len(build_trend_assets(resolve(_config(["a"], dir=str(tmp_path))))) == 1
    assert len(build_trend_assets(resolve(_config(["r-ep1", "r-ep2"], step_pattern=r"ep(\d+)")))) == 1


def test_asset_writes_the_series_the_view_and_the_plot(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    good, bad = [1.0] * 10 + [0.0] * 2, [1.0] * 2 + [0.0] * 10
    for s in STEPS:
        _put(store, f"r-ep{s}", bad if s >= 5 else good)
    _put(store, "base", good)
    resolved = resolve(_config([f"r-ep{s}" for s in STEPS] + ["base"], step_pattern=r"ep(\d+)"))
    (asset,) = build_trend_assets(resolved)
    res = dg.materialize([asset], resources={"nel_store": ResultStoreResource(root=str(tmp_path))},
                         instance=dg.DagsterInstance.ephemeral())
    assert res.success
    (mat,) = res.asset_materializations_for_node(asset.op.name)
    assert mat.asset_key == TRENDS_KEY
    md = mat.metadata
    assert md["n_series"].value == 1 and md["n_checkpoints"].value == 6
    assert md["alarms"].value == "gsm8k / r @ step 5"
    assert "**ALARM**" in md["gsm8k / r"].value and "data:image/svg+xml;base64," in md["gsm8k / r"].value

    con = connect(tmp_path)
    assert "checkpoint_trends" in available_views(con)
    rows = con.execute("SELECT step, model, delta, alarm FROM checkpoint_trends ORDER BY step").fetchall()
    assert [r[:2] for r in rows] == [(s, f"r-ep{s}") for s in STEPS]
    assert rows[4][2] == pytest.approx(-8 / 12) and [r[3] for r in rows] == [False] * 4 + [True, False]
    (svg,) = trends_dir(tmp_path).glob("*.svg")
    text = svg.read_text()
    assert text.count('class="point') == 6 and text.count("point alarm") == 1

    # the HTML report shows the series with its deltas and the alarm from these rows ...
    bundles = [{**store.read_bundle("gsm8k", f"r-ep{s}"), "benchmark": "gsm8k", "model": f"r-ep{s}"}
               for s in STEPS]
    for b in bundles:
        b["score"].update(n_samples=12, n_failed_samples=0)
        b["failures"] = {"n_scored": 12, "categories": {}}
    trend = read_trend_rows(tmp_path)
    page = render_html(bundles, trends=trend)
    assert 'id="trends"' in page and page.count("ALARM") == 1 and 'data-plot="checkpoint-trend"' in page
    # ... and without them, the checkpoints' scores by step (a name with a built-in marker)
    renamed = [{**b, "model": f"r-step-{i + 1}"} for i, b in enumerate(bundles)]
    page = render_html(renamed)
    assert 'id="trends"' in page and "ALARM" not in page and 'data-plot="checkpoint-trend"' in page
    assert 'id="trends"' not in render_html(renamed[:1])
