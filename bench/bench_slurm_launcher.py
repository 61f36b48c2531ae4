"""What `cluster.type: slurm` costs nel, on the real single-node cluster.

1. Submission of a 16-shard array, alternating rounds with the baseline NeMo Evaluator uses
   (16 independent `sbatch` jobs, one per shard): the time `sbatch` takes, and the time from
   the first `sbatch` until every task has started (each task writes its start time; the
   tasks exit at once). Medians and ratios array/baseline.
2. Planning before a submission: the stale detection `nel eval run` does (dagster_project.
   slurm_submit.plan_partitions: fingerprints of every (model, shard), the store's records)
   for 100, 1,000 and 10,000 partitions (4 models x N/4 shards of a BYOB benchmark, 2
   problems a shard), on an empty store and with half the partitions stored and fresh.

    bash deploy/slurm/start_slurm.sh   # prints the SLURM_CONF to export
    SLURM_CONF=/var/lib/nel-slurm/slurm.conf python bench/bench_slurm_launcher.py --rounds 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _demo_benchmark import demo_module  # noqa: E402  (bench/ is this script's sys.path[0])

from nel_resources.launchers.slurm import SbatchHeader, SlurmLauncher, array_spec, render_script  # noqa: E402

N_TASKS = 16
MODULE = demo_module("plan_demo")


def _script(d: Path, name: str) -> Path:
    body = f'date +%s.%N > {d}/started-${{SLURM_JOB_ID}}'
    p = d / f"{name}.sbatch"
    p.write_text(render_script(SbatchHeader(f"nel-bench-{name}", str(d / "log-%j.log"),
                                            walltime="00:05:00"), body))
    return p


def _until_started(d: Path, n: int) -> float:
    while True:
        files = list(d.glob("started-*"))
        if len(files) >= n:
            stamps = []
            for f in files:
                text = f.read_text().strip()
                if not text:
                    break
                stamps.append(float(text))
            else:
                return max(stamps)
        time.sleep(0.05)


def submission_round(sl: SlurmLauncher, root: Path, array: bool) -> tuple[float, float]:
    """(seconds sbatch took, seconds from the first sbatch to the last task start)."""
    d = Path(tempfile.mkdtemp(dir=root))
    script = _script(d, "array" if array else "single")
    t0 = time.time()
    if array:
        ids = [sl.submit(script, array=array_spec(N_TASKS))]
    else:
        ids = [sl.submit(script) for _ in range(N_TASKS)]
    t_submit = time.time() - t0
    last_start = _until_started(d, N_TASKS)
    sl.wait(ids)
    return t_submit, last_start - t0


def bench_submission(rounds: int) -> None:
    sl = SlurmLauncher(poll_s=0.1)
    with tempfile.TemporaryDirectory(prefix="nel-bench-slurm-") as tmp:
        root = Path(tmp)
        res: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        submission_round(sl, root, True)  # warm-up (imports, the scheduler's first pass)
        for _ in range(rounds):
            for array in (True, False):
                res[array].append(submission_round(sl, root, array))
    for label, i in (("sbatch call(s)", 0), ("submit -> all 16 started", 1)):
        a = statistics.median(r[i] for r in res[True])
        b = statistics.median(r[i] for r in res[False])
        print(f"{label:28s} array of 16: {a * 1000:8.1f} ms   16 jobs: {b * 1000:8.1f} ms   "
              f"array/jobs: {a / b:5.2f}")


def bench_planning(sizes: list[int]) -> None:
    import pyarrow as pa
    import yaml

    from dagster_project import run_output, runner
    from dagster_project.cluster_launch import RunnerHooks
    from nel_assets.engine.evaluation import evaluate as ev
    from nel_resources.config import load_config
    from nel_resources.launchers.slurm_submit import plan_partitions
    from nel_resources.specs import resolve
    from nel_resources.storage.store import ResultStore

    hooks = RunnerHooks(runner.validate_before_run, runner.prepare_output, runner.run_eval, run_output.dagster_home_for)
    models = ["m0", "m1", "m2", "m3"]
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="nel-bench-plan-") as tmp:
            d = Path(tmp)
            shards = n // len(models)
            (d / "rows.jsonl").write_text("".join(json.dumps({"q": f"q{i}", "a": str(i)}) + "\n"
                                                  for i in range(2 * shards)))
            (d / "plan_demo.py").write_text(MODULE)
            cfg_path = d / "cfg.yaml"
            cfg_path.write_text(yaml.safe_dump({
                "services": {m: {"type": "api", "url": "http://127.0.0.1:9/v1", "model": m} for m in models},
                "benchmarks": [{"name": "plan_demo", "module": str(d / "plan_demo.py"),
                                "params": {"path": str(d / "rows.jsonl")}, "service": models}],
                "cluster": {"type": "slurm", "shards": shards,
                            "node_pools": {"cpu": {"partition": "debug"}}},
                "output": {"dir": str(d / "out")}}))
            from benchmarks.plugins import load_module

            load_module(str(d / "plan_demo.py"))
            resolved = resolve(load_config(cfg_path))
            store = ResultStore(d / "out")
            t0 = time.perf_counter()
            parts, fresh, _ = plan_partitions(hooks, resolved, d / "out", resume=True)
            empty = time.perf_counter() - t0
            assert len(parts) == n and fresh == 0, (len(parts), fresh)
            # Store half the partitions as finished and fresh (a one-row table each).
            table = pa.table({"idx": [0]})
            for t in ev.plan(store, resolved.benchmarks[0])[::2]:
                store.write_shard("plan_demo", t.model, t.shard, table,
                                  {"fingerprint": t.fingerprint, "n_failed": 0})
            t0 = time.perf_counter()
            parts, fresh, _ = plan_partitions(hooks, resolved, d / "out", resume=True)
            half = time.perf_counter() - t0
            assert len(parts) == n - n // 2 and fresh == n // 2, (len(parts), fresh)
            print(f"plan {n:6d} partitions: empty store {empty * 1000:9.1f} ms "
                  f"({empty / n * 1e6:6.1f} us each)   half fresh {half * 1000:9.1f} ms "
                  f"({half / n * 1e6:6.1f} us each)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sizes", default="100,1000,10000")
    ap.add_argument("--skip-submission", action="store_true")
    a = ap.parse_args()
    if not a.skip_submission:
        bench_submission(a.rounds)
    bench_planning([int(s) for s in a.sizes.split(",")])


if __name__ == "__main__":
    main()
