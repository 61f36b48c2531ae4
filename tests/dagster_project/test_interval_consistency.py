"""One score interval everywhere: bundle, `nel eval run` (--json and text), report files,
Dagster materialization metadata and the DuckDB `bundles` view show the same numbers.

Real components: reference servers on 127.0.0.1 answering real GSM8K questions, the real
`nel` CLI in a subprocess (persistent Dagster instance under the output dir), the Parquet
store read back through DuckDB. Cases: a mixed result, all right and all wrong with
repeats (the CLT interval used to collapse to [1, 1] / [0, 0] there), and a single item.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from benchmarks.datasets import load_file
from nel_resources.reference_server import start_reference_server
from nel_resources.storage.store import ResultStore
from nel_resources.storage.views import connect
from tests.support.cli import run_nel, summary_json
from tests.support.gsm8k import answers_for

N_ITEMS, REPEATS = 20, 3
BUNDLE = dg.AssetKey(["gsm8k", "bundle"])


def _eval(tmp: Path, data_dir: Path, name: str, rights: Mapping[str, set[int]], n: int,
          rows: list[dict]) -> tuple[Path, dict[str, Any], str]:
    """One `nel eval run` over one reference server per model; its --json summary and the
    text summary of an unchanged rerun (which prints the same bundles)."""
    procs, services = [], {}
    try:
        for model, right in rights.items():
            proc, url = start_reference_server(answers=answers_for(rows[:n], right))
            procs.append(proc)
            services[model] = {"type": "api", "url": url, "model": model, "max_concurrent": 8}
        out = tmp / name
        cfg = tmp / f"{name}.yaml"
        cfg.write_text(yaml.safe_dump({
            "services": services,
            "benchmarks": [{"name": "gsm8k", "max_problems": n, "repeats": REPEATS}],
            "output": {"dir": str(out)}}))
        env = {"NEL_DATA_DIR": str(data_dir)}
        summary = summary_json(run_nel("eval", "run", str(cfg), "--json", "--no-progress", env=env))
        text = run_nel("eval", "run", str(cfg), "--no-progress", env=env)
        assert text.returncode == 0, f"rerun failed:\n{text.stdout}\n{text.stderr}"
        return out, summary, text.stdout
    finally:
        for p in procs:
            p.stop()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Iterator[list[tuple[Path, dict, str]]]:
    rows = load_file(data_dir / "gsm8k" / "test.jsonl")
    tmp = tmp_path_factory.mktemp("intervals")
    many = _eval(tmp, data_dir, "many", {"mixed": set(range(0, N_ITEMS, 3)),
                                          "allright": set(range(N_ITEMS)), "allwrong": set()},
                 N_ITEMS, rows)
    single = _eval(tmp, data_dir, "single", {"one": {0}}, 1, rows)
    yield [many, single]


def _pct(x: float) -> str:
    return f"{100 * x:.2f}"


def _metadata(home: Path, model: str) -> dict[str, Any]:
    instance = dg.DagsterInstance.from_config(str(home))
    try:
        res = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=BUNDLE, asset_partitions=[model]), limit=1)
        assert res.records, f"no materialization of {BUNDLE.to_user_string()}[{model}] in {home}"
        mat = res.records[0].asset_materialization
        assert mat is not None
        return {k: v.value for k, v in mat.metadata.items()}
    finally:
        instance.dispose()


EXPECTED_METHOD = {"mixed": "wilson", "allright": "wilson", "allwrong": "wilson", "one": "wilson"}


def test_every_surface_shows_the_bundles_interval(runs, tmp_path: Path) -> None:
    seen = set()
    for out, summary, text in runs:
        store = ResultStore(out)
        report_dir = tmp_path / out.name
        rep = run_nel("report", str(out), "--all-formats", "-o", str(report_dir))
        assert rep.returncode == 0, rep.stderr
        md = (report_dir / "report.md").read_text()
        html = (report_dir / "report.html").read_text()
        tex = (report_dir / "report.tex").read_text()
        csv_rows = {r["model"]: r for r in csv.DictReader((report_dir / "report.csv").open())
                    if not r["category"]}
        json_doc = {b["model"]: b for b in json.loads((report_dir / "report.json").read_text())["bundles"]}
        view = {r[0]: r[1:] for r in connect(out).execute(
            "SELECT model, mean, se, ci_low, ci_high, ci_method FROM bundles").fetchall()}
        for res in summary["results"]:
            model = res["model"]
            seen.add(model)
            b = store.read_bundle("gsm8k", model)
            assert b is not None, f"no bundle for {model}"
            s = b["score"]
            lo, hi, method = s["ci_low"], s["ci_high"], s["ci_method"]
            # the interval is honest: inside [0, 1], around the score, never a point
            assert 0.0 <= lo <= s["mean"] <= hi <= 1.0 and hi - lo > 0.05, (model, s)
            assert method == EXPECTED_METHOD[model], (model, method)
            if model in ("allright", "allwrong", "one"):
                assert s["se"] is None and s["se_note"].startswith("undefined"), s
            # CLI --json: fractions, same numbers, labelled
            assert (res["ci_low"], res["ci_high"], res["ci_method"], res["se"]) == (lo, hi, method, s["se"])
            # CLI text: percent with a % sign and the method
            line = next((ln for ln in text.splitlines() if f" {model} " in ln), None)
            assert line is not None, f"no summary row for {model} in:\n{text}"
            assert f"[{_pct(lo)}%, {_pct(hi)}%]" in line and method in line, line
            # report files: percent in markdown/HTML/LaTeX, fractions in CSV/JSON
            cell = f"[{_pct(lo)}, {_pct(hi)}]"
            assert f"| {model} | {_pct(s['mean'])} | {cell} | {method} |" in md, md
            assert cell in html and f"<td>{method}</td>" in html
            assert f"{cell} & {method.replace('_', chr(92) + '_')}" in tex, tex
            assert (float(csv_rows[model]["ci_low"]), float(csv_rows[model]["ci_high"])) == (lo, hi)
            assert csv_rows[model]["ci_method"] == method
            js = json_doc[model]["score"]
            assert (js["ci_low"], js["ci_high"], js["ci_method"]) == (lo, hi, method)
            # the Dagster UI's metadata on the bundle materialization
            meta = _metadata(Path(summary["dagster_home"]), model)
            assert (meta["ci_low"], meta["ci_high"], meta["ci_method"], meta["se"]) == (lo, hi, method, s["se"])
            assert meta["score"] == s["mean"]
            # the DuckDB `bundles` view
            assert view[model] == (s["mean"], s["se"], lo, hi, method), view[model]
            # the seed-compatible eval-<id>.json
            (ev,) = Path(res["exports"]).glob("eval-*.json")
            assert json.loads(ev.read_text())["metrics"]["ci_95"] == [lo, hi]
    assert seen == set(EXPECTED_METHOD)


def test_boundary_and_single_item_intervals_are_wilson_over_items(runs) -> None:
    from nel_assets.engine.stats import wilson_ci

    by_model = {r["model"]: r for _, s, _ in runs for r in s["results"]}
    assert (by_model["allright"]["ci_low"], by_model["allright"]["ci_high"]) == pytest.approx(
        wilson_ci(N_ITEMS, N_ITEMS))
    assert (by_model["allwrong"]["ci_low"], by_model["allwrong"]["ci_high"]) == pytest.approx(
        wilson_ci(0, N_ITEMS))
    assert by_model["allright"]["ci_low"] < 0.9 and by_model["allwrong"]["ci_high"] > 0.1
    right = len(range(0, N_ITEMS, 3))
    assert by_model["mixed"]["score"] == pytest.approx(right / N_ITEMS)
    assert (by_model["mixed"]["ci_low"], by_model["mixed"]["ci_high"]) == pytest.approx(
        wilson_ci(right, N_ITEMS))
    assert (by_model["one"]["ci_low"], by_model["one"]["ci_high"]) == pytest.approx(wilson_ci(1, 1))
