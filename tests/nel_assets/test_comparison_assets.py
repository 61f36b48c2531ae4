"""The `comparison` asset and its blocking `gate` check, materialized on an ephemeral instance
after `nel eval run` produced real bundles for three models (two services' worth of answer
patterns: the baseline, a clear regression, and the baseline's twin)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from benchmarks.datasets import load_file
from nel_assets.comparison_assets import COMPARISON_KEY, build_comparison_assets, comparison_dir
from nel_assets.factory import build_defs, build_resources
from nel_assets.partitions import MODEL_PARTITIONS
from nel_resources.config import load_config
from nel_resources.specs import resolve
from tests.dagster_project.test_compare_gate_cli import paired_patterns, start_servers, write_config
from tests.support.cli import run_nel, summary_json

N = 300


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Iterator[tuple[Path, Path]]:
    rows = load_file(data_dir / "gsm8k" / "test.jsonl")[:N]
    pats = paired_patterns(N, base_right=210, changes={"worse": (40, 5), "twin": (0, 0)})
    tmp = tmp_path_factory.mktemp("cmpassets")
    urls, procs = start_servers(rows, pats)
    try:
        cfg = write_config(tmp / "cfg.yaml", urls, tmp / "out", n=N,
                           extra={"comparison": {"baseline": "base", "max_drop": 0.02}})
        # `worse` regresses: the run's gate says NO-GO, exit status 1
        summary_json(run_nel("eval", "run", str(cfg), "--json", "--no-progress",
                             env={"NEL_DATA_DIR": str(data_dir)}), status=1)
    finally:
        for p in procs:
            p.stop()
    yield cfg, tmp / "out"


def _materialize(cfg_path: Path, out: Path, candidate: str, instance: dg.DagsterInstance) -> dg.ExecuteInJobResult:
    cfg = resolve(load_config(cfg_path))
    defs = build_defs(cfg, str(out))

    @dg.asset(key=["promote"], deps=[COMPARISON_KEY], partitions_def=MODEL_PARTITIONS)
    def promote() -> None:
        """A downstream step that must not run when the gate says NO-GO."""

    assets = [*defs.assets, promote]  # type: ignore[list-item]
    return dg.materialize([*assets, *defs.asset_checks], instance=instance,  # type: ignore[list-item]
                          resources=build_resources(cfg, str(out)), partition_key=candidate,
                          selection=[COMPARISON_KEY, dg.AssetKey(["promote"])], raise_on_error=False)


def test_no_baseline_means_no_assets(setup: tuple[Path, Path]) -> None:
    cfg = resolve(load_config(setup[0], overrides=["comparison.baseline=null"]))
    assert build_comparison_assets(cfg) == []


def test_comparison_depends_on_every_bundle_by_model(setup: tuple[Path, Path]) -> None:
    cfg = resolve(load_config(setup[0]))
    graph = build_defs(cfg).resolve_asset_graph()
    node = graph.get(COMPARISON_KEY)
    assert dg.AssetKey(["gsm8k", "bundle"]) in node.parent_keys
    assert node.partitions_def == MODEL_PARTITIONS
    checks = list(graph.asset_check_keys)
    assert dg.AssetCheckKey(COMPARISON_KEY, "gate") in checks


def test_gate_blocks_a_regression_and_passes_a_twin(setup: tuple[Path, Path]) -> None:
    cfg_path, out = setup
    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("model", ["base", "worse", "twin"])

        bad = _materialize(cfg_path, out, "worse", instance)
        evals = bad.get_asset_check_evaluations()
        assert len(evals) == 1 and not evals[0].passed
        assert evals[0].severity == dg.AssetCheckSeverity.ERROR
        md = evals[0].metadata
        assert md["decision"].value == "NO-GO" and md["gsm8k"].value.startswith("NO-GO (critical)")
        mats = {e.asset_key for e in bad.get_asset_materialization_events()}
        assert COMPARISON_KEY in mats and dg.AssetKey(["promote"]) not in mats  # blocked
        # the flipped items' page is one of the comparison's outputs (40 lost, 5 gained)
        (mat,) = [e.materialization for e in bad.get_asset_materialization_events()
                  if e.asset_key == COMPARISON_KEY]
        page = Path(mat.metadata["side_by_side"].value)
        assert page == comparison_dir(out.resolve(), "worse") / "side_by_side.html"
        text = page.read_text()
        assert '<b id="total-pass_to_fail">40</b>' in text and '<b id="total-fail_to_pass">5</b>' in text
        assert text.count('data-dir="pass_to_fail"') == 40

        good = _materialize(cfg_path, out, "twin", instance)
        (ev,) = good.get_asset_check_evaluations()
        assert ev.passed and ev.metadata["decision"].value == "GO"
        mats = {e.asset_key for e in good.get_asset_materialization_events()}
        assert dg.AssetKey(["promote"]) in mats
        assert good.success

    # the files, and the DuckDB `comparisons` view over them
    doc_dir = comparison_dir(out.resolve(), "worse")
    assert (doc_dir / "regression.json").exists()
    from nel_resources.storage.views import connect

    con = connect(out)
    rows = con.execute("select benchmark, baseline, candidate, verdict, n_paired, delta < 0, gate_decision "
                       "from comparisons order by candidate").fetchall()
    assert rows == [("gsm8k", "base", "twin", "within_max_drop", N, False, "GO"),
                    ("gsm8k", "base", "worse", "regression", N, True, "NO-GO")]
    assert isinstance(con, duckdb.DuckDBPyConnection)


def test_new_bundle_makes_the_comparison_stale(setup: tuple[Path, Path], tmp_path: Path) -> None:
    # Dagster's own test helper builds the stale-status resolver (its constructor is private
    # and changes between releases); the status is asked per partition (DESIGN.md §10).
    from dagster._core.definitions.data_version import StaleStatus
    from dagster._utils.test.data_versions import get_stale_status_resolver

    cfg_path, src = setup
    out = tmp_path / "out"
    shutil.copytree(src, out, ignore=shutil.ignore_patterns(".dagster"))
    cfg = resolve(load_config(cfg_path))
    defs = build_defs(cfg, str(out))
    res = build_resources(cfg, str(out))
    bundle_key = dg.AssetKey(["gsm8k", "bundle"])
    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("model", ["twin"])
        for sel in ([bundle_key], [COMPARISON_KEY]):
            r = dg.materialize([*defs.assets, *defs.asset_checks], instance=instance, resources=res,  # type: ignore[list-item]
                               partition_key="twin", selection=sel)
            assert r.success

        def status() -> StaleStatus:
            resolver = get_stale_status_resolver(instance, list(defs.assets))  # type: ignore[arg-type]
            return resolver.get_status(COMPARISON_KEY, "twin")

        assert status() == StaleStatus.FRESH
        # an unchanged rebuild keeps the bundle's content-hash data version: still fresh
        assert dg.materialize([*defs.assets, *defs.asset_checks], instance=instance, resources=res,  # type: ignore[list-item]
                              partition_key="twin", selection=[bundle_key]).success
        assert status() == StaleStatus.FRESH
        # new results for the candidate -> a new bundle -> its comparison is stale
        shard = Path("gsm8k", "shard_results")
        shutil.rmtree(out / shard / "model=twin")
        shutil.copytree(out / shard / "model=worse", out / shard / "model=twin")
        assert dg.materialize([*defs.assets, *defs.asset_checks], instance=instance, resources=res,  # type: ignore[list-item]
                              partition_key="twin", selection=[bundle_key]).success
        assert status() == StaleStatus.STALE
