"""`nel compare` and `nel gate` end to end on the real GSM8K test set (1,319 items).

Three reference servers answer every question from answer files that make paired,
correlated right/wrong patterns: a baseline, a candidate 3 points worse (60 items lost, 20
gained: McNemar flags it) and one 0.5 points worse (20 lost, 13 gained: below the MDE).
One `nel eval run` with three services writes them to one output dir.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import pytest
import yaml

from benchmarks.datasets import load_file
from nel_resources.reference_server import start_reference_server
from nel_resources.runtime.processes import ManagedProcess
from tests.support.cli import run_nel, summary_json
from tests.support.gsm8k import answers_for
from tests.support.realcomponents import REPO_ROOT

N_ITEMS = 1319
POLICY = REPO_ROOT / "deploy" / "policies" / "example.yaml"


def paired_patterns(n: int, *, base_right: int, changes: Mapping[str, tuple[int, int]],
                    seed: int = 7) -> dict[str, set[int]]:
    """Correct-item sets: the baseline's, and per candidate (lost, gained) flips from it."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)
    base = set(order[:base_right].tolist())
    right_pool, wrong_pool = order[:base_right], order[base_right:]
    out = {"base": base}
    for name, (lost, gained) in changes.items():
        out[name] = (base - set(right_pool[:lost].tolist())) | set(wrong_pool[:gained].tolist())
    return out


def start_servers(rows: list[dict], patterns: Mapping[str, set[int]]) -> tuple[dict[str, str], list[ManagedProcess]]:
    """One reference server per model; returns base URLs and the processes to stop."""
    urls, procs = {}, []
    for name, right in patterns.items():
        proc, url = start_reference_server(answers=answers_for(rows, right))
        procs.append(proc)
        urls[name] = url
    return urls, procs


def write_config(path: Path, urls: Mapping[str, str], out: Path, *, n: int, bench: str = "gsm8k",
                 extra: dict | None = None) -> Path:
    """A config with one `api` service per model and one benchmark over all of them."""
    cfg = {"services": {m: {"type": "api", "url": u, "model": f"{m}-model", "max_concurrent": 32}
                        for m, u in urls.items()},
           "benchmarks": [{"name": bench, "max_problems": n}],
           "output": {"dir": str(out)}, **(extra or {})}
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Iterator[Path]:
    """One output dir holding `base`, `cand3` (−3.03 pts) and `cand05` (−0.53 pts)."""
    rows = load_file(data_dir / "gsm8k" / "test.jsonl")
    assert len(rows) == N_ITEMS
    pats = paired_patterns(N_ITEMS, base_right=990, changes={"cand3": (60, 20), "cand05": (20, 13)})
    tmp = tmp_path_factory.mktemp("cmp")
    urls, procs = start_servers(rows, pats)
    try:
        cfg = write_config(tmp / "cfg.yaml", urls, tmp / "out", n=N_ITEMS)
        s = summary_json(run_nel("eval", "run", str(cfg), "--json", "--no-progress",
                                 env={"NEL_DATA_DIR": str(data_dir)}, timeout=600))
        scores = {r["model"]: r["score"] for r in s["results"]}
        assert scores["base"] == pytest.approx(990 / N_ITEMS)
        assert scores["cand3"] == pytest.approx(950 / N_ITEMS)
        assert scores["cand05"] == pytest.approx(983 / N_ITEMS)
    finally:
        for p in procs:
            p.stop()
    yield tmp / "out"


def nel_ok(*args: str, code: int = 0) -> str:
    proc = run_nel(*args)
    assert proc.returncode == code, f"exit {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_three_point_regression_is_flagged_significant(runs: Path, tmp_path: Path) -> None:
    out = str(runs)
    text = nel_ok("compare", out, out, "--baseline-model", "base", "--candidate-model", "cand3",
                  "-t", "0", "--no-report", "-o", str(tmp_path), code=1)
    print(text)
    assert "REGRESSION" in text and "McNemar exact" in text and "MDE at 80% power" in text
    assert "verdict: BLOCK" in text
    doc = json.loads((tmp_path / "regression.json").read_text())
    c = doc["benchmarks"]["gsm8k"]
    assert c["n_paired"] == N_ITEMS and c["n_unpaired_base"] == 0 and c["n_unpaired_cand"] == 0
    assert c["delta"] == pytest.approx(-40 / N_ITEMS)
    assert c["mcnemar"] == {"base_only_correct": 60, "cand_only_correct": 20}
    assert c["significant"] and c["p_value"] < 1e-4 and c["verdict"] == "regression"
    assert c["ci_high"] < 0 and abs(c["delta"]) > c["mde"]
    assert c["correlation"] > 0.8  # paired, correlated patterns
    assert c["flips"]["better_to_worse"]["count"] == 60 and len(c["flip_examples"]["better_to_worse"]) == 5
    ex = c["flip_examples"]["better_to_worse"][0]
    assert ex["baseline"]["reward"] == 1.0 and ex["candidate"]["reward"] == 0.0 and ex["prompt"]
    assert c["runtime"]["model_ms"]["base"]["n"] == N_ITEMS and "tokens_per_s" in c["runtime"]
    assert doc["regression"] and doc["regressions"] == ["gsm8k"] and doc["outcome"] == "BLOCK"
    # the default --max-drop 0.05: a significant 3-point drop is not established beyond 5
    # points, so WARN, which strict (the default) exits with 2 as NeMo Evaluator does
    text = nel_ok("compare", out, out, "--baseline-model", "base", "--candidate-model", "cand3",
                  "--no-report", code=2)
    assert "max drop 5.00 pts" in text and "verdict: WARN" in text
    nel_ok("compare", out, out, "--baseline-model", "base", "--candidate-model", "cand3", "--no-report",
           "--no-strict", code=0)


def test_half_point_drop_is_not_detectable_with_mde(runs: Path) -> None:
    out = str(runs)
    pair = ("--baseline-model", "base", "--candidate-model", "cand05", "--no-report")
    text = nel_ok("compare", out, out, *pair, "--max-drop", "0", "--strict", code=2)
    print(text)
    assert "NOT DETECTABLE" in text and "below the MDE" in text and "verdict: INCONCLUSIVE" in text
    # 20 lost, 13 gained: NeMo Evaluator's rule calls 33 discordant pairs underpowered for a
    # 5-point threshold, whatever the interval says: INCONCLUSIVE (2), nel's MDE kept beside it
    default = nel_ok("compare", out, out, *pair, code=2)
    assert "verdict: INCONCLUSIVE" in default and "Test underpowered: 33 discordant pairs" in default
    doc = json.loads(nel_ok("compare", out, out, *pair, "-t", "0", "--format", "json", code=2))
    c = doc["benchmarks"]["gsm8k"]
    assert c["delta"] == pytest.approx(-7 / N_ITEMS)
    assert c["verdict"] == "not_detectable" and not c["significant"]
    assert c["mde"] > abs(c["delta"]) and f"MDE {100 * c['mde']:.2f} pts" in text
    assert c["items_to_detect_delta"] > N_ITEMS


def test_gate_decisions_and_exit_codes(runs: Path, tmp_path: Path) -> None:
    out = str(runs)
    common = ("--baseline-model", "base", "--policy", str(POLICY), "--strict")
    text = nel_ok("gate", out, out, "--candidate-model", "cand3", *common, "-v", code=1)
    print(text)
    assert "gate: NO-GO" in text and "BREACH" in text and "exceeds threshold 0.0100" in text
    assert "nel's paired analysis (informational)" in text  # -v: nel's numbers beside the verdict
    text = nel_ok("gate", out, out, "--candidate-model", "cand05", *common, code=2)
    print(text)
    assert "gate: INCONCLUSIVE" in text and "straddles threshold 0.0100" in text
    # same run on both sides: GO
    text = nel_ok("gate", out, out, "--candidate-model", "base", *common, code=0)
    assert "gate: GO" in text
    # a required benchmark missing on either side is NO-GO, with that reason
    pol = tmp_path / "p.yaml"
    pol.write_text("version: 1\ndefaults: {max_drop: 0.05, metric: mean_reward}\n"
                   "benchmarks:\n  gsm8k: {}\n  mmlu: {tier: critical}\n")
    doc = json.loads(nel_ok("gate", out, out, "--baseline-model", "base", "--candidate-model", "base",
                            "--policy", str(pol), "--format", "json", "--strict", "-o",
                            str(tmp_path / "g.json"), code=1))
    assert doc["verdict"] == doc["decision"] == "NO-GO" and doc["missing"] == ["mmlu"]
    assert doc["verdict_reasons"][0] == "MISSING: mmlu [critical]"
    assert json.loads((tmp_path / "g.json").read_text())["verdict"] == "NO-GO"
    # a required benchmark without a metric is refused, as NeMo Evaluator refuses it
    pol.write_text("version: 1\nbenchmarks:\n  gsm8k: {tier: critical}\n")
    p = run_nel("gate", out, out, "--baseline-model", "base", "--candidate-model", "base", "--policy", str(pol))
    assert p.returncode == 2 and "gsm8k: required benchmark must resolve to an explicit metric" in p.stderr
    # strict is the default (a NO-GO never exits 0 unless asked); --no-strict informs only
    nel_ok("gate", out, out, "--baseline-model", "base", "--candidate-model", "cand3", "-p", str(POLICY), code=1)
    nel_ok("gate", out, out, "--baseline-model", "base", "--candidate-model", "cand05", "-p", str(POLICY), code=2)
    nel_ok("gate", out, out, "--baseline-model", "base", "--candidate-model", "cand3", "--policy", str(POLICY),
           "--no-strict")


def test_bundle_files_and_nemo_exports_load_like_dirs(runs: Path) -> None:
    bundle = runs / "gsm8k" / "bundle" / "model=base" / "bundle.json"
    # several models: each has a NeMo Evaluator output dir, <bench>/models/<model>/<bench>/
    exports = runs / "gsm8k" / "models" / "cand3"  # eval-*.json + results.jsonl
    doc = json.loads(nel_ok("compare", str(bundle), str(exports), "--format", "json", "--no-report", "--no-strict"))
    c = doc["benchmarks"]["gsm8k"]
    assert doc["candidate"]["kind"] == "nemo" and doc["baseline"]["kind"] == "bundle"
    assert c["n_paired"] == N_ITEMS and c["delta"] == pytest.approx(-40 / N_ITEMS)
    evals = list(exports.rglob("eval-*.json"))
    # 60 gained, 20 lost: NeMo Evaluator's one-sided test is underpowered for it: INCONCLUSIVE (2)
    doc2 = json.loads(nel_ok("compare", str(evals[0]), str(bundle), "--format", "json", "--no-report", code=2))
    assert doc2["verdict"] == "INCONCLUSIVE"
    assert doc2["benchmarks"]["gsm8k"]["delta"] == pytest.approx(40 / N_ITEMS)


def test_user_errors_are_one_line_exit_2(runs: Path, tmp_path: Path) -> None:
    out = str(runs)
    p = run_nel("compare", out, out)
    assert p.returncode == 2 and "several models (base, cand05, cand3)" in p.stderr
    assert "--baseline-model" in p.stderr
    p = run_nel("compare", out, out, "--baseline-model", "base", "--candidate-model", "nope")
    assert p.returncode == 2 and "no results for model 'nope'" in p.stderr
    p = run_nel("compare", out, out, "--baseline-model", "base", "--candidate-model", "cand3", "--max-drop", "3")
    assert p.returncode == 2 and "score units" in p.stderr and "0.03" in p.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\ndefaults: {max_drop: 2}\n")
    p = run_nel("gate", out, out, "--baseline-model", "base", "--candidate-model", "cand3", "--policy", str(bad))
    assert p.returncode == 2 and "score units" in p.stderr
    bad.write_text("version: 1\ndefaults: {max_drp: 0.01}\n")
    p = run_nel("gate", out, out, "--baseline-model", "base", "--candidate-model", "cand3", "--policy", str(bad))
    assert p.returncode == 2 and "did you mean 'max_drop'" in p.stderr
    p = run_nel("compare", str(tmp_path / "missing"), out)
    assert p.returncode == 2 and "no such file or directory" in p.stderr


def test_compare_output_flags(runs: Path, tmp_path: Path) -> None:
    out = str(runs)
    pair = (out, out, "--baseline-model", "base", "--candidate-model", "cand3", "-t", "0.01")
    text = nel_ok("compare", *pair, "--no-report", "--compact", code=1)
    assert text.splitlines()[0].startswith("BLOCK: cand3 vs base") and len(text.splitlines()) == 2
    assert "flips −60 +20" in text
    md = nel_ok("compare", *pair, "--no-report", "--format", "markdown", code=1)
    assert md.startswith("# Regression report: BLOCK") and "| gsm8k | BLOCK | 75.06% | 72.02% |" in md
    flips = nel_ok("compare", *pair, "--no-report", "--show-flips", code=1)
    assert "gsm8k regressions: 60" in flips and "gsm8k improvements: 20" in flips
    assert sum(1 for line in flips.splitlines() if line.startswith("    item ")) == 80  # every flip
    # --report PATH; the default report goes to the candidate's output dir; --no-report none
    rep = tmp_path / "r.md"
    nel_ok("compare", *pair, "--report", str(rep), code=1)
    assert rep.read_text().startswith("# Regression report: BLOCK")
    default = runs / "regression_report.md"
    default.unlink(missing_ok=True)
    nel_ok("compare", *pair, "--no-report", code=1)
    assert not default.exists()
    nel_ok("compare", *pair, code=1)
    assert default.read_text().startswith("# Regression report: BLOCK")
    default.unlink()
    p = run_nel("compare", *pair, "--report", str(rep), "--no-report")
    assert p.returncode == 2 and "not allowed with" in p.stderr


@pytest.mark.parametrize(("test", "name", "verdict"), [
    ("auto", "mcnemar_exact", "WARN"), ("mcnemar", "mcnemar_exact", "WARN"), ("sign", "sign_exact", "WARN"),
    # NeMo Evaluator's permutation effect is the paired Cohen's d (0.12 > 0.05), not the delta
    ("permutation", "sign_flip", "BLOCK")])
def test_compare_test_choice(runs: Path, test: str, name: str, verdict: str) -> None:
    out = str(runs)
    doc = json.loads(nel_ok("compare", out, out, "--baseline-model", "base", "--candidate-model", "cand3",
                            "--test", test, "--format", "json", "--no-report", "--no-strict"))
    c = doc["benchmarks"]["gsm8k"]
    assert c["test"] == name and c["test_requested"] == test
    assert c["p_value"] < 1e-4 and c["outcome"] == verdict  # 60 lost, 20 gained: significant either way
    assert c["nemo_verdict"]["test_used"] == test.replace("auto", "mcnemar")


def test_compare_correct_above_counts_flips_over_the_threshold(runs: Path) -> None:
    out = str(runs)
    for above in ("0", "0.5", "0.99"):  # 0/1 scores: every threshold below 1 gives the same flips
        doc = json.loads(nel_ok("compare", out, out, "--baseline-model", "base", "--candidate-model", "cand3",
                                "--correct-above", above, "--format", "json", "--no-report", "--no-strict"))
        c = doc["benchmarks"]["gsm8k"]
        assert c["correct_above"] == float(above)
        assert (c["flips"]["better_to_worse"]["count"], c["flips"]["worse_to_better"]["count"]) == (60, 20)
    doc = json.loads(nel_ok("compare", out, out, "--baseline-model", "base", "--candidate-model", "cand3",
                            "--correct-above", "1", "--format", "json", "--no-report", "--no-strict"))
    c = doc["benchmarks"]["gsm8k"]  # nothing scores above 1: nothing is correct, nothing flips
    assert (c["flips"]["better_to_worse"]["count"], c["flips"]["worse_to_better"]["count"]) == (0, 0)


def test_gate_formats_and_reports(runs: Path, tmp_path: Path) -> None:
    out = str(runs)
    pair = (out, out, "--baseline-model", "base", "--candidate-model", "cand3", "-p", str(POLICY))
    md = nel_ok("gate", *pair, "--format", "markdown", code=1)
    assert md.startswith("# Release gate: NO-GO") and "| gsm8k | critical | BREACH |" in md
    assert "## Damage" in md and "exceeds threshold" in md
    o = tmp_path / "g.json"
    nel_ok("gate", *pair, "-o", str(o), code=1)
    assert json.loads(o.read_text())["exit_code"] == 1
    assert o.with_suffix(".md").read_text().startswith("# Release gate: NO-GO")
    o2 = tmp_path / "quiet.json"
    nel_ok("gate", *pair, "-o", str(o2), "--no-report", code=1)
    assert o2.is_file() and not o2.with_suffix(".md").exists()
    rep = tmp_path / "damage.md"
    nel_ok("gate", out, out, "--baseline-model", "base", "--candidate-model", "cand05", "-p", str(POLICY),
           "--report", str(rep), code=2)
    assert rep.read_text().startswith("# Release gate: INCONCLUSIVE")
    # JSON on stdout writes no automatic sidecar (as NeMo Evaluator)
    o3 = tmp_path / "j.json"
    nel_ok("gate", *pair, "-o", str(o3), "--format", "json", code=1)
    assert not o3.with_suffix(".md").exists()
