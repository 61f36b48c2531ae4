"""Real NeMo Evaluator 0.3.0 output directories, made at test time by the peer's own CLI.

The BYOB benchmark is tests/benchmarks/nemo_files/capitals_bench.py (4 countries); the
reference server answers two of them right (France, Kenya), one wrong (Japan: Kyoto) and the
last with no city at all, so a run scores 0.5 with both kinds of item.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.support.peers import run_peer_nemo

BENCH_DIR = Path(__file__).resolve().parents[1] / "benchmarks" / "nemo_files"
BENCH_NAME = "nemo_style_capitals"
ANSWERS = [
    {"match": "France", "content": "Answer: Paris"},
    {"match": "Japan", "content": "Answer: Kyoto"},
    {"match": "Kenya", "content": "Answer: Nairobi"},
]
DEFAULT_ANSWER = "Answer: I do not know"
EXPECTED_REWARDS = {0: 1.0, 1: 0.0, 2: 1.0, 3: 0.0}  # by problem_idx (dataset order)
# The peer reads these; the suite sets NEL_SHUFFLE_SEED for older tests.
UNSET = ["NEL_SHUFFLE_SEED", "NEL_SHARD_IDX", "NEL_TOTAL_SHARDS"]


def copy_bench(dest: Path) -> Path:
    """The BYOB file and its data in ``dest``; returns the .py file."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("capitals_bench.py", "capitals.jsonl"):
        shutil.copy2(BENCH_DIR / name, dest / name)
    return dest / "capitals_bench.py"


def peer_run(bench: Path, url: str, out: Path, *extra: str, env: dict[str, str] | None = None) -> Path:
    """`nel eval run` of NeMo Evaluator 0.3.0 into ``out`` (asserts it succeeded)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    p = run_peer_nemo("eval", "run", "--bench", str(bench), "--model-url", url, "--model-id", "ref",
                      "-o", str(out), *extra, env=env, unset=UNSET, cwd=bench.parent)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return out


def peer_sharded_run(bench: Path, url: str, out: Path, shards: int, *extra: str) -> Path:
    """A sharded peer run: one process per shard into ``out/shard_<N>/`` (its layout)."""
    for i in range(shards):
        peer_run(bench, url, out / f"shard_{i}", *extra,
                 env={"NEL_SHARD_IDX": str(i), "NEL_TOTAL_SHARDS": str(shards)})
    return out


def peer_rewards(bench_dir: Path) -> dict[tuple[int, int], float]:
    """(problem_idx, repeat) -> reward of a peer benchmark dir's results.jsonl."""
    out = {}
    for line in (bench_dir / "results.jsonl").read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            out[(r["problem_idx"], r["repeat"])] = r["reward"]
    return out


def tree_state(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` with its size and mtime (to show nothing was written)."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}
