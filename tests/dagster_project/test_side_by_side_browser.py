"""`nel compare BASE CAND --side-by-side PAGE`: the flipped items' page, opened from disk in
headless Chromium: every flip listed with both answers, filters by category and direction
change the visible rows, a response holding `<script>` stays text, nothing is fetched."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.support.synthetic_runs import write_run
from tests.support.cli import run_nel
from tests.support.dagster_ui import launch_chromium, new_page, require_chromium

N = 40
EVIL = "<script>window.__pwned = 1</script></td></tr><b>bold?</b>"


@pytest.fixture
def two_runs(tmp_path: Path) -> tuple[Path, Path]:
    base = np.ones(N)
    cand = np.ones(N)
    cand[:6] = 0  # items 0-5: pass -> fail
    base[30:33] = 0  # items 30-32: fail -> pass
    cats = ["algebra" if i % 2 == 0 else "geometry" for i in range(N)]
    responses = [f"candidate answer {i}" for i in range(N)]
    responses[0] = EVIL
    prompts = [("long prompt " * 100 if i == 1 else f"short prompt {i}") for i in range(N)]
    write_run(tmp_path / "base", "synth", "base", base, categories=cats, shards=2, prompts=prompts,
              responses=[f"baseline answer {i}" for i in range(N)])
    write_run(tmp_path / "cand", "synth", "cand", cand, categories=cats, shards=3, prompts=prompts,
              responses=responses)
    return tmp_path / "base", tmp_path / "cand"


def test_side_by_side_page_in_chromium(tmp_path: Path, two_runs: tuple[Path, Path]) -> None:
    require_chromium()
    from playwright.sync_api import sync_playwright

    page_path = tmp_path / "flips.html"
    p = run_nel("compare", str(two_runs[0]), str(two_runs[1]), "--side-by-side", str(page_path),
                "--no-report", "--no-strict")
    assert p.returncode == 0, p.stderr
    assert f"wrote {page_path} (9 flipped items)" in p.stderr
    requests: list[str] = []
    with sync_playwright() as pw:
        browser = launch_chromium(pw)
        try:
            page = new_page(browser)
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(page_path.as_uri())
            rows = page.locator("#flips tbody tr")

            def visible() -> list[str]:
                return [rows.nth(i).get_attribute("data-dir") + ":" + rows.nth(i).get_attribute("data-cat")
                        for i in range(rows.count()) if rows.nth(i).is_visible()]

            assert rows.count() == 9 and len(visible()) == 9
            assert page.locator("#total-pass_to_fail").inner_text() == "6"
            assert page.locator("#total-fail_to_pass").inner_text() == "3"
            assert page.locator("#f-count").inner_text() == "9 of 9 listed flips shown"
            # both answers, the expected and the extracted answers of item 2
            row2 = rows.nth(2)
            text = row2.inner_text()
            assert "baseline answer 2" in text and "candidate answer 2" in text
            assert "item 2" in text and "short prompt 2" in text
            # expected 2; the baseline's scorer extracted 2, the candidate's 3
            assert row2.locator("td").nth(3).inner_text().strip() == "2"
            assert row2.locator("td").nth(4).locator(".ex").inner_text() == "2"
            assert row2.locator("td").nth(5).locator(".ex").inner_text() == "3"

            page.select_option("#f-cat", "geometry")  # odd items: 1, 3, 5, 31
            assert sorted(visible()) == ["fail_to_pass:geometry"] + ["pass_to_fail:geometry"] * 3
            page.select_option("#f-dir", "fail_to_pass")
            assert visible() == ["fail_to_pass:geometry"]
            page.select_option("#f-cat", "*")
            assert visible() == ["fail_to_pass:algebra", "fail_to_pass:geometry", "fail_to_pass:algebra"]
            assert page.locator("#f-count").inner_text() == "3 of 9 listed flips shown"
            page.select_option("#f-dir", "*")

            # the hostile response is shown as text, never run or parsed as markup
            assert page.evaluate("typeof window.__pwned") == "undefined"
            assert EVIL in rows.nth(0).inner_text()
            assert page.locator("#flips tbody b").count() == 0
            # a long prompt is collapsed and opens on click
            long = rows.nth(1).locator("details")
            assert long.count() == 1 and not long.locator("pre").is_visible()
            long.locator("summary").click()
            assert long.locator("pre").is_visible()
            assert not errors, errors
        finally:
            browser.close()
    assert requests and all(u.startswith("file://") for u in requests), requests


def test_side_by_side_refuses_a_bad_limit(tmp_path: Path, two_runs: tuple[Path, Path]) -> None:
    p = run_nel("compare", str(two_runs[0]), str(two_runs[1]), "--side-by-side", str(tmp_path / "x.html"),
                "--side-by-side-limit", "-1", "--no-report", "--no-strict")
    assert p.returncode == 2 and "--side-by-side-limit -1: give a count >= 0" in p.stderr
    assert "Traceback" not in p.stderr
