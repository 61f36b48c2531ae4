"""`lm-eval://` against lm-eval itself: the same local task, data and llama.cpp server give
the same per-item answers and scores through nel and through `lm_eval --model
local-completions` (generate_until; the task read through `include_path`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "lm_eval" / "gsm8k_local.yaml.in"
N_ITEMS = 100

if not os.environ.get("CI"):  # in CI the optional package is installed: a missing one fails
    pytest.importorskip("lm_eval")


def _write_task(tmp: Path, data_dir: Path) -> Path:
    data = tmp / "data"
    data.mkdir()
    for split, n in (("test", N_ITEMS), ("train", 10)):
        lines = (data_dir / "gsm8k" / f"{split}.jsonl").read_text().splitlines()[:n]
        (data / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    tasks = tmp / "tasks"
    tasks.mkdir()
    (tasks / "gsm8k_local.yaml").write_text(FIXTURE.read_text().replace("${DATA}", str(data)))
    return tasks


def _offline_env() -> dict[str, str]:
    return {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1"}


def test_generate_until_agrees_with_lm_eval(llama_server: str, data_dir: Path,
                                            tmp_path: Path) -> None:
    tasks = _write_task(tmp_path, data_dir)
    bindir = Path(sys.executable).parent
    # lm-eval itself, on the same server and task files
    out = tmp_path / "lm_eval_out"
    subprocess.run(
        [str(bindir / "lm_eval"), "--model", "local-completions", "--model_args",
         f"base_url={llama_server}/completions,model=stories260K,tokenizer_backend=None,"
         "tokenized_requests=False,num_concurrent=1", "--tasks", "gsm8k_local",
         "--include_path", str(tasks), "--log_samples", "--output_path", str(out)],
        check=True, env=_offline_env(), capture_output=True, timeout=600)
    theirs: dict[tuple[int, str], dict] = {}
    for f in out.rglob("samples_gsm8k_local_*.jsonl"):
        for line in f.read_text().splitlines():
            s = json.loads(line)
            theirs[(s["doc_id"], s["filter"])] = s
    # nel, through its CLI and engine
    cfg = tmp_path / "nel.yaml"
    cfg.write_text(json.dumps({
        "services": {"llama": {"type": "api", "url": llama_server, "protocol": "completions",
                               "model": "stories260K"}},
        "benchmarks": [{"name": "lm-eval://gsm8k_local",
                        "params": {"include_path": str(tasks)}}],
        "output": {"dir": str(tmp_path / "nel_out")}}))
    run = subprocess.run([str(bindir / "nel"), "eval", "run", str(cfg), "--no-progress"],
                         env=_offline_env(), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    ours = [json.loads(line) for line in
            (tmp_path / "nel_out" / "lm_eval_gsm8k_local" / "results.jsonl").read_text().splitlines()]
    assert len(ours) == N_ITEMS and len(theirs) == 2 * N_ITEMS
    same_text = same_score = 0
    for row in ours:
        doc = row["metadata"]["doc_id"]
        lm = theirs[(doc, "strict-match")]
        # nel strips the answer's surrounding whitespace; lm-eval keeps the leading space
        same_text += row["model_response"].strip() == lm["resps"][0][0].strip()
        metrics = row["scoring_details"]["metrics"]
        same_score += all(metrics[f"exact_match,{flt}"] == theirs[(doc, flt)]["exact_match"]
                          for flt in ("strict-match", "flexible-extract"))
    assert same_text / N_ITEMS >= 0.995, f"{same_text}/{N_ITEMS} responses agree"
    assert same_score / N_ITEMS >= 0.995, f"{same_score}/{N_ITEMS} scores agree"
