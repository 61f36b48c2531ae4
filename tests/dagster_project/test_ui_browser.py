"""The Dagster UI, for real: `dagster-webserver` on the instance `nel eval run` left behind,
driven by headless Chromium.

`nel eval run` evaluates only shard 0 of 2 (as one worker of a distributed run would), so
the model partition exists but shard 1 is missing. The asset graph must draw the whole
lineage (dataset -> shard results -> bundle -> report, shard inputs -> shard results). From
it we then select
`gsm8k/shard_results`, pick the partition (refmodel, 1) in the Materialize dialog and launch
it with clicks; GraphQL must report the run's success and the reference server must have
answered exactly that shard's requests. Then the bundle is materialized from its asset page
the same way, and its score, CI and item count must be in the metadata (GraphQL) and on the
page. Screenshots of every step go to the test's tmp dir (or `NEL_SCREENSHOT_DIR`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from benchmarks.datasets import load_file
from nel_resources.runtime.processes import ManagedProcess
from tests.support.cli import run_nel
from tests.support.dagster_ui import (
    FINISHED,
    all_runs,
    assert_no_leftovers,
    choose_partitions,
    dismiss_community_modal,
    graph_edges,
    latest_materialization,
    launch_chromium,
    new_page,
    require_chromium,
    running_webserver,
    runs_with_partition,
    wait_for,
)
from tests.support.reference import reset_server_stats, server_stats
from tests.support.waiting import PROCESS_START_S, RUN_FINISH_S, UI_ACTION_MS

N, MODEL = 6, "refmodel"
NODES = {"dataset", "shard_inputs", "shard_results", "bundle", "report"}


def _js_number(x: float) -> str:
    """How the UI (JavaScript) prints a float: 0.0 as "0", 0.25 as "0.25"."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _answers(rows: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Right answers for even rows, wrong for odd ones: 3 of 6 right however rows are sharded."""
    out = []
    for i, r in enumerate(rows):
        gold = r["answer"].split("####")[-1].strip().replace(",", "")
        out.append({"match": r["question"][:120], "content": f"#### {gold if i % 2 == 0 else 'no idea'}"})
    return out


def _launched_run(base: str, partition: str, before: set[str], web: ManagedProcess) -> str:
    """Wait for the run the UI just launched for `partition`, then for it to finish.

    The run existing in GraphQL is the condition that matters, not the dialog closing: on a
    loaded machine the button reads "Launching..." for as long as the webserver takes to
    submit the run, which is well past any fixed UI timeout.
    """
    run_id = wait_for(lambda: next(iter(set(runs_with_partition(base, partition)) - before), None),
                      timeout=PROCESS_START_S, what=f"the webserver to create a run for partition {partition}",
                      alive=web)
    status = wait_for(lambda: (s := runs_with_partition(base, partition).get(run_id)) in FINISHED and s,
                      timeout=RUN_FINISH_S, what=f"run {run_id} ({partition}) to finish", alive=web)
    assert status == "SUCCESS", f"run {run_id} for {partition} ended {status}"
    return run_id


@pytest.mark.browser
@pytest.mark.slow
def test_materialize_partitions_from_the_ui(tmp_path: Path, reference_server, data_dir: Path) -> None:
    require_chromium()
    from playwright.sync_api import expect, sync_playwright

    rows = load_file(data_dir / "gsm8k" / "test.jsonl")[:N]
    url = reference_server(answers=_answers(rows))
    out = tmp_path / "out"
    shots = Path(os.environ.get("NEL_SCREENSHOT_DIR", tmp_path / "shots"))
    shots.mkdir(parents=True, exist_ok=True)

    # Shard 0 of 2 only (one worker of a distributed run): the model partition exists, shard 1
    # is missing, so the UI has real work to do.
    p = run_nel("eval", "run", "-b", "gsm8k", "-m", str(N), "--shards", "2", "--model-url", url,
                "--model-id", MODEL, "-o", str(out), "--json", "--no-progress",
                env={"NEL_DATA_DIR": str(data_dir), "NEL_SHARD_IDX": "0", "NEL_TOTAL_SHARDS": "2"})
    assert p.returncode == 0, p.stdout + p.stderr
    # counted by model: generation requests only, not the client's /models probe
    assert server_stats(url)["models"] == {MODEL: N // 2}
    home, config = out / ".dagster", out / "nel-config.yaml"
    assert (home / "dagster.yaml").is_file() and config.is_file()
    reset_server_stats(url)

    with running_webserver(home, config, data_dir, tmp_path / "webserver.log",
                           ready_asset=["gsm8k", "shard_results"]) as (web, base), sync_playwright() as pw:
        assert latest_materialization(base, ["gsm8k", "shard_results"], f"{MODEL}|0") is not None
        assert latest_materialization(base, ["gsm8k", "shard_results"], f"{MODEL}|1") is None
        browser = launch_chromium(pw)
        try:
            page = new_page(browser, viewport={"width": 1400, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            dismiss_community_modal(page, base)

            # 1. the asset graph of the gsm8k group draws the whole lineage (the dataset
            #    feeds the shard results); then select the shard results node
            page.goto(f"{base}/asset-groups/gsm8k", wait_until="load")
            lineage = {("dataset", "shard_results"), ("shard_inputs", "shard_results"),
                       ("shard_results", "bundle"), ("bundle", "report")}
            drawn = wait_for(lambda: (e := graph_edges(page, NODES)) >= lineage and e,
                             timeout=UI_ACTION_MS / 1000, what="the asset graph's edges", alive=web)
            assert drawn == lineage, drawn
            page.screenshot(path=str(shots / "00_lineage.png"))
            page.get_by_text("shard_results", exact=True).first.click()
            expect(page.get_by_text("gsm8k / shard_results").first).to_be_visible()
            expect(page.get_by_text(f"svc_{MODEL}", exact=True)).to_be_visible()  # sidebar loaded
            page.screenshot(path=str(shots / "01_asset_graph.png"))

            # 2. Materialize selected… -> one (model, shard) partition -> Launch 1 run
            page.get_by_role("button", name="Materialize selected…").click()
            dialog = page.get_by_role("dialog").filter(has_text="Launch runs to materialize gsm8k / shard_results")
            expect(dialog).to_be_visible()
            choose_partitions(page, dialog, [MODEL, "1"])
            expect(dialog.get_by_text("1 partition", exact=True)).to_be_visible()
            page.screenshot(path=str(shots / "02_shard_dialog.png"))
            before = set(all_runs(base))
            dialog.get_by_role("button", name="Launch 1 run").click()
            shard_run = _launched_run(base, f"{MODEL}|1", before, web)
            expect(dialog).to_be_hidden()  # the launch returned: the dialog closes
            page.screenshot(path=str(shots / "03_shard_launched.png"))

            # the run evaluated exactly the missing shard, at the model server
            mat = latest_materialization(base, ["gsm8k", "shard_results"], f"{MODEL}|1")
            assert mat is not None and mat["runId"] == shard_run
            assert mat["metadata"]["n_rows"] == N // 2 and mat["metadata"]["n_errors"] == 0
            assert server_stats(url)["models"] == {MODEL: N // 2}

            # 3. the bundle of that model, from its asset page
            page.goto(f"{base}/assets/gsm8k/bundle", wait_until="load")
            page.get_by_role("button", name="Materialize…").click()
            dialog = page.get_by_role("dialog").filter(has_text="Launch runs to materialize gsm8k / bundle")
            expect(dialog).to_be_visible()
            choose_partitions(page, dialog, [MODEL])
            page.screenshot(path=str(shots / "04_bundle_dialog.png"))
            before = set(all_runs(base))
            dialog.get_by_role("button", name="Launch 1 run").click()
            bundle_run = _launched_run(base, MODEL, before, web)
            expect(dialog).to_be_hidden()

            mat = latest_materialization(base, ["gsm8k", "bundle"], MODEL)
            assert mat is not None and mat["runId"] == bundle_run
            md = mat["metadata"]
            assert md["score"] == pytest.approx(0.5) and md["n_items"] == N, md
            assert md["ci_low"] < md["score"] < md["ci_high"], md
            assert md["complete"] is True, md

            # 4. the asset page shows the new materialization's metadata
            page.goto(f"{base}/assets/gsm8k/bundle?partition={MODEL}", wait_until="load")
            table = page.get_by_role("table").filter(has_text="ci_high").first
            expect(table).to_be_visible()
            for label, value in (("score", "0.5"), ("ci_low", _js_number(md["ci_low"])),
                                 ("ci_high", _js_number(md["ci_high"])), ("n_items", str(N))):
                row = table.get_by_role("row").filter(has=page.get_by_text(label, exact=True))
                expect(row.get_by_text(value, exact=True)).to_be_visible()
            page.screenshot(path=str(shots / "05_bundle_metadata.png"), full_page=True)
            assert not errors, errors
        finally:
            browser.close()
            # Let every run end before the webserver (and its run workers) is stopped.
            wait_for(lambda: all(s in FINISHED for s in all_runs(base).values()), timeout=RUN_FINISH_S,
                     what="all runs to finish", alive=web)
    # the webserver's code server and run workers went down with its process group
    assert_no_leftovers(str(home), "the webserver")
