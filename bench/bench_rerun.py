"""An unchanged rerun of `nel eval run` (every shard fresh: nothing to send), this checkout
against another one, in the same command.

Each checkout fills its own store once (GSM8K x `--repeats` against an instant local
reference server), then the reruns alternate round by round. Per child: wall time, CPU time
(user + system, from os.wait4, so a loaded machine inflates it less than the wall time), peak
RSS and the requests the server saw (must be 0). Prints the medians and the median of the
per-round ratios (this checkout / the baseline; below 1 is faster).

    NEL_DATA_DIR=../shared/datasets python bench/bench_rerun.py --baseline /tmp/before --rounds 9
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
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench_eval_throughput import precompile  # noqa: E402  (bench/ is on sys.path)
from bench_startup import _nel_env, _server, nel_cmd  # noqa: E402

from nel_resources.reference_server import start_reference_server  # noqa: E402


def _child(argv: list[str], env: dict[str, str], cwd: Path) -> dict[str, float]:
    """Run a child to completion: its wall and CPU seconds and peak RSS (MB)."""
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                             start_new_session=True)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        if os.waitstatus_to_exitcode(status) != 0:
            out.seek(0)
            raise SystemExit(f"{argv[:4]} exited {os.waitstatus_to_exitcode(status)}:\n{out.read()[-3000:]!r}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, required=True, help="the other nel checkout (e.g. a worktree of main)")
    ap.add_argument("--rounds", type=int, default=9, help="alternating rounds (medians)")
    ap.add_argument("--repeats", type=int, default=8, help="GSM8K repeats in the store (x1,319 samples)")
    ap.add_argument("--json", action="store_true", help="print the raw figures as JSON too")
    a = ap.parse_args()
    if not os.environ.get("NEL_DATA_DIR"):
        raise SystemExit("set NEL_DATA_DIR to the shared datasets (gsm8k/test.jsonl)")
    targets = {"nel": REPO, "baseline": a.baseline.resolve()}
    for repo in targets.values():
        precompile(repo)  # a checkout without bytecode would compile on every run
    proc, url = start_reference_server(default_content="Step by step.\n#### 42")
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)

            def run(name: str) -> list[str]:
                return nel_cmd("eval", "run", "-b", "gsm8k", "-n", str(a.repeats), "--model-url", url,
                               "--model-id", "m", "--max-concurrent", "64", "-o", str(work / name),
                               "--no-progress")

            for name, repo in targets.items():
                # Fills the store (and warms the caches); recorded before it returns, so no
                # background recording (which holds the run lock) is left for the first rerun.
                _child(run(name), {**_nel_env(repo), "NEL_RECORD_INLINE": "1"}, work)
            for _ in range(a.rounds):
                for name, repo in targets.items():
                    _server(url, "/stats/reset", post=True)
                    fig = _child(run(name), _nel_env(repo), work)
                    fig["requests"] = _server(url, "/stats")["total_requests"]
                    rounds[name].append(fig)
    finally:
        proc.stop()
    med = statistics.median
    res: dict[str, Any] = {name: {k: round(med(r[k] for r in rs), 3) for k in ("wall_s", "cpu_s", "rss_mb")}
                           | {"requests": max(r["requests"] for r in rs)} for name, rs in rounds.items()}
    res["ratio"] = {k: round(med(o[k] / b[k] for o, b in zip(rounds["nel"], rounds["baseline"], strict=True)), 3)
                    for k in ("wall_s", "cpu_s", "rss_mb")}
    print(f"unchanged rerun, GSM8K x{a.repeats}; medians of {a.rounds} alternating rounds")
    print("| | wall s | CPU s | peak RSS MB | requests |\n|---|---|---|---|---|")
    for name in targets:
        d = res[name]
        print(f"| {name} ({targets[name]}) | {d['wall_s']:.3f} | {d['cpu_s']:.3f} | {d['rss_mb']:.0f} | {d['requests']} |")
    r = res["ratio"]
    print(f"| nel / baseline (median of per-round ratios) | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | {r['rss_mb']:.2f} | |")
    if a.json:
        print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
