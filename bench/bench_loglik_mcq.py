"""Speed of a log-likelihood multiple-choice run (items/s) on the real llama.cpp server.

nel's side: `nel eval run` of mmlu with `solver: {type: loglikelihood}` (one echo + logprobs
request per option, 4 per item) against llama-cpp-python's server with stories260K (one
thread, as the tests run it). Prints JSON: items, wall seconds of the whole command, the
engine's loop rate (`samples_per_s` of the bundle: first to last item, without Dagster's
start-up and the writing of results) and the requests the server answered.

`run_nel_side(url, items, out_dir)` is the function other benches call to put nel's figure
beside another harness's on the same server (lm-eval's `local-completions` for the same
items, say); it returns the same dict this script prints under `nel`.

    NEL_DATA_DIR=../shared/datasets PYTHONPATH=$PWD python bench/bench_loglik_mcq.py --items 20
    ... --url http://127.0.0.1:PORT/v1   # a server already running (model alias stories260K)
"""

from __future__ import annotations

import argparse
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

from nel_resources.runtime.processes import ManagedProcess, start_on_free_port  # noqa: E402

MODEL = REPO.parent / "shared" / "models" / "stories260K.gguf"
CONFIG = """\
services:
  llama: {{type: api, url: "{url}", model: {model}, protocol: completions}}
benchmarks:
  - name: {benchmark}
    max_problems: {items}
    solver: {{type: loglikelihood, config: {{metric: acc_norm, style: {style}}}}}
output: {{dir: "{out}"}}
"""


def start_llama(model: Path = MODEL, n_ctx: int = 1024) -> tuple[ManagedProcess, str]:
    """llama-cpp-python's server on a free loopback port, one thread; (process, base URL)."""
    def make(port: int) -> ManagedProcess:
        return ManagedProcess(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias",
             "stories260K", "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx),
             "--n_threads", "1", "--n_threads_batch", "1", "--logits_all", "true"],
            name="llama-server", env={"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"})

    proc, port = start_on_free_port(make, lambda p: f"http://127.0.0.1:{p}/v1/models",
                                    timeout=600, stall=60.0)
    return proc, f"http://127.0.0.1:{port}/v1"


def run_nel_side(url: str, items: int, out_dir: Path, *, benchmark: str = "mmlu",
                 style: str = "texts", model: str = "stories260K") -> dict[str, Any]:
    """Run nel's log-likelihood MCQ eval of `items` items against `url`; its figures.

    Returns:
        `{items, wall_s, items_per_s_wall, items_per_s_loop, requests, acc_norm}`.
    """
    cfg = out_dir / "nel.yaml"
    cfg.write_text(CONFIG.format(url=url, model=model, benchmark=benchmark, items=items,
                                 style=style, out=out_dir / "out"))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "dagster_project.cli.main", "eval", "run",
                           str(cfg), "--json", "--no-progress"], capture_output=True, text=True,
                          env=env, cwd=REPO, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"nel eval run failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    summary = json.loads(proc.stdout)
    (eval_file,) = (out_dir / "out" / benchmark).glob("eval-*.json")
    written = json.loads(eval_file.read_text())
    bundle, runtime = written["bundle"], written["benchmark"]["scores"]["runtime"]
    return {"items": items, "wall_s": round(wall, 2),
            "items_per_s_wall": round(items / wall, 3),
            "items_per_s_loop": round(runtime["samples_per_s"], 3),
            "requests": summary["requests_sent"],
            "acc_norm": bundle["scoring"]["metrics"]["acc_norm"]["mean"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=20)
    ap.add_argument("--benchmark", default="mmlu", choices=["mmlu", "mmlu_pro", "gpqa"])
    ap.add_argument("--style", default="texts", choices=["texts", "letters"])
    ap.add_argument("--url", help="a running server's base URL (default: start llama.cpp here)")
    args = ap.parse_args()
    proc = None
    url = args.url
    if url is None:
        proc, url = start_llama()
    try:
        with tempfile.TemporaryDirectory(prefix="nel-bench-loglik-") as tmp:
            nel = run_nel_side(url, args.items, Path(tmp), benchmark=args.benchmark,
                               style=args.style)
    finally:
        if proc is not None:
            proc.stop()
    print(json.dumps({"server": "llama_cpp.server stories260K, 1 thread",
                      "benchmark": args.benchmark, "style": args.style, "nel": nel}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
