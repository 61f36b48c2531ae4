"""`nel eval run`, `eval merge`, `eval report` and `report` next to the real NeMo Evaluator
0.3.0 (`tests/support/peers.py`): the same invocations exit with the same status, and
`max_problems` scores the same gsm8k items in both tools (the peer reads the same test.jsonl
through a BYOB file; both send their requests to one reference server)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.cli import run_nel
from tests.support.peers import run_peer_nemo

PEER_BENCH = '''
from nemo_evaluator import ScorerInput, benchmark, exact_match, scorer


@benchmark(name="gsm8k_local", dataset={dataset!r}, prompt="{{question}}", target_field="answer")
@scorer
def check(sample: ScorerInput) -> dict:
    return exact_match(sample)
'''
# The real default: no NEL_SHUFFLE_SEED (the suite sets it for older first-N tests).
UNSET = ["NEL_SHUFFLE_SEED", "NEL_SHARD_IDX", "NEL_TOTAL_SHARDS"]


@pytest.fixture(scope="module")
def peer_bench(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    """A BYOB file for NeMo Evaluator over nel's gsm8k data (same file, same index space)."""
    f = tmp_path_factory.mktemp("peer-bench") / "gsm8k_local.py"
    f.write_text(PEER_BENCH.format(dataset=str(data_dir / "gsm8k" / "test.jsonl")))
    return f


def _peer_ids(out: Path) -> set[int]:
    lines = (out / "gsm8k_local" / "results.jsonl").read_text().splitlines()
    return {json.loads(ln)["problem_idx"] for ln in lines if ln.strip()}


def _nel_ids(out: Path) -> set[int]:
    parts = (out / "gsm8k" / "shard_results" / "model=ref").glob("shard=*/part-0.parquet")
    return {int(i) for p in parts for i in pq.read_table(p, columns=["problem_idx"]).column("problem_idx").to_pylist()}


def _peer_run(bench: Path, url: str, out: Path, *extra: str, env: dict[str, str] | None = None) -> None:
    p = run_peer_nemo("eval", "run", "--bench", str(bench), "--model-url", url, "--model-id", "ref",
                      "-o", str(out), *extra, env=env, unset=UNSET, cwd=out.parent)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]


def _nel_run(url: str, out: Path, data_dir: Path, *extra: str, env: dict[str, str] | None = None) -> None:
    p = run_nel("eval", "run", "--bench", "gsm8k", "--model-url", url, "--model-id", "ref", "-o", str(out),
                "--no-progress", *extra, env={"NEL_DATA_DIR": str(data_dir), **(env or {})},
                unset=[v for v in UNSET if v not in (env or {})])
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]


def test_max_problems_scores_the_same_items_in_both_tools(
        tmp_path: Path, peer_bench: Path, reference_server, data_dir: Path) -> None:
    url = reference_server()
    _peer_run(peer_bench, url, tmp_path / "peer", "--max-problems", "10")
    _nel_run(url, tmp_path / "nel", data_dir, "-m", "10")
    peer_ids = _peer_ids(tmp_path / "peer")
    assert len(peer_ids) == 10 and peer_ids != set(range(10))  # a shuffled pick, not the first 10
    assert _nel_ids(tmp_path / "nel") == peer_ids
    (peer_bundle,) = (tmp_path / "peer" / "gsm8k_local").glob("eval-*.json")
    peer_shuffle = json.loads(peer_bundle.read_text())["config"]["shuffle"]
    nel_bundle = json.loads((tmp_path / "nel" / "gsm8k" / "bundle" / "model=ref" / "bundle.json").read_text())
    assert nel_bundle["shuffle"] == peer_shuffle

    # one shard of a sharded run (both read NEL_SHARD_IDX / NEL_TOTAL_SHARDS): the same slice
    shard = {"NEL_SHARD_IDX": "1", "NEL_TOTAL_SHARDS": "3"}
    _peer_run(peer_bench, url, tmp_path / "peer1", "--max-problems", "10", env=shard)
    _nel_run(url, tmp_path / "nel1", data_dir, "-m", "10", env=shard)
    assert _nel_ids(tmp_path / "nel1") == _peer_ids(tmp_path / "peer1")
    assert len(_peer_ids(tmp_path / "peer1")) == 3


def _both(*args: str, cwd: Path, data_dir: Path) -> tuple[int, int, str]:
    peer = run_peer_nemo(*args, cwd=cwd, unset=UNSET)
    nel = run_nel(*args, cwd=cwd, env={"NEL_DATA_DIR": str(data_dir)}, unset=UNSET)
    return peer.returncode, nel.returncode, f"peer:\n{peer.stderr[-1500:]}\nnel:\n{nel.stderr[-1500:]}"


QUICK = ["eval", "run", "--bench", "gsm8k", "--model-url", "{url}", "--model-id", "ref", "-o", "{out}"]


@pytest.mark.parametrize(("extra", "status"), [
    (["--dry-run"], 0),
    (["--dry-run", "--submit"], 0),
    (["--dry-run", "--background"], 0),  # the dry run wins in both
    (["--dry-run", "-v", "--temperature", "0.5", "--max-tokens", "16", "-n", "2", "--max-problems", "3",
      "--system-prompt", "Be brief.", "--resume"], 0),
    (["--dry-run", "--adapter", "x"], 2),  # the peer has no such flag; nel refuses it
    (["--dry-run", "--no-such-flag"], 2),
    (["--dry-run", "--temperature", "hot"], 2),
    (["--dry-run", "--max-tokens", "1.5"], 2),
])
def test_eval_run_same_invocation_same_status(tmp_path: Path, reference_server, server_stats, data_dir: Path,
                                              extra: list[str], status: int) -> None:
    url = reference_server()
    args = [a.format(url=url, out=tmp_path / "out") for a in QUICK] + extra
    peer, nel, logs = _both(*args, cwd=tmp_path, data_dir=data_dir)
    assert (peer, nel) == (status, status), logs
    assert server_stats(url)["total_requests"] == 0  # a dry run sends nothing, in either tool


@pytest.mark.parametrize("args", [
    ["eval", "merge", "{dir}", "--repeats", "two"],
    ["eval", "merge", "{dir}", "-r"],
    ["eval", "report", "{dir}", "--format", "pdf"],
    ["eval", "report", "{dir}", "--bogus"],
    ["report"],
    ["report", "{dir}", "-f", "docx"],
])
def test_results_commands_refuse_the_same_usage_errors(tmp_path: Path, data_dir: Path, args: list[str]) -> None:
    (tmp_path / "d").mkdir()
    peer, nel, logs = _both(*[a.format(dir=tmp_path / "d") for a in args], cwd=tmp_path, data_dir=data_dir)
    assert (peer, nel) == (2, 2), logs


def test_sharded_run_merge_and_reports_in_both_tools(
        tmp_path: Path, peer_bench: Path, reference_server, data_dir: Path) -> None:
    """Each tool runs two shard processes into OUT/shard_0 and OUT/shard_1 (NeMo Evaluator's
    layout), then the same merge and report invocations succeed in both, over the same items."""
    url = reference_server()
    peer_out, nel_out = tmp_path / "peer", tmp_path / "nel"
    for i in (0, 1):
        shard = {"NEL_SHARD_IDX": str(i), "NEL_TOTAL_SHARDS": "2"}
        peer_out.mkdir(exist_ok=True)
        _peer_run(peer_bench, url, peer_out / f"shard_{i}", "--max-problems", "6", env=shard)
        _nel_run(url, nel_out / f"shard_{i}", data_dir, "-m", "6", env=shard)
    for args in (["eval", "merge", "{out}"], ["eval", "merge", "{out}", "-n", "1"],
                 ["eval", "report", "{out}"], ["eval", "report", "{out}", "--with-results"],
                 ["eval", "report", "{out}", "-f", "json"]):
        peer = run_peer_nemo(*[a.format(out=peer_out) for a in args], cwd=tmp_path, unset=UNSET)
        nel = run_nel(*[a.format(out=nel_out) for a in args], cwd=tmp_path, unset=UNSET)
        assert (peer.returncode, nel.returncode) == (0, 0), f"{args}\n{peer.stderr[-1500:]}\n{nel.stderr[-1500:]}"
    merged_peer = {json.loads(ln)["problem_idx"]
                   for ln in (peer_out / "gsm8k_local" / "results.jsonl").read_text().splitlines() if ln.strip()}
    assert _nel_ids(nel_out) == merged_peer and len(merged_peer) == 6
    # `report FILE`: one bundle JSON as the argument, in each tool's own merged output
    peer_bundle = sorted((peer_out / "gsm8k_local").glob("eval-*.json"))[-1]  # one per merge
    (nel_bundle,) = (nel_out / "gsm8k").glob("eval-*.json")
    peer = run_peer_nemo("report", str(peer_bundle), "-f", "markdown", cwd=tmp_path, unset=UNSET)
    nel = run_nel("report", str(nel_bundle), "-f", "markdown", cwd=tmp_path, unset=UNSET)
    assert (peer.returncode, nel.returncode) == (0, 0), peer.stderr[-1500:] + nel.stderr[-1500:]
    assert "gsm8k_local" in peer.stdout and "gsm8k" in nel.stdout


@pytest.mark.parametrize("command", ["report", "merge"])
def test_an_unknown_run_id_is_the_same_error_in_both(tmp_path: Path, data_dir: Path, command: str) -> None:
    """`eval report|merge -r ID` of a run neither tool recorded: the same `Error:` line, exit 1."""
    peer = run_peer_nemo("eval", command, "-r", "nosuchrun", cwd=tmp_path, unset=UNSET)
    nel = run_nel("eval", command, "-r", "nosuchrun", cwd=tmp_path, env={"NEL_DATA_DIR": str(data_dir)},
                  unset=UNSET)
    assert (peer.returncode, nel.returncode) == (1, 1), (peer.stderr, nel.stderr)
    assert nel.stderr.strip() == peer.stderr.strip() == "Error: No run metadata found for run-id=nosuchrun."
