"""How nel's own costs grow with the work (issue 15's scale figures), by simulation on this
machine: no model request is sent, the rows are synthetic, the code is nel's real code.

1. Planning and stale detection for 100, 1,000 and 10,000 (model, shard) partitions:
   `evaluate.plan` (what `nel eval run` and `--dry-run` call) on a BYOB benchmark, cold
   (nothing stored), warm (every shard committed with its fingerprint: nothing stale) and
   after one model's temperature changed (exactly that model's shards stale).
2. What Dagster's own staleness shows for the same change: a model's bundle partition depends
   on that model's shard partitions, and Dagster skips the partition-level dependency check
   at 100 or more upstream partitions, so the UI keeps calling the bundle FRESH there. nel's
   planner (product-owned fingerprints) is what decides, so it is not affected.
3. Merge and bundle of 112,000 (14,000 problems x 8 repeats, 8 shards) and 1,000,000 rows:
   `ResultStore.read_shards` (the merge), `build_bundle` (scores, CIs, runtime stats) and
   `build_model_bundle` (merge + bundle + report + every export file).
4. A DuckDB query over the 1,000,000 rows through nel's `results` view.
5. With --rss N: the peak RSS of `build_model_bundle` (merge + bundle + report + every export
   file) over N synthetic rows in 8 shards, each build in a fresh child process (imports
   included), and the sizes of the files it wrote; with --baseline DIR the checkout DIR
   builds from the same store in the same command, alternating which goes first.

Each figure is the median of --rounds rounds (the full bundle with exports: --export-rounds,
default 1, as it takes minutes at 1M rows). The baseline for the planning figures is the
100-partition case in the same command (cost per partition as a ratio of it).

    python bench/bench_scale.py                 # everything (several minutes, ~3 GB RAM)
    python bench/bench_scale.py --quick         # 100 and 1,000 partitions, 112k rows only
    python bench/bench_scale.py --rss 1000000 --baseline /work/main --rounds 1   # memory only
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

import numpy as np
import pyarrow as pa
from _demo_benchmark import demo_module  # bench/ is this script's sys.path[0]

from nel_assets.engine.evaluation import evaluate as ev
from nel_assets.engine.results.bundle import build_bundle
from nel_resources.config import load_config
from nel_resources.specs import resolve
from nel_resources.storage.schema import RESULT_SCHEMA
from nel_resources.storage.store import ResultStore

MODULE = demo_module("scale_demo")

# (models, shards) for each partition count
SIZES = {100: (10, 10), 1_000: (10, 100), 10_000: (100, 100)}


def _config(tmp: Path, n_models: int, n_shards: int, *, temp0: float = 0.0) -> Any:
    module, data = tmp / "scale_demo.py", tmp / "scale.jsonl"
    if not module.exists():
        module.write_text(MODULE)
        data.write_text("".join(json.dumps({"q": f"{i} + 1?", "a": str(i + 1)}) + "\n" for i in range(1000)))
    services = {f"m{i:03d}": {"type": "api", "url": "http://127.0.0.1:9/v1", "model": f"m{i:03d}",
                              "temperature": temp0 if i == 0 else 0.0} for i in range(n_models)}
    return load_config(data={
        "services": services,
        "benchmarks": [{"name": "scale_demo", "module": str(module), "params": {"path": str(data)},
                        "shards": n_shards, "max_problems": 1000}],
        "output": {"dir": str(tmp / f"out-{n_models}x{n_shards}")}})


def _median_time(fn: Any, rounds: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def bench_planning(tmp: Path, sizes: list[int], rounds: int) -> dict[int, dict[str, float]]:
    res: dict[int, dict[str, float]] = {}
    for n in sizes:
        models, shards = SIZES[n]
        cfg = _config(tmp, models, shards)
        (bench,) = resolve(cfg).benchmarks
        store = ResultStore(cfg.output.dir)
        cold, tasks = _median_time(lambda b=bench, s=store: ev.plan(s, b), rounds)
        assert len(tasks) == n and all(t.stale for t in tasks)
        one_row = RESULT_SCHEMA.empty_table()
        t0 = time.perf_counter()
        for t in tasks:  # commit every shard with its fingerprint (as a finished run would)
            store.write_shard(bench.name, t.model, t.shard, one_row,
                              {"fingerprint": t.fingerprint, "n_failed": 0, "data_version": t.fingerprint})
        commit = time.perf_counter() - t0
        warm, tasks = _median_time(lambda b=bench, s=store: ev.plan(s, b), rounds)
        assert not any(t.stale for t in tasks)
        (changed,) = resolve(_config(tmp, models, shards, temp0=0.5)).benchmarks
        detect, tasks = _median_time(lambda b=changed, s=store: ev.plan(s, b), rounds)
        stale = [t for t in tasks if t.stale]
        assert len(stale) == shards and {t.model for t in stale} == {"m000"}, len(stale)
        res[n] = {"models": models, "shards": shards, "cold_s": cold, "warm_s": warm,
                  "detect_s": detect, "stale_found": len(stale), "commit_s": commit}
        print(f"  {n:>6} partitions ({models} models x {shards} shards): plan cold {cold:6.2f} s, "
              f"warm {warm:6.2f} s, after a change {detect:6.2f} s -> {len(stale)} stale "
              f"({warm / n * 1e3:.2f} ms/partition warm); committing {n} shards took {commit:.1f} s",
              flush=True)
    return res


def bench_dagster_staleness(shard_counts: list[int]) -> dict[int, str]:
    """What Dagster's stale status (the UI's) says about a model's bundle after one of that
    model's shards got a new data version, by the number of shards per model."""
    import warnings

    import dagster as dg
    from dagster._core.definitions.data_version import CachingStaleStatusResolver
    from dagster._core.loader import LoadingContextForTest

    warnings.filterwarnings("ignore", category=dg.BetaWarning)
    out: dict[int, str] = {}
    for n_shards in shard_counts:
        models = dg.DynamicPartitionsDefinition(name="model")
        parts = dg.MultiPartitionsDefinition({
            "model": models, "shard": dg.StaticPartitionsDefinition([str(i) for i in range(n_shards)])})
        shard_key = dg.AssetKey(["demo", "shard_results"])

        @dg.asset(key=shard_key, partitions_def=parts)
        # no return annotations: with `from __future__ import annotations` Dagster cannot
        # resolve the string `dg.Output` of a function defined in this scope
        def shard_results():
            return dg.Output(None, data_version=dg.DataVersion("v1"))

        @dg.asset(key=["demo", "bundle"], partitions_def=models, deps=[dg.AssetDep(
            shard_key, partition_mapping=dg.MultiToSingleDimensionPartitionMapping("model"))])
        def bundle():
            return None

        defs = dg.Definitions(assets=[shard_results, bundle])
        with dg.instance_for_test() as instance:
            instance.add_dynamic_partitions("model", ["m0"])
            for s in range(n_shards):
                instance.report_runless_asset_event(dg.AssetMaterialization(
                    shard_key, partition=dg.MultiPartitionKey({"model": "m0", "shard": str(s)}),
                    tags={"dagster/data_version": "v1"}))
            res = dg.materialize([bundle], instance=instance, partition_key="m0", selection=[bundle.key],
                                 run_config={"loggers": {"console": {"config": {"log_level": "ERROR"}}}})
            assert res.success
            instance.report_runless_asset_event(dg.AssetMaterialization(
                shard_key, partition=dg.MultiPartitionKey({"model": "m0", "shard": "0"}),
                tags={"dagster/data_version": "v2"}))
            resolver = CachingStaleStatusResolver(instance, defs.resolve_asset_graph(),
                                                  LoadingContextForTest(instance))
            status = resolver.get_status(bundle.key, "m0")
            out[n_shards] = status.value
        print(f"  {n_shards:>4} shards per model: one shard changed -> Dagster says the bundle is "
              f"{status.value}", flush=True)
    return out


def synthetic_table(n: int, shard: int, n_shards: int, repeats: int = 8) -> pa.Table:
    """`n` result rows (problem, repeat) in the store's schema, built column-wise."""
    rng = np.random.default_rng(shard)
    i = np.arange(n, dtype=np.int64)
    first_problem = shard * (n // repeats)
    problem = first_problem + i // repeats
    reward = (rng.random(n) < 0.62).astype(np.float64)
    cols: dict[str, Any] = {name: pa.nulls(n, type=f.type) for name, f in zip(RESULT_SCHEMA.names, RESULT_SCHEMA, strict=True)}

    def const(v: Any, t: pa.DataType) -> pa.Array:
        return pa.repeat(pa.scalar(v, t), n)

    cols.update({
        "run_id": const("r", pa.string()), "benchmark": const("b", pa.string()),
        "model": const("m", pa.string()), "model_id": const("m", pa.string()),
        "shard": const(shard, pa.int32()), "problem_idx": pa.array(problem),
        "repeat": pa.array((i % repeats).astype(np.int32)),
        "sample_id": pa.array([f"{p}:{r}" for p, r in zip(problem.tolist(), (i % repeats).tolist(), strict=True)]),
        "category": pa.array([f"c{p % 7}" for p in problem.tolist()]),
        "prompt": const("Natalia sold clips to 48 of her friends in April... How many in all?", pa.string()),
        "messages": const('[{"role": "user", "content": "Natalia sold clips ... How many in all?"}]', pa.string()),
        "expected": const("72", pa.string()),
        "response": const("She sold 48 + 24 = 72 clips. #### 72", pa.string()),
        "reward": pa.array(reward), "extracted": const("72", pa.string()),
        "method": const("hash_answer", pa.string()), "details": const("{}", pa.string()),
        "metadata": const("{}", pa.string()), "finish_reason": const("stop", pa.string()),
        "prompt_tokens": const(120, pa.int64()), "completion_tokens": const(40, pa.int64()),
        "seed_ms": const(0.1, pa.float64()), "model_ms": pa.array(rng.gamma(2.0, 400.0, n)),
        "verify_ms": const(0.2, pa.float64()), "total_ms": pa.array(rng.gamma(2.0, 400.0, n) + 1),
        "attempts": const(1, pa.int32()), "timestamp": pa.array(1.7e9 + i / 50.0),
    })
    return pa.table([cols[name] for name in RESULT_SCHEMA.names], schema=RESULT_SCHEMA)


def bench_bundle(tmp: Path, n_rows: int, rounds: int, export_rounds: int, shards: int = 8) -> dict[str, float]:
    store = ResultStore(tmp / f"bundle-{n_rows}")
    per = n_rows // shards
    for s in range(shards):
        store.write_shard("b", "m", s, synthetic_table(per, s, shards), {"fingerprint": f"f{s}", "n_failed": 0,
                                                                       "data_version": f"d{s}"})
    merge, table = _median_time(lambda: store.read_shards("b", "m"), rounds)
    assert table.num_rows == per * shards
    stats, bundle = _median_time(lambda: build_bundle(table, benchmark="b", model="m"), rounds)
    # the exports write every row as JSON lines (results.jsonl, trajectories.jsonl): minutes at
    # 1M rows, so this one is timed --export-rounds times (default once)
    full, _ = _median_time(lambda: ev.build_model_bundle(None, store, "b", "m"), export_rounds)
    import duckdb

    from nel_resources.storage.views import connect

    con = connect(store.root, duckdb.connect())
    sql = ("SELECT category, count(*) AS n, avg(reward) AS acc, quantile_cont(model_ms, 0.95) AS p95 "
           "FROM results GROUP BY category ORDER BY category")
    query, rows = _median_time(lambda: con.execute(sql).fetchall(), rounds)
    assert sum(r[1] for r in rows) == per * shards
    print(f"  {per * shards:>9,} rows in {shards} shards: merge (read_shards) {merge:6.2f} s, "
          f"bundle stats {stats:6.2f} s, full bundle + report + exports {full:6.2f} s, "
          f"DuckDB group-by over the results view {query:6.3f} s; score {bundle['score']['mean']:.4f}",
          flush=True)
    return {"rows": per * shards, "merge_s": merge, "stats_s": stats, "full_s": full, "duckdb_s": query}


# Run in a child with a checkout's own code first on sys.path: one full bundle build.
_RSS_CHILD = """
import json, resource, sys, time
from nel_assets.engine.evaluation import evaluate
from nel_resources.storage.store import ResultStore
t0 = time.perf_counter()
evaluate.build_model_bundle(None, ResultStore(sys.argv[1]), "b", "m")
wall = time.perf_counter() - t0
print(json.dumps({"rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "wall_s": wall}))
"""


def _export_sizes(root: Path) -> dict[str, float]:
    """MB of each file the bundle build wrote under the benchmark folder (shards excluded)."""
    out = {}
    for p in sorted((root / "b").rglob("*")):
        if p.is_file() and "shard_results" not in p.parts:
            out[str(p.relative_to(root))] = round(p.stat().st_size / 1e6, 2)
    return out


def bench_rss(tmp: Path, n_rows: int, rounds: int, baseline: Path | None, shards: int = 8) -> dict[str, Any]:
    """Peak RSS of a full bundle build over `n_rows` stored rows, per checkout (see 5. above)."""
    store = ResultStore(tmp / f"rss-{n_rows}")
    per = n_rows // shards
    for s in range(shards):
        store.write_shard("b", "m", s, synthetic_table(per, s, shards), {"fingerprint": f"f{s}", "n_failed": 0,
                                                                       "data_version": f"d{s}"})
    repos = {"this": Path(__file__).resolve().parents[1]}
    if baseline is not None:
        repos["baseline"] = baseline.resolve()
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in repos}
    sizes: dict[str, dict[str, float]] = {}
    for i in range(rounds):
        order = list(repos) if i % 2 == 0 else list(reversed(repos))
        for name in order:
            env = {**os.environ, "PYTHONPATH": str(repos[name])}
            p = subprocess.run([sys.executable, "-c", _RSS_CHILD, str(store.root)], capture_output=True,
                               text=True, env=env, cwd=repos[name])
            if p.returncode != 0:
                raise SystemExit(f"{name}: bundle build failed:\n{p.stderr}")
            runs[name].append(json.loads(p.stdout.strip().splitlines()[-1]))
            sizes[name] = _export_sizes(store.root)
            print(f"  {name}: {per * shards:,} rows: peak RSS {runs[name][-1]['rss_mb']:.1f} MB, "
                  f"{runs[name][-1]['wall_s']:.1f} s", flush=True)
    res: dict[str, Any] = {"rows": per * shards}
    for name in repos:
        res[name] = {"peak_rss_mb": statistics.median(r["rss_mb"] for r in runs[name]),
                     "wall_s": round(statistics.median(r["wall_s"] for r in runs[name]), 2),
                     "files_mb": sizes[name]}
    print(json.dumps(res, indent=2), flush=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--export-rounds", type=int, default=1, help="rounds of the full bundle with exports")
    ap.add_argument("--quick", action="store_true", help="100 and 1,000 partitions, 112k rows")
    ap.add_argument("--rss", type=int, default=None, metavar="N",
                    help="only the peak RSS of a full bundle build over N rows (child processes)")
    ap.add_argument("--baseline", type=Path, default=None, help="with --rss: another checkout (e.g. /work/main)")
    args = ap.parse_args()
    if args.rss is not None:
        with tempfile.TemporaryDirectory(prefix="nel-scale-") as d:
            bench_rss(Path(d), args.rss, args.rounds, args.baseline)
        return
    sizes = [100, 1_000] if args.quick else [100, 1_000, 10_000]
    rows = [112_000] if args.quick else [112_000, 1_000_000]
    with tempfile.TemporaryDirectory(prefix="nel-scale-") as d:
        tmp = Path(d)
        print("planning and stale detection (evaluate.plan):", flush=True)
        plan = bench_planning(tmp, sizes, args.rounds)
        base = plan[100]["warm_s"] / 100
        for n in sizes[1:]:
            print(f"  warm planning per partition at {n}: {plan[n]['warm_s'] / n / base:.2f}x the 100-partition cost")
        print("Dagster's stale status for a bundle after one of its shards changed:", flush=True)
        bench_dagster_staleness([10, 99, 100, 200])
        print("merge, bundle and DuckDB:", flush=True)
        for n in rows:
            bench_bundle(tmp, n, args.rounds, args.export_rounds)


if __name__ == "__main__":
    main()
