"""The HTML report in headless Chromium: plots render with real size, the drill-down
searches and filters, nothing is fetched from the network, and a screenshot is taken."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.dagster_project.conftest import TWO_MODEL_RUN_GROUP
from tests.support.cli import run_nel
from tests.support.dagster_ui import launch_chromium, new_page, require_chromium

pytestmark = pytest.mark.xdist_group(TWO_MODEL_RUN_GROUP)
N = 90  # items in the shared two-model run


def test_html_report_renders_in_chromium(tmp_path: Path, two_model_run: Path) -> None:
    require_chromium()
    from playwright.sync_api import expect, sync_playwright

    out = two_model_run
    html = tmp_path / "report.html"
    p = run_nel("report", str(out), "-o", str(html), "--comparison", str(out.parent / "regression.json"))
    assert p.returncode == 0, p.stderr
    shot = Path(os.environ.get("NEL_SCREENSHOT_DIR", tmp_path)) / "html_report.png"

    requests: list[str] = []
    with sync_playwright() as pw:
        browser = launch_chromium(pw)
        try:
            page = new_page(browser, viewport={"width": 1200, "height": 900})
            page.on("request", lambda r: requests.append(r.url))
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(html.as_uri())
            plots = page.locator("svg.nel-plot")
            # the plots are drawn by the page's script: wait for all six, then inspect them
            expect(plots).to_have_count(6)
            kinds = [plots.nth(i).get_attribute("data-plot") for i in range(plots.count())]
            # score-ci + forest, then per model: latency histogram + failure breakdown
            assert kinds.count("score-ci") == 1 and kinds.count("forest") == 1
            assert kinds.count("latency-histogram") == 2 and kinds.count("failure-breakdown") == 2
            for i in range(plots.count()):
                box = plots.nth(i).bounding_box()
                assert box is not None and box["width"] > 100 and box["height"] > 50, kinds[i]
            assert page.locator('svg[data-plot="score-ci"] circle.point').count() == 2
            assert page.locator('svg[data-plot="forest"] rect.point').count() == 1
            assert page.locator('svg[data-plot="latency-histogram"] rect.bar').count() >= 2
            bar = page.locator('svg[data-plot="latency-histogram"] rect.bar').first.bounding_box()
            assert bar is not None and bar["width"] > 0

            # drill-down: all rows, then filter by verdict, then search
            drill = page.locator(".drill").first
            rows = drill.locator("tbody tr")
            assert rows.count() == N
            drill.locator(".drill-filter").select_option("wrong")
            wrong = sum(1 for i in range(rows.count()) if rows.nth(i).is_visible())
            assert 0 < wrong < N
            assert drill.locator(".drill-count").inner_text() == f"{wrong} shown"
            drill.locator(".drill-filter").select_option("all")
            drill.locator(".drill-search").fill("no-such-text-anywhere")
            assert drill.locator(".drill-count").inner_text() == "0 shown"
            drill.locator(".drill-search").fill("")
            # a collapsed response opens on click
            first = drill.locator("tbody tr").first.locator("details").nth(1)
            first.locator("summary").click()
            assert first.locator("pre").is_visible()
            first.locator("summary").click()  # close it again
            page.evaluate("window.scrollTo(0, 0)")
            page.screenshot(path=str(shot), full_page=False)
            assert not errors, errors
        finally:
            browser.close()
    assert all(u.startswith("file://") for u in requests), requests  # self-contained
    assert shot.stat().st_size > 10_000
