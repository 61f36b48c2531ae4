"""nel reads NeMo Evaluator 0.3.0 results: `compare`, `gate`, `eval report`, `report` and
`eval merge` on the peer's run dirs, bundle files and shard layouts, mixed with nel's own
runs, and `nel data import-run` into the Parquet store and the Dagster instance.

The module makes its inputs once: the real peer CLI runs the capitals BYOB benchmark
(tests/benchmarks/nemo_files/) plainly and as two shard processes with 2 repeats, and
`nel eval run` runs the same file with 2 repeats, all against one reference server.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from nel_resources.reference_server import start_reference_server
from nel_resources.runtime.processes import ManagedProcess
from tests.support.cli import run_nel
from tests.support.nemo_outputs import (
    ANSWERS,
    BENCH_NAME,
    DEFAULT_ANSWER,
    EXPECTED_REWARDS,
    UNSET,
    copy_bench,
    peer_rewards,
    peer_run,
    peer_sharded_run,
    tree_state,
)
from tests.support.peers import run_peer_nemo
from tests.support.reference import reset_server_stats, server_stats

POLICY = "version: 1\ndefaults: {tier: critical, max_drop: 0.1}\n"


@dataclass
class Inputs:
    url: str
    bench: Path  # the BYOB file
    peer: Path  # a plain peer run (1 repeat)
    peer_shards: Path  # shard_0/, shard_1/ (2 repeats each)
    nel: Path  # a nel output dir (2 repeats)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Inputs]:
    """Both tools' outputs of the same benchmark and model (read-only: copy before writing)."""
    root = tmp_path_factory.mktemp("peer-read")
    proc: ManagedProcess
    proc, url = start_reference_server(answers=ANSWERS, default_content=DEFAULT_ANSWER)
    try:
        bench = copy_bench(root / "bench")
        peer = peer_run(bench, url, root / "peer")
        shards = peer_sharded_run(bench, url, root / "peer_shards", 2, "-n", "2")
        p = run_nel("eval", "run", "--bench", str(bench), "--model-url", url, "--model-id", "ref",
                    "-o", str(root / "nel"), "-n", "2", "--no-progress", unset=UNSET)
        assert p.returncode == 0, p.stderr[-3000:]
        yield Inputs(url, bench, peer, shards, root / "nel")
    finally:
        proc.stop()


def _json(*args: str, code: int = 0) -> dict:
    p = run_nel(*args)
    assert p.returncode == code, p.stderr[-2000:]
    return json.loads(p.stdout)


def _nel_rewards(out: Path, model: str = "ref") -> dict[tuple[int, int], float]:
    """(problem_idx, repeat) -> reward of every shard nel stored for ``model``."""
    parts = sorted((out / BENCH_NAME / "shard_results" / f"model={model}").glob("shard=*/part-0.parquet"))
    assert parts, out
    return {(r["problem_idx"], r["repeat"]): r["reward"]
            for p in parts for r in pq.read_table(p, columns=["problem_idx", "repeat", "reward"]).to_pylist()}


def test_compare_and_gate_mix_the_two_tools(inputs: Inputs, tmp_path: Path) -> None:
    # the per-item rewards both tools stored are the same, item by item
    peer = peer_rewards(inputs.peer / BENCH_NAME)
    nel = _nel_rewards(inputs.nel)
    assert peer == {(i, 0): r for i, r in EXPECTED_REWARDS.items()}
    assert {k: v for k, v in nel.items() if k[1] == 0} == peer and len(nel) == 8
    # baseline from the peer (a run dir), candidate from nel, and the other way round with the
    # peer's unmerged shard layout and its bundle file: paired on the same 4 items, delta 0
    sides = [(inputs.peer, inputs.nel), (inputs.nel, inputs.peer_shards),
             (next((inputs.peer / BENCH_NAME).glob("eval-*.json")), inputs.nel)]
    for base, cand in sides:
        doc = _json("compare", str(base), str(cand), "--format", "json", "--no-report")
        c = doc["benchmarks"][BENCH_NAME]
        assert (c["n_paired"], c["n_unpaired_base"], c["n_unpaired_cand"]) == (4, 0, 0), (base, cand)
        assert c["delta"] == 0.0 and c["base_mean"] == c["cand_mean"] == 0.5 and doc["outcome"] == "PASS"
    assert doc["baseline"]["kind"] == "nemo" and doc["candidate"]["kind"] == "nel"
    (tmp_path / "policy.yaml").write_text(POLICY)
    # 4 paired items: too few for NeMo Evaluator's gate (minimum 10), so INCONCLUSIVE, exit 2, as there
    gate = _json("gate", str(inputs.peer_shards), str(inputs.nel), "-p", str(tmp_path / "policy.yaml"),
                 "--format", "json", code=2)
    (row,) = gate["benchmarks"]
    assert gate["verdict"] == gate["decision"] == "INCONCLUSIVE"
    assert (row["benchmark"], row["status"], row["n_paired"]) == (BENCH_NAME, "INSUFFICIENT_EVIDENCE", 4)


def test_compare_writes_its_report_next_to_the_peers_bundle(inputs: Inputs, tmp_path: Path) -> None:
    cand = tmp_path / "peer"
    shutil.copytree(inputs.peer, cand)
    p = run_nel("compare", str(inputs.nel), str(cand))
    assert p.returncode == 0, p.stderr
    assert (cand / BENCH_NAME / "regression_report.md").is_file()  # where NeMo Evaluator puts it


def test_reports_read_peer_dirs_bundles_and_both_tools_at_once(inputs: Inputs, tmp_path: Path) -> None:
    md = run_nel("eval", "report", str(inputs.peer))
    assert md.returncode == 0, md.stderr
    assert f"| {BENCH_NAME} | ref | 50.00 |" in md.stdout
    bundle = next((inputs.peer / BENCH_NAME).glob("eval-*.json"))
    doc = _json("report", str(bundle), "-f", "json")
    (b,) = doc["bundles"]
    assert (b["score"]["mean"], b["score"]["n_items"], b["source_tool"]) == (0.5, 4, "nemo-evaluator 0.3.0")
    both = _json("report", str(inputs.peer_shards), str(inputs.nel), "-f", "json")
    got = sorted((x["score"]["n_items"], x["score"]["n_samples"], x["score"]["mean"]) for x in both["bundles"])
    assert got == [(4, 8, 0.5), (4, 8, 0.5)]  # the shards combined: 4 items × 2 repeats each
    html = run_nel("report", str(inputs.peer), "-o", str(tmp_path / "r.html"))
    assert html.returncode == 0 and "Answer: Nairobi" in (tmp_path / "r.html").read_text()


def test_eval_merge_of_the_peers_shard_layout(inputs: Inputs, tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    shutil.copytree(inputs.peer_shards, ours)
    shutil.copytree(inputs.peer_shards, theirs)
    p = run_nel("eval", "merge", str(ours), "-n", "2", "--json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["complete"] and rep["shards"] == {f"{BENCH_NAME}/ref": [0, 1]}
    bundle = json.loads((ours / BENCH_NAME / "bundle" / "model=ref" / "bundle.json").read_text())
    assert (bundle["score"]["n_items"], bundle["score"]["n_samples"], bundle["score"]["mean"]) == (4, 8, 0.5)
    # the peer's own merge of the same layout: nel reads its merged <bench>/ and agrees
    peer = run_peer_nemo("eval", "merge", str(theirs), unset=UNSET)
    assert peer.returncode == 0, peer.stderr[-2000:]
    doc = _json("compare", str(theirs), str(ours), "--format", "json", "--no-report")
    c = doc["benchmarks"][BENCH_NAME]
    assert c["n_paired"] == 4 and c["delta"] == 0.0 and doc["baseline"]["kind"] == "nemo"
    # one shard from each tool: nel's shard 0 and the peer's shard 1 merge into one run
    mixed = tmp_path / "mixed"
    p = run_nel("eval", "run", "--bench", str(inputs.bench), "--model-url", inputs.url, "--model-id", "ref",
                "-o", str(mixed / "shard_0"), "-n", "2", "--no-progress",
                env={"NEL_SHARD_IDX": "0", "NEL_TOTAL_SHARDS": "2"}, unset=["NEL_SHUFFLE_SEED"])
    assert p.returncode == 0, p.stderr[-2000:]
    shutil.copytree(inputs.peer_shards / "shard_1", mixed / "shard_1")
    rep = json.loads(run_nel("eval", "merge", str(mixed), "-n", "2", "--json").stdout)
    assert rep["complete"] and rep["shards"] == {f"{BENCH_NAME}/ref": [0, 1]}
    assert _nel_rewards(mixed) == _nel_rewards(inputs.nel)  # every item, every repeat


def test_import_run_then_a_new_model_compares_against_it(inputs: Inputs, tmp_path: Path) -> None:
    import dagster as dg

    from nel_resources.storage.views import connect

    out = tmp_path / "out"
    p = run_nel("data", "import-run", str(inputs.peer), "-o", str(out), "--model", "Old Model")
    assert p.returncode == 0, p.stderr
    assert _nel_rewards(out, "old-model") == peer_rewards(inputs.peer / BENCH_NAME)
    # the DuckDB views see the imported rows and bundle
    con = connect(out)
    assert con.execute("SELECT count(*), sum(reward) FROM results WHERE model = 'old-model'").fetchone() == (4, 2.0)
    assert con.execute("SELECT mean FROM bundles WHERE model = 'old-model'").fetchone() == (0.5,)
    # the Dagster instance knows the partition and its materialization
    instance = dg.DagsterInstance.from_config(str(out / ".dagster"))
    assert "old-model" in instance.get_dynamic_partitions("model")
    ev = instance.get_latest_materialization_event(dg.AssetKey([BENCH_NAME, "bundle"]))
    assert ev is not None and ev.asset_materialization.partition == "old-model"
    # a new model with the imported run as its baseline: only the new model is evaluated
    reset_server_stats(inputs.url)
    cfg = tmp_path / "cand.yaml"
    cfg.write_text(f"services:\n  new-model:\n    url: {inputs.url}\n    model: ref\n"
                   f"benchmarks:\n- name: {BENCH_NAME}\n  module: {inputs.bench}\n"
                   f"comparison:\n  baseline: Old Model\n  max_drop: 0.1\noutput:\n  dir: {out}\n")
    p = run_nel("eval", "run", str(cfg), "--no-progress", unset=UNSET)
    assert p.returncode == 0, p.stderr[-3000:]
    assert server_stats(inputs.url)["by_endpoint"].get("/v1/chat/completions") == 4  # 4 items, one model
    reg = json.loads((out / "comparison" / "comparison" / "model=new-model" / "regression.json").read_text())
    c = reg["benchmarks"][BENCH_NAME]
    assert (c["n_paired"], c["delta"], reg["gate"]["decision"]) == (4, 0.0, "GO")
    assert reg["baseline"]["model"] == "old-model"


def _tear(run: Path) -> None:
    f = run / BENCH_NAME / "results.jsonl"
    f.write_bytes(f.read_bytes()[:-30])


def _old_version(run: Path) -> None:
    (f,) = (run / BENCH_NAME).glob("eval-*.json")
    f.write_text(f.read_text().replace('"sdk_version": "0.3.0"', '"sdk_version": "0.2.9"'))


def _no_bundle(run: Path) -> None:
    for f in (run / BENCH_NAME).glob("eval-*.json"):
        f.unlink()


def _neither(run: Path) -> None:
    shutil.rmtree(run / BENCH_NAME)


@pytest.mark.parametrize(("damage", "command", "expected"), [
    (_tear, "import-run", "a torn results.jsonl: expected one JSON object per line, found that its last line"),
    (_old_version, "merge", "unknown version: expected sdk_version 0.3.x, found '0.2.9'"),
    (_no_bundle, "compare", "a half-written run: expected an eval-*.json bundle next to results.jsonl"),
    (_neither, "report", "neither a nel output directory (<bench>/shard_results/) nor a NeMo Evaluator 0.3.0"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(inputs: Inputs, tmp_path: Path, damage, command: str,
                                                         expected: str) -> None:
    run = tmp_path / "shards" / "shard_1"
    shutil.copytree(inputs.peer_shards, tmp_path / "shards")
    damage(run)
    out = tmp_path / "out"
    out.mkdir()
    before = {"src": tree_state(tmp_path / "shards"), "out": tree_state(out), "nel": tree_state(inputs.nel)}
    args = {"import-run": ["data", "import-run", str(tmp_path / "shards"), "-o", str(out)],
            "merge": ["eval", "merge", str(tmp_path / "shards")],
            "compare": ["compare", str(tmp_path / "shards"), str(inputs.nel), "-o", str(out)],
            "report": ["eval", "report", str(run), "-o", str(out / "r.md")]}[command]
    p = run_nel(*args)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0] and "Traceback" not in p.stderr, p.stderr
    after = {"src": tree_state(tmp_path / "shards"), "out": tree_state(out), "nel": tree_state(inputs.nel)}
    assert after == before
