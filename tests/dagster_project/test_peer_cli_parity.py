"""`nel compare|gate|list|validate|serve` against the real NeMo Evaluator 0.3.0 CLI.

For every flag of those commands, both tools get the same invocation and must exit with the
same status on the same results. The results are the PEER's own: one session fixture runs
the peer's `nel eval run` on a 20-problem benchmark file against three reference servers
(every answer right; 15 wrong; 2 wrong), so `base/`, `block/` and `small/` hold NeMo
Evaluator 0.3.0 result directories (eval-*.json + results.jsonl). nel reads that format, so
both tools' `compare` and `gate` run on the very same directories.

Both tools get their own copy of the benchmark (the peer's imports `nemo_evaluator`, nel's
`benchmarks`): same data, prompt and scorer, so `validate` and `serve` see the same problems.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nel_resources.reference_server import start_reference_server
from nel_resources.runtime.processes import ManagedProcess, start_on_free_port
from tests.support.cli import nel_env, run_nel
from tests.support.peers import peer_nemo_bin, run_peer_nemo
from tests.support.realcomponents import REPO_ROOT
from tests.support.reference import http_json

N = 20
BENCH = "toyadd"
PROMPT = "{question}\\nPut your final answer after 'Answer:'."
PEER_FILE = f'''from nemo_evaluator import ScorerInput, answer_line, benchmark, scorer


@benchmark(name="{BENCH}", dataset="{{data}}", prompt="{PROMPT}", target_field="answer")
@scorer
def check(sample: ScorerInput) -> dict:
    return answer_line(sample)
'''
NEL_FILE = PEER_FILE.replace("from nemo_evaluator import", "from benchmarks import")


@dataclass
class Fixture:
    """The peer's result dirs, both benchmark files, a gate policy and the servers' URLs."""

    root: Path
    peer_bench: Path
    nel_bench: Path
    policy: Path
    urls: dict[str, str]

    def run(self, name: str) -> str:
        return str(self.root / name)


def _answers(wrong: int) -> list[dict[str, str]]:
    """The first `wrong` problems answered off by one, the rest right."""
    return [{"match": f"What is {i} + {i}?", "content": f"Answer: {2 * i + (1 if i < wrong else 0)}"}
            for i in range(N)]


@pytest.fixture(scope="module")
def peer_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fixture]:
    """Result dirs written by NeMo Evaluator 0.3.0's own `nel eval run`."""
    peer_nemo_bin()  # skips locally (fails in CI) before any server starts
    root = tmp_path_factory.mktemp("peer-parity")
    data = root / "qa.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} + {i}?", "answer": str(2 * i)}) + "\n"
                            for i in range(N)))
    peer_bench = root / "peer_bench.py"
    peer_bench.write_text(PEER_FILE.replace("{data}", str(data)))
    nel_bench = root / "nel_bench.py"
    nel_bench.write_text(NEL_FILE.replace("{data}", str(data)))
    policy = root / "policy.yaml"
    policy.write_text(f"version: 1\ndefaults:\n  max_drop: 0.05\n  metric: mean_reward\n"
                      f"benchmarks:\n  {BENCH}:\n    tier: critical\n")
    procs: list[ManagedProcess] = []
    urls: dict[str, str] = {}
    try:
        for name, wrong in (("base", 0), ("block", 15), ("small", 2)):
            proc, url = start_reference_server(answers=_answers(wrong))
            procs.append(proc)
            urls[name] = url
            p = run_peer_nemo("eval", "run", "--bench", str(peer_bench), "--model-url", url,
                              "--model-id", f"{name}-model", "-o", str(root / name), cwd=root)
            assert p.returncode == 0, p.stderr[-3000:]
            assert len(list((root / name / BENCH).glob("eval-*.json"))) == 1
        yield Fixture(root, peer_bench, nel_bench, policy, urls)
    finally:
        for proc in procs:
            proc.stop()


def both(*args: str, cwd: Path) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """The same invocation through the peer's CLI and nel's; returns (peer, nel)."""
    return run_peer_nemo(*args, cwd=cwd), run_nel(*args, cwd=cwd)


def same_status(*args: str, cwd: Path, expect: int) -> tuple[str, str]:
    """Both tools exit `expect` on ARGS; returns their stdouts."""
    peer, nel = both(*args, cwd=cwd)
    assert (peer.returncode, nel.returncode) == (expect, expect), (
        f"`{' '.join(args)}`: peer {peer.returncode}, nel {nel.returncode} (expected {expect})\n"
        f"peer: {peer.stdout[-1500:]}{peer.stderr[-1500:]}\nnel: {nel.stdout[-1500:]}{nel.stderr[-1500:]}")
    return peer.stdout, nel.stdout


# ----------------------------------------------------------------------------- compare


COMPARE_CASES = [
    # (candidate, flags, exit status of both): strict by default, BLOCK 1, WARN/INCONCLUSIVE 2
    ("base", [], 0),
    ("block", [], 1),
    ("small", [], 2),
    ("block", ["--no-strict"], 0),
    ("small", ["--no-strict"], 0),
    ("block", ["-t", "0.8"], 2),             # significant drop, not established beyond 0.8: WARN
    ("block", ["--max-drop", "0.01", "--strict", "--show-flips"], 1),
    ("block", ["--compact"], 1),
    ("small", ["--verbose"], 2),
    ("block", ["--format", "markdown"], 1),
    ("block", ["--format", "json"], 1),
    ("base", ["--format", "text", "--correct-above", "0.5"], 0),
    ("block", ["--test", "mcnemar"], 1),
    ("block", ["--test", "sign"], 1),
    ("block", ["--test", "permutation"], 1),
]


@pytest.mark.parametrize(("cand", "flags", "status"), COMPARE_CASES,
                         ids=[f"{c}{''.join(f) or '-default'}" for c, f, _ in COMPARE_CASES])
def test_compare_flags_exit_alike(peer_runs: Fixture, tmp_path: Path, cand: str, flags: list[str],
                                  status: int) -> None:
    same_status("compare", peer_runs.run("base"), peer_runs.run(cand), "--no-report", *flags,
                cwd=tmp_path, expect=status)


def test_compare_json_output_and_verdicts_agree(peer_runs: Fixture, tmp_path: Path) -> None:
    for cand, verdict in (("base", "PASS"), ("block", "BLOCK"), ("small", "INCONCLUSIVE")):
        peer_out, nel_out = tmp_path / f"peer-{cand}.json", tmp_path / f"nel-{cand}.json"
        args = ("compare", peer_runs.run("base"), peer_runs.run(cand), "--no-report", "--no-strict")
        assert run_peer_nemo(*args, "-o", str(peer_out), cwd=tmp_path).returncode == 0
        assert run_nel(*args, "-o", str(nel_out), cwd=tmp_path).returncode == 0
        assert json.loads(peer_out.read_text())["verdict"] == verdict
        assert json.loads(nel_out.read_text())["outcome"] == verdict


def test_compare_report_flags_write_alike(peer_runs: Fixture, tmp_path: Path) -> None:
    # --report PATH: both write their Markdown there
    for tool, run in (("peer", run_peer_nemo), ("nel", run_nel)):
        path = tmp_path / f"{tool}.md"
        p = run("compare", peer_runs.run("base"), peer_runs.run("block"), "--report", str(path), cwd=tmp_path)
        assert p.returncode == 1 and path.read_text().strip(), (tool, p.stderr[-2000:])
        assert "BLOCK" in path.read_text()
    # default: regression_report.md next to the candidate's eval-*.json; --no-report: none
    for tool, run in (("peer", run_peer_nemo), ("nel", run_nel)):
        cand = tmp_path / f"cand-{tool}"
        shutil.copytree(peer_runs.root / "small", cand)
        p = run("compare", peer_runs.run("base"), str(cand), "--no-report", cwd=tmp_path)
        assert p.returncode == 2 and not (cand / BENCH / "regression_report.md").exists(), tool
        p = run("compare", peer_runs.run("base"), str(cand), cwd=tmp_path)
        assert p.returncode == 2 and (cand / BENCH / "regression_report.md").is_file(), (tool, p.stderr[-2000:])


def test_compare_usage_errors_exit_2_in_both(peer_runs: Fixture, tmp_path: Path) -> None:
    base = peer_runs.run("base")
    same_status("compare", base, str(tmp_path / "missing"), cwd=tmp_path, expect=2)
    same_status("compare", base, base, "--format", "html", cwd=tmp_path, expect=2)
    same_status("compare", base, base, "--test", "ttest", cwd=tmp_path, expect=2)
    same_status("compare", base, base, "-t", "lots", cwd=tmp_path, expect=2)


def test_a_large_improvement_is_inconclusive_in_both(peer_runs: Fixture, tmp_path: Path) -> None:
    """15 improvements in 20 items: NeMo Evaluator's one-sided test calls it underpowered, and
    nel follows its rule (it used to answer PASS); nel's interval, above 0, stays beside it."""
    peer, nel = both("compare", peer_runs.run("block"), peer_runs.run("base"), "--no-report", cwd=tmp_path)
    assert (peer.returncode, nel.returncode) == (2, 2), (peer.stdout[-800:], nel.stdout[-800:])
    assert "INCONCLUSIVE" in peer.stdout and "verdict: INCONCLUSIVE" in nel.stdout
    assert "IMPROVEMENT: the CI lies above 0" in nel.stdout


# ----------------------------------------------------------------------------- gate


GATE_CASES = [
    # (candidate, policy flag, flags, exit status of both): strict by default, NO-GO 1, INCONCLUSIVE 2
    ("base", "-p", [], 0),
    ("block", "-p", [], 1),
    ("small", "--policy", [], 2),
    ("block", "-p", ["--no-strict"], 0),
    ("small", "-p", ["--no-strict"], 0),
    ("small", "-p", ["--strict", "--no-report"], 2),
    ("block", "--policy", ["--verbose"], 1),
    ("block", "-p", ["--format", "json"], 1),
    ("block", "-p", ["--format", "markdown"], 1),
    ("base", "-p", ["--format", "text"], 0),
]


@pytest.mark.parametrize(("cand", "policy_flag", "flags", "status"), GATE_CASES,
                         ids=[f"{c}{p}{''.join(f)}" for c, p, f, _ in GATE_CASES])
def test_gate_flags_exit_alike(peer_runs: Fixture, tmp_path: Path, cand: str, policy_flag: str,
                               flags: list[str], status: int) -> None:
    same_status("gate", peer_runs.run("base"), peer_runs.run(cand), policy_flag, str(peer_runs.policy),
                *flags, cwd=tmp_path, expect=status)


def test_gate_output_and_report_files_alike(peer_runs: Fixture, tmp_path: Path) -> None:
    for tool, run in (("peer", run_peer_nemo), ("nel", run_nel)):
        out = tmp_path / f"{tool}-gate.json"
        p = run("gate", peer_runs.run("base"), peer_runs.run("block"), "-p", str(peer_runs.policy),
                "-o", str(out), cwd=tmp_path)
        assert p.returncode == 1, (tool, p.stderr[-2000:])
        doc = json.loads(out.read_text())
        assert doc.get("verdict", doc.get("decision")) == "NO-GO", tool
        assert out.with_suffix(".md").is_file(), tool  # the damage report next to -o
        md = tmp_path / f"{tool}-damage.md"
        p = run("gate", peer_runs.run("base"), peer_runs.run("small"), "-p", str(peer_runs.policy),
                "--report", str(md), cwd=tmp_path)
        assert p.returncode == 2 and "INCONCLUSIVE" in md.read_text(), (tool, p.stderr[-2000:])
        quiet = tmp_path / f"{tool}-quiet.json"
        p = run("gate", peer_runs.run("base"), peer_runs.run("block"), "-p", str(peer_runs.policy),
                "-o", str(quiet), "--no-report", cwd=tmp_path)
        assert p.returncode == 1 and quiet.is_file() and not quiet.with_suffix(".md").exists(), tool


def test_gate_usage_errors_exit_2_in_both(peer_runs: Fixture, tmp_path: Path) -> None:
    base = peer_runs.run("base")
    same_status("gate", base, base, cwd=tmp_path, expect=2)  # no policy
    same_status("gate", base, base, "-p", str(tmp_path / "nope.yaml"), cwd=tmp_path, expect=2)
    same_status("gate", base, base, "-p", str(peer_runs.policy), "--format", "html", cwd=tmp_path, expect=2)


# ----------------------------------------------------------------------------- list


@pytest.mark.parametrize("flags", [[], ["-s", "all"], ["--source", "builtin"], ["-s", "skills"],
                                   ["-s", "lm-eval"], ["--data-dir", "/nonexistent"]])
def test_list_flags_exit_alike_with_the_same_sections(tmp_path: Path, flags: list[str]) -> None:
    peer, nel = same_status("list", *flags, cwd=tmp_path, expect=0)
    titles = [line for line in peer.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert titles and titles == [line for line in nel.splitlines() if line.endswith(":") and not line.startswith(" ")]
    if "Built-in benchmarks:" in titles:
        for name in ("gsm8k", "mmlu", "drop"):  # built in both; nel adds type and source
            assert f"nel eval run --bench {name}" in peer and f"nel eval run --bench {name}" in nel
            row = next(line for line in nel.splitlines() if line.strip().startswith(name + " "))
            assert "type=" in row and "source=" in row


def test_list_bad_source_is_a_usage_error_in_both(tmp_path: Path) -> None:
    same_status("list", "-s", "bogus", cwd=tmp_path, expect=2)


# ----------------------------------------------------------------------------- validate


def test_validate_with_a_model_reports_alike(peer_runs: Fixture, tmp_path: Path) -> None:
    """Same problems, same endpoint: the same score and the same PASS/FAIL per problem."""
    url = peer_runs.urls["small"]  # problems 0 and 1 answered wrong
    common = ("--model-url", url, "--model-id", "small-model")
    for samples in (["-s", "5"], ["--samples", "3"], []):
        peer = run_peer_nemo("validate", "-b", str(peer_runs.peer_bench), *common, *samples, cwd=tmp_path)
        nel = run_nel("validate", "-b", str(peer_runs.nel_bench), *common, *samples, cwd=tmp_path)
        assert (peer.returncode, nel.returncode) == (0, 0), (peer.stderr[-2000:], nel.stderr[-2000:])
        n = int(samples[1]) if samples else 5  # the peer's default: 5
        assert f"{n - 2}/{n} correct" in peer.stdout and f"{n - 2}/{n} correct" in nel.stdout

        def marks(text: str) -> list[str]:
            return sorted(line.strip().split(":")[0] for line in text.splitlines() if line.strip().startswith("["))

        assert marks(peer.stdout) == marks(nel.stdout) == sorted(
            [f"[FAIL] p{i}" for i in range(2)] + [f"[PASS] p{i}" for i in range(2, n)])


def test_validate_model_from_environment_and_verbose(peer_runs: Fixture, tmp_path: Path) -> None:
    env = {"NEMO_MODEL_URL": peer_runs.urls["base"], "NEMO_MODEL_ID": "base-model"}
    peer = run_peer_nemo("validate", "--benchmark", str(peer_runs.peer_bench), "-s", "2", "-v", cwd=tmp_path, env=env)
    nel = run_nel("validate", "--benchmark", str(peer_runs.nel_bench), "-s", "2", "-v", cwd=tmp_path, env=env)
    assert (peer.returncode, nel.returncode) == (0, 0), (peer.stderr[-2000:], nel.stderr[-2000:])
    assert "2/2 correct" in peer.stdout and "2/2 correct" in nel.stdout


def test_validate_url_without_model_id_is_a_usage_error_in_both(peer_runs: Fixture, tmp_path: Path) -> None:
    unset = ("NEMO_MODEL_ID", "NEMO_MODEL_URL")
    peer = run_peer_nemo("validate", "-b", str(peer_runs.peer_bench), "--model-url", peer_runs.urls["base"],
                         cwd=tmp_path, unset=unset)
    nel = run_nel("validate", "-b", str(peer_runs.nel_bench), "--model-url", peer_runs.urls["base"],
                  cwd=tmp_path, unset=unset)
    assert (peer.returncode, nel.returncode) == (2, 2), (peer.stderr[-800:], nel.stderr[-800:])
    assert "--model-id" in peer.stderr and "--model-id" in nel.stderr


# ----------------------------------------------------------------------------- serve


def _serve(cmd: Callable[[int], list[str]], env: dict[str, str], cwd: Path, log: Path) -> tuple[ManagedProcess, int]:
    def make(port: int) -> ManagedProcess:
        return ManagedProcess(cmd(port), env=env, cwd=cwd, log_path=log, name="serve")

    return start_on_free_port(make, lambda port: f"http://127.0.0.1:{port}/health", timeout=60)


@pytest.mark.parametrize("port_flag", ["-p", "--port"])
def test_serve_flags_alike(peer_runs: Fixture, tmp_path: Path, port_flag: str) -> None:
    """`nel serve -b FILE -p PORT --host 127.0.0.1 --gym-compat --export-data DIR`: both export
    DIR/<benchmark>.jsonl, then serve the same problems."""
    import os
    import sys

    peer_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DAGSTER_HOME")}
    tools = {
        "peer": (lambda port: [str(peer_nemo_bin()), "serve", "-b", str(peer_runs.peer_bench), port_flag,
                               str(port), "--host", "127.0.0.1", "--gym-compat", "--export-data",
                               str(tmp_path / "peer-export")], peer_env),
        "nel": (lambda port: [sys.executable, "-m", "dagster_project.cli.main", "serve", "-b",
                              str(peer_runs.nel_bench), port_flag, str(port), "--host", "127.0.0.1",
                              "--gym-compat", "--export-data", str(tmp_path / "nel-export")], nel_env()),
    }
    health: dict[str, dict] = {}
    for tool, (cmd, env) in tools.items():
        proc, port = _serve(cmd, env, REPO_ROOT if tool == "nel" else tmp_path, tmp_path / f"{tool}.log")
        try:
            status, _, body = http_json("GET", f"http://127.0.0.1:{port}/health")
            assert status == 200, (tool, body)
            health[tool] = body
        finally:
            proc.stop()
        rows = (tmp_path / f"{tool}-export" / f"{BENCH}.jsonl").read_text().splitlines()
        assert len(rows) == N, tool
    assert health["peer"]["dataset_size"] == health["nel"]["dataset_size"] == N
    # both in Gym mode, with the same protocol label
    assert health["peer"]["protocol"] == health["nel"]["protocol"] == "gym"
