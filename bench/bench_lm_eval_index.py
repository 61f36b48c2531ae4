"""lm-eval's TaskManager in a fresh process: lm-eval's own index build vs the index nel keeps
on disk (benchmarks/lm_eval/index_cache.py), in alternating rounds, in one command.

Each round starts three child interpreters that import lm-eval and construct the TaskManager
nel uses (`benchmarks.lm_eval.tasks.task_manager()`): one with an empty cache folder (the index
is built, as lm-eval alone does, and kept), one right after with that folder (the kept index
is loaded), and lm-eval's own `TaskManager()` without nel. Prints each child's wall and CPU
seconds (medians) and the ratio kept / built.

    python bench/bench_lm_eval_index.py --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

NEL = "from benchmarks.lm_eval.tasks import task_manager; print(len(task_manager().all_tasks))"
LM_EVAL = "from lm_eval.tasks import TaskManager; print(len(TaskManager().all_tasks))"


def child(code: str, cache: Path) -> tuple[float, float, str]:
    """Run `code` in a fresh interpreter; (wall s, CPU s, its output)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "NEL_CACHE_DIR": str(cache)}
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=env, cwd=REPO)
    out = p.stdout.read().decode().strip() if p.stdout else ""
    _, status, ru = os.wait4(p.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"the child failed: {code}")
    return time.perf_counter() - t0, ru.ru_utime + ru.ru_stime, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    figs: dict[str, list[tuple[float, float]]] = {"built (empty cache)": [], "kept (loaded)": [],
                                                   "lm-eval alone": []}
    counts = set()
    for _ in range(a.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            for name, code in (("built (empty cache)", NEL), ("kept (loaded)", NEL), ("lm-eval alone", LM_EVAL)):
                wall, cpu, out = child(code, Path(tmp))
                figs[name].append((wall, cpu))
                counts.add(out)
    if len(counts) != 1:
        raise SystemExit(f"the task counts differ: {counts}")
    med = statistics.median
    print(f"TaskManager in a fresh process ({counts.pop()} tasks); medians of {a.rounds} rounds")
    print("| | wall s | CPU s |\n|---|---|---|")
    for name, xs in figs.items():
        print(f"| {name} | {med(x[0] for x in xs):.2f} | {med(x[1] for x in xs):.2f} |")
    ratio = med(k[0] / b[0] for k, b in zip(figs["kept (loaded)"], figs["built (empty cache)"], strict=True))
    print(f"| kept / built (median of per-round ratios) | {ratio:.2f} | |")


if __name__ == "__main__":
    main()
