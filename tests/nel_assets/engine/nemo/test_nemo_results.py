"""`nemo_results` on real NeMo Evaluator 0.3.0 output (its CLI, run once for the module):
which tool wrote a path, its rows in nel's schema, and every kind of bad input refused in
one line naming what was expected and what was found."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.errors import NelError
from nel_assets.engine.nemo.nemo_results import (
    benchmark_name,
    detect,
    load_nemo_benches,
    nel_bundle,
    read_nemo_bench,
)
from nel_assets.engine.results.runs import load_run
from nel_resources.reference_server import start_reference_server
from tests.support.nemo_outputs import (
    ANSWERS,
    BENCH_NAME,
    DEFAULT_ANSWER,
    EXPECTED_REWARDS,
    copy_bench,
    peer_rewards,
    peer_run,
)


@pytest.fixture(scope="module")
def peer_out(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One real peer run of the capitals BYOB benchmark, 2 repeats (read-only)."""
    root = tmp_path_factory.mktemp("peer")
    proc, url = start_reference_server(answers=ANSWERS, default_content=DEFAULT_ANSWER)
    try:
        yield peer_run(copy_bench(root / "bench"), url, root / "out", "-n", "2")
    finally:
        proc.stop()


def _copy(peer_out: Path, tmp_path: Path) -> tuple[Path, Path]:
    dst = tmp_path / "run"
    shutil.copytree(peer_out, dst)
    return dst, dst / BENCH_NAME


def test_peer_rows_in_nels_schema(peer_out: Path) -> None:
    assert detect(peer_out) == "nemo"
    (bundle_file,) = (peer_out / BENCH_NAME).glob("eval-*.json")
    assert detect(bundle_file) == "nemo"
    (nb,) = load_nemo_benches(peer_out)
    assert (nb.benchmark, nb.model, nb.model_id, nb.repeats) == (BENCH_NAME, "ref", "ref", 2)
    rows = nb.table.to_pylist()
    got = {(r["problem_idx"], r["repeat"]): r["reward"] for r in rows}
    assert got == peer_rewards(peer_out / BENCH_NAME)
    assert got == {(i, k): v for i, v in EXPECTED_REWARDS.items() for k in (0, 1)}
    kenya = next(r for r in rows if r["problem_idx"] == 2)
    assert kenya["expected"] == "Nairobi" and kenya["response"] == "Answer: Nairobi"
    assert kenya["system"] == "You are a geography quiz." and kenya["sample_id"] == "2:" + str(kenya["repeat"])
    b = nel_bundle(nb)  # nel's statistics over the same per-item rewards
    assert b["score"]["mean"] == 0.5 and b["score"]["n_items"] == 4 and b["score"]["n_repeats"] == 2
    assert b["source_tool"] == "nemo-evaluator 0.3.0"
    run = load_run(bundle_file)  # a bundle file names its run too
    assert run.kind == "nemo" and run.benchmarks[BENCH_NAME].n_items == 4


def test_both_bundle_shapes_name_their_benchmark() -> None:
    assert benchmark_name({"benchmark": "gsm8k"}) == "gsm8k"  # nel's bundle.json today
    assert benchmark_name({"benchmark": {"name": "gsm8k", "scores": {}}}) == "gsm8k"  # the peer's
    assert benchmark_name({"benchmark": {"samples": 3}}) is None


def _tear(bench: Path) -> None:
    data = (bench / "results.jsonl").read_bytes()
    (bench / "results.jsonl").write_bytes(data[: len(data) - 40])  # the last row cut mid-way


def _shorten(bench: Path) -> None:
    lines = (bench / "results.jsonl").read_text().splitlines(keepends=True)
    (bench / "results.jsonl").write_text("".join(lines[:-1]))


def _drop_bundle(bench: Path) -> None:
    for f in bench.glob("eval-*.json"):
        f.unlink()


def _drop_results(bench: Path) -> None:
    (bench / "results.jsonl").unlink()


def _edit_bundle(**changes: object) -> object:
    def edit(bench: Path) -> None:
        (f,) = bench.glob("eval-*.json")
        doc = json.loads(f.read_text())
        doc.update(changes)
        f.write_text(json.dumps(doc))
    return edit


def _not_json(bench: Path) -> None:
    (f,) = bench.glob("eval-*.json")
    f.write_text(f.read_text()[:50])


@pytest.mark.parametrize(("damage", "message"), [
    (_tear, r"a torn results\.jsonl: expected one JSON object per line, found that its last line is cut off"),
    (_shorten, r"a half-written run: the bundle says n_results=8, found 7 row\(s\) in results\.jsonl"),
    (_drop_bundle, r"a half-written run: expected an eval-\*\.json bundle next to results\.jsonl, found none"),
    (_drop_results, r"a half-written run: expected results\.jsonl next to the bundle, found none"),
    (_edit_bundle(sdk_version="0.9.1"), r"unknown version: expected sdk_version 0\.3\.x, found '0\.9\.1'"),
    (_edit_bundle(benchmark=BENCH_NAME), r"expected `benchmark` to be an object with `name` and `scores`, "
                                         r"found str"),
    (_edit_bundle(n_results="eight"), r"expected an integer `n_results`, found 'eight'"),
    (_not_json, r"a torn or half-written bundle: expected JSON, found invalid JSON"),
])
def test_bad_peer_output_is_one_line(peer_out: Path, tmp_path: Path, damage, message: str) -> None:
    run, bench = _copy(peer_out, tmp_path)
    damage(bench)
    for entry in (run, bench):  # the run dir and the benchmark dir say the same
        with pytest.raises(NelError, match=message) as info:
            load_nemo_benches(entry)
        assert "\n" not in str(info.value)
        with pytest.raises(NelError, match=message):
            load_run(entry)


def test_neither_tools_output(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "logs").mkdir()
    msg = (r"neither a nel output directory \(<bench>/shard_results/\) nor a NeMo Evaluator 0\.3\.0 "
           r"output \(<bench>/eval-\*\.json with results\.jsonl\); found logs/, notes\.txt")
    for call in (detect, load_nemo_benches, load_run):
        with pytest.raises(NelError, match=msg):
            call(tmp_path)
    with pytest.raises(NelError, match="found an empty directory"):
        detect(tmp_path / "logs")


def test_a_bundle_file_alone_is_checked_too(peer_out: Path, tmp_path: Path) -> None:
    _, bench = _copy(peer_out, tmp_path)
    _shorten(bench)
    (f,) = bench.glob("eval-*.json")
    with pytest.raises(NelError, match="half-written run"):
        read_nemo_bench(f)
