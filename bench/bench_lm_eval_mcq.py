"""Items/s of an lm-eval multiple-choice task: nel's `lm-eval://` vs `lm_eval` itself.

The same local task (lm-eval's mmlu prompt over NEL_DATA_DIR's mmlu csv, 4 log-likelihood
requests per item), the same llama.cpp server (stories260K, one thread) and the same
concurrency; lm-eval's `local-completions` gets stories260K's tokenizer rebuilt from its
GGUF (bench/support/gguf_tokenizer.py). Prints JSON: per side the items, the wall seconds
of the whole command and items/s over it, nel's loop rate (its bundle's `samples_per_s`:
first to last item, without start-up), and the ratio nel / lm-eval.

    NEL_DATA_DIR=../shared/datasets PYTHONPATH=$PWD python bench/bench_lm_eval_mcq.py --items 80
    ... --url http://127.0.0.1:PORT/v1   # a server already running (model alias stories260K)
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_loglik_mcq import MODEL, start_llama  # noqa: E402

TASK = REPO / "tests" / "fixtures" / "lm_eval" / "mmlu_local.yaml.in"
SUBJECTS = ("abstract_algebra", "anatomy", "astronomy", "college_biology")


def write_task(tmp: Path, items: int) -> Path:
    """The mmlu_local task YAML and its data (`items` questions) under `tmp`; the YAML's folder."""
    data_dir = Path(os.environ.get("NEL_DATA_DIR", REPO.parent / "shared" / "datasets"))
    rows: list[dict[str, Any]] = []
    for subject in SUBJECTS:
        with (data_dir / "mmlu" / "test" / f"{subject}_test.csv").open(encoding="utf-8") as f:
            rows += [{"question": r[0], "subject": subject, "choices": r[1:5],
                      "answer": "ABCD".index(r[5].strip())} for r in csv.reader(f)]
    (tmp / "data").mkdir()
    (tmp / "data" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:items]))
    (tmp / "tasks").mkdir()
    (tmp / "tasks" / "mmlu_local.yaml").write_text(TASK.read_text().replace("${DATA}", str(tmp / "data")))
    return tmp / "tasks"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "HF_DATASETS_OFFLINE": "1",
            "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1"}


def run_lm_eval(url: str, tasks: Path, tmp: Path, items: int, concurrency: int) -> dict[str, Any]:
    from bench.support.gguf_tokenizer import write_hf_tokenizer

    tok = write_hf_tokenizer(MODEL, tmp / "tokenizer")
    t0 = time.perf_counter()
    subprocess.run([str(Path(sys.executable).parent / "lm_eval"), "--model", "local-completions",
                    "--model_args", f"base_url={url}/completions,model=stories260K,"
                    f"tokenizer_backend=huggingface,tokenizer={tok},tokenized_requests=False,"
                    f"num_concurrent={concurrency},max_length=512", "--tasks", "mmlu_local",
                    "--include_path", str(tasks), "--output_path", str(tmp / "lm_eval_out")],
                   check=True, env=_env(), capture_output=True)
    wall = time.perf_counter() - t0
    return {"items": items, "wall_s": round(wall, 2), "items_per_s_wall": round(items / wall, 3)}


def run_nel(url: str, tasks: Path, tmp: Path, items: int, concurrency: int) -> dict[str, Any]:
    cfg = tmp / "nel.yaml"
    cfg.write_text(json.dumps({
        "services": {"llama": {"type": "api", "url": url, "protocol": "completions",
                               "model": "stories260K", "max_concurrent": concurrency}},
        "benchmarks": [{"name": "lm-eval://mmlu_local", "params": {"include_path": str(tasks)}}],
        "output": {"dir": str(tmp / "nel_out")}}))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "dagster_project.cli.main", "eval", "run",
                           str(cfg), "--json", "--no-progress"], capture_output=True, text=True,
                          env=_env(), cwd=REPO, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"nel eval run failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    (eval_file,) = (tmp / "nel_out" / "lm_eval_mmlu_local").glob("eval-*.json")
    runtime = json.loads(eval_file.read_text())["benchmark"]["scores"]["runtime"]
    return {"items": items, "wall_s": round(wall, 2), "items_per_s_wall": round(items / wall, 3),
            "items_per_s_loop": round(runtime["samples_per_s"], 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=80)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--url", help="a running server's base URL (default: start llama.cpp here)")
    args = ap.parse_args()
    proc, url = (None, args.url) if args.url else start_llama()
    try:
        with tempfile.TemporaryDirectory(prefix="nel-bench-lmeval-") as tmp_s:
            tmp = Path(tmp_s)
            tasks = write_task(tmp, args.items)
            lm = run_lm_eval(url, tasks, tmp, args.items, args.concurrency)
            nel = run_nel(url, tasks, tmp, args.items, args.concurrency)
    finally:
        if proc is not None:
            proc.stop()
    print(json.dumps({"server": "llama_cpp.server stories260K, 1 thread", "task": "mmlu_local",
                      "concurrency": args.concurrency, "lm_eval": lm, "nel": nel,
                      "ratio_wall": round(nel["items_per_s_wall"] / lm["items_per_s_wall"], 2)},
                     indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
