"""`lm-eval://` results are nel results like any other: two runs of lm-eval's own gsm8k task
(local copy, the reference server answering 6 and then 12 of 12 right) give bundles that
`nel compare` pairs item by item and `nel gate` judges (a significant improvement is not a
regression: GO, exit 0; the other direction is NO-GO, exit 1)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from benchmarks.datasets import load_file
from tests.support.cli import run_nel
from tests.support.gsm8k import answers_for

if not os.environ.get("CI"):  # in CI the optional package is installed: a missing one fails
    pytest.importorskip("lm_eval")
N = 12


def run(tmp: Path, name: str, url: str, data: Path, env: dict[str, str]) -> Path:
    out = tmp / name
    cfg = {"services": {"m": {"type": "api", "url": url, "model": "m", "protocol": "completions"}},
           "benchmarks": [{"name": "lm-eval://gsm8k", "max_problems": N,
                           "params": {"data_dir": str(data)}}],
           "output": {"dir": str(out)}}
    (tmp / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
    p = run_nel("eval", "run", str(tmp / f"{name}.yaml"), "--no-progress", env=env, timeout=600)
    assert p.returncode == 0, p.stderr
    return out


def test_two_lm_eval_runs_compare_and_gate(tmp_path: Path, data_dir: Path, reference_server) -> None:
    data = tmp_path / "lm_eval_data"
    folder = data / "openai" / "gsm8k" / "main"
    folder.mkdir(parents=True)
    for split, n in (("test", 40), ("train", 8)):
        lines = (data_dir / "gsm8k" / f"{split}.jsonl").read_text().splitlines()[:n]
        (folder / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    env = {"NEL_DATA_DIR": str(data_dir)}
    # The items nel picks (shuffled with seed 42) are among the first 40; answer each by its question.
    rows = load_file(folder / "test.jsonl")
    half = run(tmp_path, "half", reference_server(answers=answers_for(rows, set(range(0, 40, 2)))), data, env)
    right = run(tmp_path, "right", reference_server(answers=answers_for(rows, set(range(40)))), data, env)

    p = run_nel("compare", str(half), str(right), "--format", "json", "--no-report")
    cmp = json.loads(p.stdout)["benchmarks"]["lm-eval://gsm8k"]
    wrong = [r["problem_idx"] for f in sorted(half.glob("*/shard_results/model=m/shard=*/*.parquet"))
             for r in pq.read_table(f).to_pylist() if r["reward"] == 0.0]
    assert len(wrong) == 6  # the picked items answered wrong in the first run
    assert cmp["n_paired"] == N and cmp["cand_mean"] == 1.0 and cmp["base_mean"] == 0.5, cmp
    # the flips shown (at most 5) are items the first run got wrong
    assert {e["item"] for e in cmp["flip_examples"]["worse_to_better"]} <= set(wrong)
    assert cmp["flip_examples"]["better_to_worse"] == []
    # 6 discordant pairs cannot show a 1-point effect: NeMo Evaluator's rule says INCONCLUSIVE (2)
    assert p.returncode == 2 and cmp["outcome"] == "INCONCLUSIVE", cmp["outcome"]
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({"version": 1, "defaults": {"max_drop": 0.1, "metric": "mean"},
                                      "benchmarks": {"lm-eval://gsm8k": {"tier": "critical"}}}))
    up = run_nel("gate", str(half), str(right), "-p", str(policy))
    down = run_nel("gate", str(right), str(half), "-p", str(policy))
    assert up.returncode == 0, up.stdout + up.stderr  # better is never a breach: GO
    assert down.returncode == 1, down.stdout + down.stderr  # the damage CI lies above 0.1: NO-GO
