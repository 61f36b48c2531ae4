"""What the two-process code harness costs per execution, against one interpreter.

Every HumanEval canonical solution is run, with no sandbox (the harness's own cost only):

- one:  the whole program (prompt + solution + tests + `check(...)`) on stdin of one
        `python3 -I -`, as scorers ran it before the harness existed;
- two:  nel's harness (`benchmarks.scoring.code_harness.HARNESS_CMD`): the tests in one
        interpreter, the answer in a second, calls crossing a pipe, the sentinel printed last.

Rounds alternate the order; the figures are medians over rounds of wall seconds per
execution and of CPU seconds per execution (children's user + system), and their ratio.

    NEL_DATA_DIR=../shared/datasets python bench/bench_code_harness.py --rounds 3
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.scoring.code import answer_module, new_sentinel, program_for  # noqa: E402
from benchmarks.scoring.code_harness import HARNESS_CMD, harness_input  # noqa: E402


def _rows(data_dir: Path, n: int) -> list[dict[str, str]]:
    with gzip.open(data_dir / "humaneval" / "HumanEval.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f][:n]


def _run(argv: list[str], stdin: bytes, check_out: str | None) -> None:
    p = subprocess.run(argv, input=stdin, capture_output=True, timeout=120)
    if p.returncode != 0 or (check_out is not None and check_out not in p.stdout.decode()):
        raise SystemExit(f"{argv[:3]} failed ({p.returncode}): {p.stderr.decode()[-500:]}")


def _one(rows: list[dict[str, str]]) -> None:
    for r in rows:
        program = program_for(r["prompt"], r["canonical_solution"], r["test"], r["entry_point"])
        _run([sys.executable, "-I", "-"], program.encode(), None)


def _two(rows: list[dict[str, str]]) -> None:
    for r in rows:
        sentinel = new_sentinel()
        stdin = harness_input(prompt=r["prompt"], tests=r["test"], entry_point=r["entry_point"],
                              answer=answer_module(r["prompt"], r["canonical_solution"],
                                                   r["entry_point"]), sentinel=sentinel)
        _run([sys.executable, *HARNESS_CMD[1:]], stdin, sentinel)


def _measure(fn: object, rows: list[dict[str, str]]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    fn(rows)  # type: ignore[operator]
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall / len(rows), cpu / len(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=os.environ.get("NEL_DATA_DIR", str(REPO.parent / "shared" / "datasets")))
    ap.add_argument("--problems", type=int, default=164)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rows = _rows(Path(args.data_dir), args.problems)
    got: dict[str, list[tuple[float, float]]] = {"one": [], "two": []}
    for i in range(args.rounds):
        order = ["one", "two"] if i % 2 == 0 else ["two", "one"]
        for name in order:
            got[name].append(_measure(_one if name == "one" else _two, rows))
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in got.items()}
    for k, (w, c) in med.items():
        print(f"{k}: {1000 * w:.1f} ms wall, {1000 * c:.1f} ms CPU per execution")
    print(f"two / one: wall {med['two'][0] / med['one'][0]:.2f}x, CPU {med['two'][1] / med['one'][1]:.2f}x "
          f"({len(rows)} problems x {args.rounds} rounds)")


if __name__ == "__main__":
    main()
