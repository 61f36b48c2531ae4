"""Stale-only reruns, measured at the model server, and the same decisions in Dagster.

Two models (two services on one reference server, counted by `model`) × 4 shards of a
BYOB benchmark over a JSONL file we write (64 GSM8K rows), plus a small GSM8K run that
must never rerun. Each step changes one input, observes the shard inputs, asks Dagster's
GraphQL API which shard partitions are stale, then runs `nel eval run` and checks that it
sent requests for exactly those partitions.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from benchmarks.datasets import load_file
from dagster_project.run_output import dagster_home_for
from nel_resources.config import load_config
from tests.support.cli import nel_env, run_nel, summary_json
from tests.support.realcomponents import REPO_ROOT
from tests.support.reference import reset_server_stats

# 4 shards, not more: every step still has shards that must rerun and shards that must
# not, and each shard is a Dagster run (the test was the suite's slowest at 8 shards).
N_ROWS, N_SHARDS, PER_SHARD = 64, 4, 16
MODULE = '''
from benchmarks._dataset_env import DatasetEnvironment
from benchmarks._registry import register
from benchmarks._types import SeedResult
from pathlib import Path

from benchmarks.datasets import load_file

TEMPLATE = "Solve: {question}\\nEnd with #### <number>."


@register("stale_demo")
class StaleDemo(DatasetEnvironment):
    name = "stale_demo"
    version = "1"

    def __init__(self, *, path: str, protocol: str = "chat", num_fewshot: int | None = None) -> None:
        super().__init__(protocol=protocol, num_fewshot=num_fewshot)
        self.rows = load_file(Path(path))
        self._finish_init()

    def fingerprint(self) -> str:
        return f"{super().fingerprint()}:{TEMPLATE}"

    def build_seed(self, row, idx):
        return SeedResult(TEMPLATE.format(question=row["question"]), row["answer"],
                          {"category": row["category"]})

    async def verify(self, response, expected, **metadata):
        from benchmarks.scoring import numeric_match

        return numeric_match(response, expected)
'''

GQL = """
query Stale($keys: [AssetKeyInput!], $parts: [String!]) {
  assetNodes(assetKeys: $keys) { assetKey { path } opVersion staleStatusByPartition(partitions: $parts) }
}
"""

CAUSES = """
query Causes($keys: [AssetKeyInput!], $part: String) {
  assetNodes(assetKeys: $keys) { staleCauses(partition: $part) { reason category dependency { path } } }
}
"""
# Why Dagster called each partition stale (shown when an assertion fails).
CAUSES_SEEN: dict[str, Any] = {}


def _write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def setup(tmp_path: Path, reference_server, data_dir: Path) -> dict[str, Any]:
    src = load_file(data_dir / "gsm8k" / "test.jsonl")[:N_ROWS]
    rows = [{"question": r["question"], "answer": r["answer"].split("####")[-1].strip().replace(",", ""),
             "category": f"c{i % 3}"} for i, r in enumerate(src)]
    data = tmp_path / "demo.jsonl"
    _write_rows(data, rows)
    module = tmp_path / "stale_demo.py"
    module.write_text(MODULE)
    url = reference_server()
    out = tmp_path / "out"
    cfg = {
        "services": {
            "model-a": {"type": "api", "url": url, "model": "model-a", "temperature": 0.0, "max_tokens": 32},
            "model-b": {"type": "api", "url": url, "model": "model-b", "temperature": 0.0, "max_tokens": 32},
        },
        "benchmarks": [
            {"name": "stale_demo", "module": str(module), "params": {"path": str(data)}, "shards": N_SHARDS},
            {"name": "gsm8k", "max_problems": 8, "shards": 2},
        ],
        "output": {"dir": str(out)},
    }
    cfg_path = tmp_path / "nel.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    return {"tmp": tmp_path, "cfg": cfg, "cfg_path": cfg_path, "url": url, "out": out, "rows": rows,
            "data": data, "module": module, "env": {"NEL_DATA_DIR": str(data_dir)}}


def _stale_partitions(s: dict[str, Any], step: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, set[str]]:
    """Observe the shard inputs, then ask GraphQL which shard partitions are stale."""
    from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql

    cfg = load_config(s["cfg_path"])
    home = dagster_home_for(cfg)
    instance = dg.DagsterInstance.from_config(str(home))
    # Observe in a fresh interpreter: this one has cached the benchmark module and its data.
    obs = subprocess.run(
        [sys.executable, "-c",
         "import sys, dagster as dg\n"
         "from dagster_project.automation import record_shard_inputs\n"
         "from nel_resources.config import load_config\n"
         "from nel_resources.specs import resolve\n"
         "cfg = resolve(load_config(sys.argv[1]))\n"
         "print(record_shard_inputs(dg.DagsterInstance.from_config(sys.argv[2]), cfg))\n",
         str(s["cfg_path"]), str(home)],
        capture_output=True, text=True, env=nel_env(s["env"]), cwd=REPO_ROOT, timeout=120)
    assert obs.returncode == 0, obs.stderr
    defs_file = s["tmp"] / f"defs_{step}.py"
    defs_file.write_text(
        "from dagster_project.definitions import build_definitions\n"
        "from nel_resources.config import load_config\n"
        f"cfg = load_config({str(s['cfg_path'])!r})\n"
        "defs = build_definitions(cfg, cfg.output.dir)\n")
    stale: dict[str, set[str]] = {}
    if step == "first":
        return stale  # nothing materialized yet: only the observation matters
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    with define_out_of_process_context(str(defs_file), "defs", instance) as ctx:
        for bench, n in (("stale_demo", N_SHARDS), ("gsm8k", 2)):
            parts = [f"{m}|{i}" for m in ("model-a", "model-b") for i in range(n)]
            res = execute_dagster_graphql(ctx, GQL, {"keys": [{"path": [bench, "shard_results"]}],
                                                     "parts": parts})
            assert not res.errors, res.errors
            (node,) = res.data["assetNodes"]
            stale[bench] = {p for p, st in zip(parts, node["staleStatusByPartition"], strict=True)
                            if st != "FRESH"}
            for p in sorted(stale[bench]):
                res = execute_dagster_graphql(ctx, CAUSES, {"keys": [{"path": [bench, "shard_results"]}],
                                                            "part": p})
                CAUSES_SEEN[f"{step} {bench} {p}"] = res.data["assetNodes"][0]["staleCauses"]
    return stale


def _run(s: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    reset_server_stats(s["url"])
    summary = summary_json(run_nel("eval", "run", str(s["cfg_path"]), "--json", "--no-progress", env=s["env"]))
    from tests.support.reference import server_stats

    return summary, server_stats(s["url"])


def _prompts_of_shard(s: dict[str, Any], shard: int) -> set[str]:
    lo = shard * PER_SHARD
    return {r["question"] for r in s["rows"][lo:lo + PER_SHARD]}


def _asked(stats: dict[str, Any]) -> set[str]:
    return {q for p in stats["prompts"] for q in [p.split("Solve: ", 1)[-1].split("\nEnd with")[0]]}


@pytest.mark.slow
def test_stale_only_reruns_are_exact(setup: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    s = setup
    all_demo = {f"{m}|{i}" for m in ("model-a", "model-b") for i in range(N_SHARDS)}
    all_gsm = {f"{m}|{i}" for m in ("model-a", "model-b") for i in range(2)}
    counts: dict[str, dict[str, int]] = {}

    # 0. first run: everything
    _stale_partitions(s, "first", monkeypatch)
    summ, st = _run(s)
    assert summ["shards_run"] == 2 * N_SHARDS + 4
    assert st["models"] == {"model-a": N_ROWS + 8, "model-b": N_ROWS + 8}
    counts["first run"] = st["models"]

    # 1. unchanged: nothing stale, nothing sent
    assert _stale_partitions(s, "unchanged", monkeypatch) == {"stale_demo": set(), "gsm8k": set()}
    summ, st = _run(s)
    assert summ["shards_run"] == 0 and st["total_requests"] == 0
    counts["unchanged"] = st["models"]

    # 2. one row of shard 3 edited: that shard, for both models, and nothing else
    rows = [dict(r) for r in s["rows"]]
    rows[3 * PER_SHARD + 5]["question"] += " (Answer in whole dollars.)"
    _write_rows(s["data"], rows)
    s["rows"] = rows
    stale = _stale_partitions(s, "row", monkeypatch)
    assert stale == {"stale_demo": {"model-a|3", "model-b|3"}, "gsm8k": set()}
    summ, st = _run(s)
    assert summ["shards_run"] == 2
    assert st["models"] == {"model-a": PER_SHARD, "model-b": PER_SHARD}
    assert _asked(st) == _prompts_of_shard(s, 3)
    counts["one row of shard 3 edited"] = st["models"]

    # 3. model B's generation settings: exactly B's shards, on every benchmark
    s["cfg"]["services"]["model-b"]["temperature"] = 0.7
    s["cfg_path"].write_text(yaml.safe_dump(s["cfg"]))
    stale = _stale_partitions(s, "genb", monkeypatch)
    assert stale == {"stale_demo": {p for p in all_demo if p.startswith("model-b")},
                     "gsm8k": {p for p in all_gsm if p.startswith("model-b")}}, {k: v for k, v in CAUSES_SEEN.items() if k.startswith("genb")}
    summ, st = _run(s)
    assert summ["shards_run"] == N_SHARDS + 2
    assert st["models"] == {"model-b": N_ROWS + 8}
    counts["model B temperature changed"] = st["models"]

    # 4. prompt template (and so the benchmark's fingerprint/code version): every shard of
    #    that benchmark, and nothing of gsm8k
    s["module"].write_text(MODULE.replace("Solve: {question}", "Solve: {question}\\nBe brief."))
    stale = _stale_partitions(s, "template", monkeypatch)
    assert stale == {"stale_demo": all_demo, "gsm8k": set()}
    summ, st = _run(s)
    assert summ["shards_run"] == 2 * N_SHARDS
    assert st["models"] == {"model-a": N_ROWS, "model-b": N_ROWS}
    counts["prompt template changed"] = st["models"]

    # 5. scorer version bump: same, every shard of that benchmark only
    s["module"].write_text(s["module"].read_text().replace('version = "1"', 'version = "2"'))
    stale = _stale_partitions(s, "version", monkeypatch)
    assert stale == {"stale_demo": all_demo, "gsm8k": set()}
    summ, st = _run(s)
    assert summ["shards_run"] == 2 * N_SHARDS
    assert st["models"] == {"model-a": N_ROWS, "model-b": N_ROWS}
    counts["scorer version bumped"] = st["models"]

    # afterwards Dagster agrees that everything is fresh again
    assert _stale_partitions(s, "final", monkeypatch) == {"stale_demo": set(), "gsm8k": set()}
    print("\nrequests per step (by model):")
    for k, v in counts.items():
        print(f"  {k:32s} {v}")
