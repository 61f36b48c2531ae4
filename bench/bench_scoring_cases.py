"""The scoring case set, scored by nel before and after, and by `math-verify`, in one command.

Prints, per benchmark, the cases, the agreement with the known verdicts, false positives
(credited answers a careful grader would not credit) and false negatives (correct answers
missed), for:

* `before`: the scorers of `--before-ref` (default `main`), exported with `git archive`
  into a temporary directory and imported in a subprocess;
* `after`: the scorers of this checkout, in a subprocess too;
* `math-verify` (Hugging Face, `math_verify.parse` + `verify`) on the math cases, in a
  subprocess. It gets the answer part of the reply (nel's `split_reasoning`; the reasoning
  when the answer part is empty), as a caller of the library would pass it.

Then the per-answer scoring time (mean, p95 over cases) of each. Each scorer runs
`--rounds` times, the rounds alternating between the scorers; an answer's time is its
median over the rounds, so a burst of load on the machine hits every scorer alike.

    python bench/bench_scoring_cases.py [--rounds 3] [--before-ref main]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RUNNER = REPO / "tests" / "benchmarks" / "scoring" / "cases" / "score_case.py"
CASE_FILES = [RUNNER.with_name("cases.jsonl"), RUNNER.with_name("cases_round3.jsonl")]
MATH = ("math500",)

_MV_WORKER = r"""
import json, sys, time
from math_verify import parse, verify
from benchmarks.scoring import split_reasoning

cases = [json.loads(l) for p in sys.argv[2:] for l in open(p, encoding="utf-8") if l.strip()]
cases = [c for c in cases if c["benchmark"] in sys.argv[1].split(",")]

def judge(c):
    answer, reasoning = split_reasoning(c["response"], c.get("reasoning"))
    text = answer or reasoning or ""
    gold = parse("$" + c["gold"] + "$")
    return bool(verify(gold, parse(text)))

for c in cases[:3]:
    judge(c)  # warm-up: imports and grammar loading are not an answer's cost
for c in cases:
    t0 = time.perf_counter()
    got = judge(c)
    print(json.dumps({"id": c["id"], "benchmark": c["benchmark"], "pattern": c["pattern"],
                      "split": c.get("split", "dev"), "expected": c["correct"], "got": got,
                      "seconds": time.perf_counter() - t0}), flush=True)
"""


def _run(cmd: list[str], pythonpath: Path) -> list[dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, cwd=pythonpath)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:3])} failed:\n{out.stderr[-2000:]}")
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def _export(ref: str, dest: Path) -> None:
    """The `benchmarks` package of `ref`, written under `dest`."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", ref, "benchmarks"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)


def _table(name: str, rows: list[dict[str, Any]]) -> list[str]:
    by_bench: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_bench[r["benchmark"]].append(r)
    lines = []
    for bench in [*sorted(by_bench), "ALL"]:
        rs = rows if bench == "ALL" else by_bench[bench]
        agree = sum(r["got"] == r["expected"] for r in rs)
        fp = sum(r["got"] and not r["expected"] for r in rs)
        fn = sum(r["expected"] and not r["got"] for r in rs)
        lines.append(
            f"| {name:<11} | {bench:<9} | {len(rs):>5} | {100 * agree / len(rs):6.1f}% "
            f"| {fp:>3} | {fn:>3} |"
        )
    return lines


def _timing(name: str, rounds: list[list[dict[str, Any]]]) -> str:
    per_case: dict[str, list[float]] = defaultdict(list)
    for rows in rounds:
        for r in rows:
            per_case[r["id"]].append(r["seconds"])
    medians = sorted(statistics.median(v) for v in per_case.values())
    p95 = medians[min(len(medians) - 1, int(0.95 * len(medians)))]
    mean = statistics.fmean(medians)
    return f"| {name:<24} | {len(medians):>5} | {1000 * mean:8.3f} | {1000 * p95:8.3f} |"


def main() -> None:
    """Run every scorer `--rounds` times, alternating, and print the tables."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--before-ref", default="main")
    args = ap.parse_args()

    files = [str(p) for p in CASE_FILES]
    with tempfile.TemporaryDirectory(prefix="nel-scoring-before-") as tmp:
        before_root = Path(tmp)
        _export(args.before_ref, before_root)
        runs: dict[str, tuple[list[str], Path]] = {
            "before": ([sys.executable, str(RUNNER), *files], before_root),
            "after": ([sys.executable, str(RUNNER), *files], REPO),
            "math-verify": ([sys.executable, "-c", _MV_WORKER, ",".join(MATH), *files], REPO),
        }
        results: dict[str, list[list[dict[str, Any]]]] = defaultdict(list)
        t0 = time.monotonic()
        for _ in range(args.rounds):
            for name, (cmd, root) in runs.items():
                results[name].append(_run(cmd, root))
        wall = time.monotonic() - t0

    names = ", ".join(str(p.relative_to(REPO)) for p in CASE_FILES)
    print(f"scoring case set: {names}; before = {args.before_ref}; "
          f"{args.rounds} alternating rounds, {wall:.0f} s")
    head = ("| scorer      | benchmark | cases | agree   | FP  | FN  |\n"
            "|-------------|-----------|-------|---------|-----|-----|")
    for split in ("all", "heldout", "round3", "round3-heldout"):
        def pick(rows: list[dict[str, Any]], split: str = split) -> list[dict[str, Any]]:
            return [r for r in rows if split == "all" or r.get("split") == split]

        label = {"all": "all cases", "heldout": "held-out cases (written after the fixes)",
                 "round3": "round-3 cases (issue 33)",
                 "round3-heldout": "round-3 held-out cases (written after the round-3 fixes)"}[split]
        print(f"\n{label}:\n\n{head}")
        for name in ("before", "after"):
            print("\n".join(_table(name, pick(results[name][0]))))
        print(f"\n{label}, math only:\n\n{head}")
        for name in ("before", "after", "math-verify"):
            rows = [r for r in pick(results[name][0]) if r["benchmark"] in MATH]
            print(_table(name, rows)[0])
    print("\nper-answer scoring time (median over rounds per answer), ms:\n")
    print("| scorer                   | cases | mean     | p95      |")
    print("|--------------------------|-------|----------|----------|")
    for name in ("before", "after"):
        print(_timing(f"nel {name}, all cases", results[name]))
    for name in ("before", "after", "math-verify"):
        rounds = [[r for r in rows if r["benchmark"] in MATH] for rows in results[name]]
        print(_timing(f"{name}, math cases", rounds))


if __name__ == "__main__":
    main()
