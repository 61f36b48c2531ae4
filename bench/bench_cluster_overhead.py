"""What `cluster.type: docker` and `cluster.type: ray` cost per shard, next to a local run.

In one command, alternating rounds over the same small sharded run (GSM8K's first `--items`
problems in `--shards` shards, against nel's reference server on 127.0.0.1): `nel eval run
--fresh` with `cluster.type` local, docker (containers of nel:local, built first if needed)
and ray (a private in-process local Ray cluster). Prints the median wall time of each, the
ratio to local, and the per-shard overhead `(cluster - local) / shards`.

Needs the Docker engine (`eval $(NEL_DOCKER_PY_BASE=1 bash deploy/docker/start_engine.sh)`),
Ray (`pip install 'nel[ray]'`) and the data (NEL_DATA_DIR):

    NEL_DATA_DIR=../shared/datasets python bench/bench_cluster_overhead.py --rounds 3
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
sys.path.insert(0, str(REPO))

from benchmarks.datasets import load_file  # noqa: E402
from nel_resources.reference_server import start_reference_server  # noqa: E402


def _answers(rows: list[dict]) -> list[dict]:
    out = []
    for r in rows:
        gold = r["answer"].split("####")[-1].strip().replace(",", "")
        out.append({"match": r["question"][:120], "content": f"Step by step.\n#### {gold}"})
    return out


def _config(path: Path, url: str, out: Path, items: int, shards: int, cluster: str) -> Path:
    import yaml

    cfg = {"services": {"ref": {"type": "api", "url": url, "model": "ref-model"}},
           "benchmarks": [{"name": "gsm8k", "max_problems": items, "shards": shards,
                           "shuffle_seed": None}],
           "output": {"dir": str(out)}}
    if cluster != "local":
        cfg["cluster"] = {"type": cluster, **({"mount_home": False} if cluster == "docker" else {})}
    path.write_text(yaml.safe_dump(cfg))
    return path


def _run(cfg: Path) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "dagster_project.cli.main", "eval", "run", str(cfg),
                           "--fresh", "--no-progress", "--json"], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{cfg.name}: nel exited {proc.returncode}: {proc.stderr[-2000:]}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--items", type=int, default=24)
    ap.add_argument("--shards", type=int, default=3)
    ap.add_argument("--kinds", default="local,docker,ray", help="comma-separated cluster types")
    args = ap.parse_args()
    data = os.environ.get("NEL_DATA_DIR")
    if not data:
        raise SystemExit("set NEL_DATA_DIR (the shared datasets)")
    kinds = args.kinds.split(",")
    if "docker" in kinds:  # build (or find) nel:local once, outside the timed runs
        from nel_resources.launchers.docker import LOCAL_TAG
        from nel_resources.launchers.nel_image import build_nel_image

        build_nel_image(LOCAL_TAG)
    rows = load_file(Path(data) / "gsm8k" / "test.jsonl")[:args.items]
    proc, url = start_reference_server(answers=_answers(rows))
    times: dict[str, list[float]] = {k: [] for k in kinds}
    try:
        with tempfile.TemporaryDirectory(prefix="nel-bench-cluster-") as tmp:
            cfgs = {k: _config(Path(tmp) / f"{k}.yaml", url, Path(tmp) / k, args.items, args.shards, k)
                    for k in kinds}
            for k in kinds:  # warm-up (first imports, the dataset cache), not timed
                _run(cfgs[k])
            for _ in range(args.rounds):
                for k in kinds:
                    times[k].append(_run(cfgs[k]))
    finally:
        proc.stop()
    med = {k: statistics.median(v) for k, v in times.items()}
    base = med.get("local")
    print(f"rounds={args.rounds} items={args.items} shards={args.shards}  median seconds per "
          "`nel eval run --fresh`")
    for k in kinds:
        extra = ""
        if base and k != "local":
            extra = f"  ({med[k] / base:.2f}x local, {(med[k] - base) / args.shards:+.2f} s per shard)"
        print(f"  {k:<7} {med[k]:7.2f}{extra}")


if __name__ == "__main__":
    main()
