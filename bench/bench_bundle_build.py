"""CPU of the work after the evaluation loop: `build_model_bundle` (bundle, report, the 0.3.0
exports) rebuilt from one stored GSM8K run, this checkout vs another, in one command.

A `nel eval run -b gsm8k -n <repeats>` against the reference server (answering at once)
stores the shards once; then each checkout, in its own child process, copies that store and
rebuilds the bundle and exports from it `--builds` times (the first, which pays for imports,
is dropped). Printed: the median CPU seconds (user+sys of the child) per rebuild of each, and
their ratio; the checkouts alternate which goes first, round by round.

`--check` also rebuilds once per checkout with the clock pinned and compares every file
written (JSON, JSONL and report byte for byte, Parquet as tables): the two checkouts must
write the same bytes from the same store.

    NEL_DATA_DIR=../shared/datasets python bench/bench_bundle_build.py --repeats 8 --baseline /work/main --check
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nel_resources.reference_server import start_reference_server  # noqa: E402

# Run in a child with the checkout's own code on sys.path: rebuild (bench, model) in `dest`
# `builds` times and print the CPU seconds of each, or, pinned, once with a fixed clock.
_CHILD = """
import json, resource, sys, time
dest, bench, model, builds, pinned = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "1"
from nel_assets.engine.results import bundle
from nel_assets.engine.evaluation import evaluate
from nel_resources.storage.store import ResultStore
if pinned:
    class _Clock:
        @staticmethod
        def time():
            return 1795000000.0
    bundle.time = _Clock
store = ResultStore(dest)
cpu = []
for _ in range(builds):
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    evaluate.build_model_bundle(None, store, bench, model, config_json='{"bench": true}')
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
print(json.dumps(cpu))
"""


def stored_run(out: Path, repeats: int) -> None:
    """Store one GSM8K run of this checkout's nel in `out`."""
    proc, url = start_reference_server(default_content="Step by step.\n#### 42")
    try:
        p = subprocess.run([sys.executable, "-m", "dagster_project.cli.main", "eval", "run", "-b", "gsm8k",
                            "-n", str(repeats), "--model-url", url, "--model-id", "m", "--max-concurrent", "64",
                            "-o", str(out), "--no-progress", "--json"], capture_output=True, text=True,
                           cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    finally:
        proc.stop()
    if p.returncode != 0:
        raise SystemExit(f"nel failed:\n{p.stdout}\n{p.stderr}")


def rebuild(repo: Path, store: Path, dest: Path, builds: int, *, pinned: bool = False) -> list[float]:
    """Copy `store`'s shards to `dest` and rebuild there with `repo`'s code; CPU s per build."""
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(store / "gsm8k" / "shard_results", dest / "gsm8k" / "shard_results")
    p = subprocess.run([sys.executable, "-c", _CHILD, str(dest), "gsm8k", "m", str(builds), "1" if pinned else "0"],
                       capture_output=True, text=True, cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)})
    if p.returncode != 0:
        raise SystemExit(f"rebuild with {repo} failed:\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def same_files(a: Path, b: Path) -> tuple[list[str], int]:
    """(the files outside the shards that differ between two rebuilt stores or are in one
    only, how many were compared)."""
    import pyarrow.parquet as pq

    def files(d: Path) -> set[Path]:
        return {p.relative_to(d) for p in d.rglob("*") if p.is_file() and "shard_results" not in p.parts}

    fa, fb = files(a), files(b)
    bad = sorted(str(p) for p in fa ^ fb)
    for rel in sorted(fa & fb):
        if rel.suffix == ".parquet":
            equal = pq.read_table(a / rel).equals(pq.read_table(b / rel))
        else:
            equal = (a / rel).read_bytes() == (b / rel).read_bytes()
        if not equal:
            bad.append(str(rel))
    return bad, len(fa & fb)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=8, help="GSM8K repeats (1,319 problems each)")
    ap.add_argument("--builds", type=int, default=6, help="rebuilds per checkout and round (first dropped)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--baseline", type=Path, default=None, help="another checkout (e.g. /work/main)")
    ap.add_argument("--check", action="store_true", help="also compare the files both checkouts write")
    a = ap.parse_args()
    if a.baseline is not None and not (a.baseline / "nel_assets" / "engine" / "evaluation" / "evaluate.py").is_file():
        raise SystemExit(f"--baseline {a.baseline}: not a nel checkout")
    repos = {"this": REPO, **({"baseline": a.baseline} if a.baseline is not None else {})}
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "run"
        stored_run(store, a.repeats)
        cpu: dict[str, list[float]] = {k: [] for k in repos}
        for i in range(a.rounds):
            for name in (list(repos) if i % 2 == 0 else list(reversed(repos))):
                cpu[name] += rebuild(repos[name], store, Path(tmp) / name, a.builds)[1:]
        res: dict[str, object] = {"samples": 1319 * a.repeats,
                                  **{f"{k}_cpu_s_per_build": round(statistics.median(v), 4) for k, v in cpu.items()}}
        if a.baseline is not None:
            res["ratio_this_over_baseline"] = round(statistics.median(cpu["this"]) / statistics.median(cpu["baseline"]), 3)
            if a.check:
                for name in repos:
                    rebuild(repos[name], store, Path(tmp) / f"pinned-{name}", 1, pinned=True)
                res["files_that_differ"], res["files_compared"] = same_files(Path(tmp) / "pinned-this",
                                                                             Path(tmp) / "pinned-baseline")
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
