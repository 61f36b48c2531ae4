"""`nel compare` and `nel gate` reach NeMo Evaluator 0.3.0's verdicts and exit statuses.

A table of scenarios (significant drop, drop under the threshold, improvement, no change,
tiny n, zero variance, missing benchmark, several benchmarks, policies with several rules,
strict and non-strict). For each, the PEER writes the two result directories with its own
bundle writer (so every `eval-*.json` score and CI is its own), then its real CLI and nel's
run `compare` and `gate` on them in both directions (baseline/candidate swapped), and must
agree on the verdict and the exit status. nel's JSON must carry a top-level `verdict`, and
its text must not contradict its own numbers.

Fast: one peer interpreter writes every directory and runs every peer command (through its
click group, as its `nel` executable does); nel's commands run in-process through
`dagster_project.cli.main.main`.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.peers import peer_nemo_bin

DRIVER = Path(__file__).resolve().parents[1] / "support" / "nemo_peer_driver.py"
Rewards = list[list[float]]  # per problem, per repeat


def binary(n: int, correct: int, reg: int = 0, imp: int = 0) -> tuple[Rewards, Rewards]:
    """`n` problems, the first `correct` right in the baseline; the candidate loses the first
    `reg` of those and gains the first `imp` wrong ones."""
    base = [1.0 if i < correct else 0.0 for i in range(n)]
    cand = list(base)
    for i in range(reg):
        cand[i] = 0.0
    for j in range(imp):
        cand[correct + j] = 1.0
    return [[x] for x in base], [[x] for x in cand]


def graded(n: int, shift: float, every: int = 2) -> tuple[Rewards, Rewards]:
    """Graded rewards in [0, 1]; every `every`-th problem loses `shift` in the candidate."""
    base = [0.25 + 0.5 * ((i * 7) % 11) / 10 for i in range(n)]
    cand = [max(0.0, b - shift) if i % every == 0 else b for i, b in enumerate(base)]
    return [[round(x, 4)] for x in base], [[round(x, 4)] for x in cand]


def repeats(n: int, k: int, lost: int) -> tuple[Rewards, Rewards]:
    """`k` repeats per problem; the candidate gets `lost` fewer right on every third problem."""
    base = [[1.0 if (i + r) % 3 else 0.0 for r in range(k)] for i in range(n)]
    cand = []
    for i, reps in enumerate(base):
        reps = list(reps)
        if i % 3 == 0:
            done = 0
            for r in range(k):
                if reps[r] == 1.0 and done < lost:
                    reps[r], done = 0.0, done + 1
        cand.append(reps)
    return base, cand


def const(n: int, b: float, c: float) -> tuple[Rewards, Rewards]:
    return [[b]] * n, [[c]] * n


def policy(benches: dict[str, dict[str, Any]] | None = None, **defaults: Any) -> dict[str, Any]:
    return {"version": 1, "defaults": {"max_drop": 0.05, "metric": "mean_reward", **defaults},
            "benchmarks": benches or {}}


CRIT = {"tier": "critical"}


@dataclass
class Scenario:
    """Two runs (benchmark -> (baseline, candidate) rewards; None: absent on that side), a
    gate policy, extra flags, and NeMo Evaluator's forward verdicts (compare, gate)."""

    id: str
    benches: dict[str, tuple[Rewards | None, Rewards | None]]
    policy: dict[str, Any]
    expect: tuple[str, str]
    compare_flags: list[str] = field(default_factory=list)
    strict: bool = True
    categories: int = 0  # problems get one of this many categories (0: none)


def _p(benches: dict, pol: dict | None = None) -> dict:
    return pol or policy({b: CRIT for b in benches})


SCENARIOS = [
    Scenario("significant_7pt_drop", {"qa": binary(100, 80, reg=8, imp=1)}, _p({"qa": 1}), ("BLOCK", "INCONCLUSIVE")),
    Scenario("large_drop_n200", {"qa": binary(200, 150, reg=30)}, _p({"qa": 1}), ("BLOCK", "NO-GO")),
    Scenario("drop_under_threshold", {"qa": binary(100, 80, reg=5)}, _p({"qa": 1}), ("WARN", "INCONCLUSIVE")),
    Scenario("drop_beyond_t_0.01", {"qa": binary(100, 80, reg=5)}, _p({"qa": 1}), ("BLOCK", "INCONCLUSIVE"),
             compare_flags=["-t", "0.01"]),
    Scenario("improvement", {"qa": binary(100, 50, imp=8)}, _p({"qa": 1}), ("INCONCLUSIVE", "GO")),
    Scenario("no_change", {"qa": binary(50, 30)}, _p({"qa": 1}), ("PASS", "GO")),
    Scenario("few_flips_both_ways_n400", {"qa": binary(400, 200, reg=2, imp=2)}, _p({"qa": 1}),
             ("INCONCLUSIVE", "GO")),
    Scenario("tiny_n_walkthrough_5", {"qa": binary(5, 3, reg=1, imp=1)}, _p({"qa": 1}),
             ("INCONCLUSIVE", "INCONCLUSIVE")),
    Scenario("tiny_n_identical", {"qa": binary(5, 3)}, _p({"qa": 1}), ("PASS", "INCONCLUSIVE")),
    # fewer than 10 items: the bundles' own pass@1 intervals decide (or cannot: all-0/all-1 runs
    # have none), a relative drop needs none
    Scenario("tiny_n_pass_at_1_intervals", {"qa": ([[1.0, 1.0, 1.0, 0.0]] * 6, [[1.0, 0.0, 0.0, 0.0]] * 6)},
             policy({"qa": CRIT}, metric="pass@1"), ("PASS", "NO-GO")),
    Scenario("tiny_n_pass_at_1_no_interval", {"qa": binary(8, 8, reg=8)},
             policy({"qa": CRIT}, metric="pass@1"), ("BLOCK", "INCONCLUSIVE")),
    Scenario("tiny_n_relative_drop", {"qa": binary(6, 5, reg=5)},
             policy({"qa": {"tier": "critical", "max_relative_drop": 0.1}}, metric="pass@1"),
             ("BLOCK", "NO-GO")),
    Scenario("zero_variance_binary", {"qa": binary(20, 20, reg=20)}, _p({"qa": 1}), ("BLOCK", "NO-GO")),
    Scenario("zero_variance_graded", {"qa": const(20, 0.8, 0.7)}, _p({"qa": 1}), ("PASS", "NO-GO")),
    Scenario("graded_permutation_drop", {"qa": graded(60, 0.5)}, _p({"qa": 1}), ("BLOCK", "NO-GO")),
    Scenario("graded_correct_above_0.5", {"qa": graded(60, 0.3, every=3)}, _p({"qa": 1}),
             ("BLOCK", "NO-GO"), compare_flags=["--correct-above", "0.5", "--test", "mcnemar"]),
    Scenario("repeats_sign_test", {"qa": repeats(60, 4, 2)}, _p({"qa": 1}), ("BLOCK", "NO-GO"),
             compare_flags=["--test", "sign"]),
    # no problem crosses reward 0 (each keeps a right repeat): no discordant pair, PASS, as the
    # peer says; its gate still sees the paired drop
    Scenario("repeats_permutation", {"qa": repeats(60, 4, 1)}, _p({"qa": 1}), ("PASS", "NO-GO")),
    Scenario("missing_required_benchmark", {"qa": binary(30, 20), "math": (binary(30, 20)[0], None)},
             policy({"qa": CRIT, "math": CRIT}), ("PASS", "NO-GO")),
    Scenario("missing_advisory_benchmark", {"qa": binary(30, 20), "math": (binary(30, 20)[0], None)},
             policy({"qa": CRIT, "math": {"tier": "advisory"}}), ("PASS", "GO")),
    Scenario("several_benchmarks", {"qa": binary(100, 80, reg=12), "math": binary(40, 20),
                                    "code": binary(40, 10, imp=4)}, policy(), ("BLOCK", "NO-GO")),
    Scenario("policy_tiers_and_rules", {"qa": binary(100, 80, reg=1), "math": binary(60, 30, reg=6),
                                        "code": binary(40, 30, reg=20)},
             policy({"qa": {"tier": "critical", "max_drop": 0.05},
                     "math": {"tier": "supporting", "max_relative_drop": 0.1},
                     "code": {"tier": "advisory"}}), ("BLOCK", "NO-GO")),
    Scenario("relative_guard_skips_high_baseline", {"qa": binary(100, 90, reg=6)},
             policy({"qa": {"tier": "critical", "max_drop": 0.2, "max_relative_drop": 0.05,
                            "relative_guard_below": 0.5}}), ("BLOCK", "GO")),
    Scenario("lower_is_better", {"qa": binary(60, 20, imp=20)},
             policy({"qa": {"tier": "critical", "direction": "lower_is_better"}}), ("INCONCLUSIVE", "NO-GO")),
    Scenario("clustered_categories", {"qa": binary(48, 24, reg=6)}, _p({"qa": 1}), ("BLOCK", "NO-GO"),
             categories=4),
    Scenario("unnamed_benchmark_gated_by_defaults", {"qa": binary(60, 40, reg=10)},
             {"version": 1, "defaults": {"max_drop": 0.02}}, ("BLOCK", "NO-GO")),
    Scenario("non_strict_block", {"qa": binary(100, 80, reg=8, imp=1)}, _p({"qa": 1}),
             ("BLOCK", "INCONCLUSIVE"), strict=False),
    Scenario("non_strict_tiny", {"qa": binary(5, 3, reg=1, imp=1)}, _p({"qa": 1}),
             ("INCONCLUSIVE", "INCONCLUSIVE"), strict=False),
]

COMPARE_EXIT = {"PASS": 0, "BLOCK": 1, "WARN": 2, "INCONCLUSIVE": 2}
GATE_EXIT = {"GO": 0, "NO-GO": 1, "INCONCLUSIVE": 2}
DIRECTIONS = ("fwd", "rev")


def _rows(rewards: Rewards, categories: int) -> list[list[Any]]:
    return [[i, r, x, f"cat{i % categories}" if categories else None]
            for i, reps in enumerate(rewards) for r, x in enumerate(reps)]


def _sides(s: Scenario, direction: str) -> tuple[str, str]:
    return ("base", "cand") if direction == "fwd" else ("cand", "base")


def _invocations(s: Scenario, root: Path, tool: str) -> dict[str, list[str]]:
    """The compare and gate command lines of one scenario, both directions."""
    d = root / s.id
    strict = [] if s.strict else ["--no-strict"]
    out: dict[str, list[str]] = {}
    for direction in DIRECTIONS:
        b, c = _sides(s, direction)
        out[f"{s.id}/compare/{direction}"] = [
            "compare", str(d / b), str(d / c), "--no-report", *s.compare_flags, *strict,
            "-o", str(d / f"{tool}-compare-{direction}.json")]
        out[f"{s.id}/gate/{direction}"] = [
            "gate", str(d / b), str(d / c), "-p", str(d / "policy.yaml"), "--no-report", *strict,
            "-o", str(d / f"{tool}-gate-{direction}.json")]
    return out


def _nel(args: list[str]) -> tuple[int, str]:
    """nel's CLI in-process: (exit status, stdout + stderr)."""
    from dagster_project.cli.main import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        code = main(args)
    return int(code), buf.getvalue()


@dataclass
class Table:
    root: Path
    peer: dict[str, dict[str, Any]]
    nel: dict[str, tuple[int, str]]


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Table]:
    peer_python = peer_nemo_bin().parent / "python"
    root = tmp_path_factory.mktemp("verdicts")
    writes, runs = [], []
    for s in SCENARIOS:
        (root / s.id).mkdir()
        (root / s.id / "policy.yaml").write_text(yaml.safe_dump(s.policy))
        for name, (b, c) in s.benches.items():
            for side, rewards in (("base", b), ("cand", c)):
                if rewards is not None:
                    writes.append({"dir": str(root / s.id / side / name), "benchmark": name,
                                   "model": f"{side}-model", "rows": _rows(rewards, s.categories)})
        runs += [{"id": k, "args": v} for k, v in _invocations(s, root, "peer").items()]
    env = {"PATH": "/usr/bin:/bin", "NO_COLOR": "1", "COLUMNS": "200", "HOME": str(root)}
    p = subprocess.run([str(peer_python), str(DRIVER)], input=json.dumps({"write": writes, "run": runs}),
                       capture_output=True, text=True, env=env, timeout=600, cwd=root)
    assert p.returncode == 0, p.stderr[-3000:]
    peer = json.loads(p.stdout)["run"]
    nel = {k: _nel(v) for s in SCENARIOS for k, v in _invocations(s, root, "nel").items()}
    yield Table(root, peer, nel)


def _peer_compare_verdicts(path: Path) -> dict[str, str]:
    doc = json.loads(path.read_text())
    if "verdict" in doc:  # one benchmark: its report
        return {"*": doc["verdict"]}
    return {name: rep["verdict"] for name, rep in doc.items()}


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("s", SCENARIOS, ids=[s.id for s in SCENARIOS])
def test_compare_verdict_and_exit_agree(table: Table, s: Scenario, direction: str) -> None:
    key = f"{s.id}/compare/{direction}"
    peer, (nel_code, nel_out) = table.peer[key], table.nel[key]
    d = table.root / s.id
    peer_v = _peer_compare_verdicts(d / f"peer-compare-{direction}.json")
    doc = json.loads((d / f"nel-compare-{direction}.json").read_text())
    nel_v = ({"*": doc["verdict"]} if "*" in peer_v else
             {n: doc["benchmarks"][n]["outcome"] for n in peer_v})
    assert (peer["exit_code"], peer_v) == (nel_code, nel_v), (
        f"peer {peer['exit_code']} {peer_v}, nel {nel_code} {nel_v}\npeer: {peer['output'][-1500:]}\n"
        f"nel: {nel_out[-1500:]}")
    worst = max(peer_v.values(), key=["PASS", "INCONCLUSIVE", "WARN", "BLOCK"].index)
    assert doc["verdict"] == worst  # nel's top-level verdict, also with several benchmarks
    assert nel_code == (COMPARE_EXIT[worst] if s.strict else 0)
    if direction == "fwd":
        assert worst == s.expect[0], "the scenario no longer tests what it says"


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("s", SCENARIOS, ids=[s.id for s in SCENARIOS])
def test_gate_verdict_and_exit_agree(table: Table, s: Scenario, direction: str) -> None:
    key = f"{s.id}/gate/{direction}"
    peer, (nel_code, nel_out) = table.peer[key], table.nel[key]
    d = table.root / s.id
    peer_doc = json.loads((d / f"peer-gate-{direction}.json").read_text())
    nel_doc = json.loads((d / f"nel-gate-{direction}.json").read_text())
    assert (peer["exit_code"], peer_doc["verdict"]) == (nel_code, nel_doc["verdict"]), (
        f"peer {peer['exit_code']} {peer_doc['verdict']}, nel {nel_code} {nel_doc['verdict']}\n"
        f"peer: {json.dumps(peer_doc['benchmarks'], default=str)[-2000:]}\nnel: {nel_out[-2000:]}")
    # every benchmark's status and its numbers, as the peer has them
    def rows(doc: dict[str, Any]) -> dict[str, tuple]:
        return {b["benchmark"]: (b["status"], b["n_paired"], b["delta"], b["delta_ci_lower"], b["delta_ci_upper"])
                for b in doc["benchmarks"]}

    assert rows(nel_doc) == rows(peer_doc)
    assert nel_doc["missing"] == peer_doc["missing"]
    assert nel_code == (GATE_EXIT[nel_doc["verdict"]] if s.strict else 0)
    if direction == "fwd":
        assert nel_doc["verdict"] == s.expect[1], "the scenario no longer tests what it says"


# ----------------------------------------------------------------------------- text vs numbers


def _fmt_claims(comp: dict[str, Any], text: str) -> None:
    lo, hi = comp["ci_low"], comp["ci_high"]
    if "the CI covers 0" in text:
        assert lo <= 0 <= hi, (lo, hi, text)
    if "lies entirely below 0" in text:
        assert hi < 0, (lo, hi, text)
    if "the CI lies above 0" in text:
        assert lo > 0, (lo, hi, text)
    m = re.search(r"the CI lies entirely below −([\d.]+) pts", text)
    if m:
        assert hi < -float(m.group(1)) / 100 + 1e-9, (hi, text)


@pytest.mark.parametrize("s", SCENARIOS, ids=[s.id for s in SCENARIOS])
def test_text_never_contradicts_its_numbers(table: Table, s: Scenario) -> None:
    d = table.root / s.id
    for direction in DIRECTIONS:
        b, c = _sides(s, direction)
        code, text = _nel(["compare", str(d / b), str(d / c), "--no-report", "--no-strict", *s.compare_flags])
        assert code == 0, text
        doc = json.loads((d / f"nel-compare-{direction}.json").read_text())
        blocks = re.split(r"\n(?=\S+: \d+ paired items)", text)
        for name, comp in doc["benchmarks"].items():
            block = next(x for x in blocks if x.startswith(f"{name}: "))
            _fmt_claims(comp, block)
            assert f"verdict    {comp['outcome']} " in block
        assert f"verdict: {doc['verdict']}" in text
        gate = json.loads((d / f"nel-gate-{direction}.json").read_text())
        for row in gate["benchmarks"]:
            for reason in row["reasons"]:
                m = re.search(r"damage \[(-?[\d.]+), (-?[\d.]+)\] (exceeds|is within|straddles) threshold ([\d.]+)",
                              reason)
                if m:
                    lo, hi, verb, t = float(m.group(1)), float(m.group(2)), m.group(3), float(m.group(4))
                    assert {"exceeds": lo > t, "is within": hi <= t, "straddles": lo <= t < hi}[verb], reason


def test_a_policy_the_peer_refuses_is_a_usage_error_in_nel(table: Table, tmp_path: Path) -> None:
    """Deliberate difference (docs/explanation/differences.md): a required benchmark with no
    metric is refused by both, with the peer's words; the peer exits 1 (its ClickException,
    which a CI script reads as NO-GO), nel exits 2, its status for a usage error."""
    from tests.support.peers import run_peer_nemo

    d = table.root / "no_change"
    pol = tmp_path / "no-metric.yaml"
    pol.write_text("version: 1\nbenchmarks:\n  qa: {tier: critical}\n")
    args = ["gate", str(d / "base"), str(d / "cand"), "-p", str(pol), "--no-report"]
    peer = run_peer_nemo(*args, cwd=tmp_path)
    code, out = _nel(args)
    assert (peer.returncode, code) == (1, 2), (peer.stdout + peer.stderr, out)
    why = "qa: required benchmark must resolve to an explicit metric"
    assert why in peer.stdout + peer.stderr and why in out


def test_json_on_stdout_has_a_top_level_verdict(table: Table) -> None:
    """`jq .verdict` works on `compare --format json` and `gate --format json`, with one
    benchmark or several."""
    for sid, want in (("significant_7pt_drop", ("BLOCK", "INCONCLUSIVE")), ("several_benchmarks", ("BLOCK", "NO-GO"))):
        d = table.root / sid
        code, out = _nel(["compare", str(d / "base"), str(d / "cand"), "--no-report", "--no-strict",
                          "--format", "json"])
        assert code == 0 and json.loads(out)["verdict"] == want[0], out[-800:]
        code, out = _nel(["gate", str(d / "base"), str(d / "cand"), "-p", str(d / "policy.yaml"), "--no-strict",
                          "--format", "json"])
        doc = json.loads(out)
        assert code == 0 and doc["verdict"] == doc["decision"] == want[1], out[-800:]
