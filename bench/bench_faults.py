"""`nel eval run` under a fault mix vs a clean server: how close to what the faults force?

The same GSM8K run (nel's real engine, end to end: `nel eval run` in a child process) goes
to two reference servers started side by side: a clean one, and one injecting, per request
attempt, 10% HTTP 500, 5% 429 (Retry-After 1 s), 2% hangs, 1% connection resets and 1%
200s with a truncated JSON body (the mix of issue 11). Rounds alternate which server goes
first; medians are reported.

Two durations per run: the wall time of the command, and its request phase (first request
sent to last sample finished, from the rows' timestamps): the rest is start-up, Dagster and
writing, which faults do not change. The floor the faults force on the request phase is the
larger of
  * capacity: the clean run's phase plus the slot-seconds the hangs occupy spread over the
    concurrency (hangs x timeout / concurrency), and
  * chain: the longest wait a single sample is forced into, one timeout per hang and one
    Retry-After per 429 it met (from the server's per-prompt fault log; with repeats a
    prompt's faults are shared by its samples, so the bound takes the larger of its worst
    single fault and its total divided by the repeats, which is weaker: a sample whose
    retry hangs again waits two timeouts, but the log cannot tell it from two samples).
Also printed: the slowest sample's own time in the model client (all its attempts and
back-offs): when the request phase ends just after it, the run waited on that one sample's
chain of faults, not on idle slots.
Prints faulty/clean and faulty/floor for both durations, and checks that nel's
`requests_sent` equals what the server received and that no sample failed.

nel runs at its default settings (no `--timeout`: 120 s per attempt, hung attempts cut by
the hang cut of nel_resources/wire/hang_cut.py); `--timeout S` pins the old comparison. A hang
costs the floor estimate `--timeout` when given, else the hang cut's floor (2 s).

The slow-model case (`--case slow`): every answer takes 5-15 s (`--slow-ms`, e.g.
20000,60000 for 20-60 s), no faults. The same run at the default settings and with a huge
`--timeout`: the hang cut must cut nothing (requests sent == samples in both) and the
results must be the same.

    NEL_DATA_DIR=../shared/datasets python bench/bench_faults.py --repeats 2 --rounds 3
    NEL_DATA_DIR=../shared/datasets python bench/bench_faults.py --case slow
"""

from __future__ import annotations

import argparse
import glob
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pyarrow.parquet as pq  # noqa: E402

from nel_resources.reference_server import start_reference_server  # noqa: E402
from nel_resources.wire.hang_cut import HangCut  # noqa: E402

ANSWER = "Step by step.\n#### 42"


def _server(url: str, method: str, path: str) -> dict[str, Any]:
    host, port = url.split("//", 1)[1].split("/", 1)[0].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(method, path)
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def request_phase(out: str) -> tuple[float, float]:
    """(seconds from the first sample's start to the last one's end, the slowest sample's
    seconds in the model client), from the stored rows."""
    files = glob.glob(f"{out}/gsm8k/shard_results/**/*.parquet", recursive=True)
    rows = [r for f in files
            for r in pq.read_table(f, columns=["timestamp", "total_ms", "model_ms"]).to_pylist()]
    phase = max(r["timestamp"] for r in rows) - min(r["timestamp"] - r["total_ms"] / 1000 for r in rows)
    return phase, max(r["model_ms"] for r in rows) / 1000


def run_nel(url: str, a: argparse.Namespace, *extra: str
            ) -> tuple[float, tuple[float, float], dict[str, Any]]:
    """One `nel eval run` into a fresh output dir: (wall s, request_phase(), JSON summary)."""
    with tempfile.TemporaryDirectory(prefix="nel-bench-faults-") as out:
        args = ["eval", "run", "-b", "gsm8k", "-n", str(a.repeats), "--model-url", url,
                "--model-id", "m", "--max-concurrent", str(a.concurrency),
                "-o", out, "--no-progress", "--json", *extra]
        if a.timeout is not None:
            args += ["--timeout", str(a.timeout)]
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "dagster_project.cli.main", *args],
                           capture_output=True, text=True, cwd=REPO,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            raise SystemExit(f"nel failed:\n{p.stdout}\n{p.stderr}")
        return wall, request_phase(out), json.loads(p.stdout)


def hang_cost(a: argparse.Namespace) -> float:
    """What one hang forces a sample to wait at least: the timeout, or the hang cut's floor."""
    return a.timeout if a.timeout is not None else HangCut().floor


def chain_floor(log: dict[str, list[str]], a: argparse.Namespace) -> float:
    """The longest forced wait of one sample (see the module docstring)."""
    cost = {"hang": hang_cost(a), "429": a.retry_after}
    worst = 0.0
    for faults in log.values():
        costs = [cost.get(f, 0.0) for f in faults]
        worst = max(worst, max(costs, default=0.0), sum(costs) / a.repeats)
    return worst


def one(url: str, a: argparse.Namespace) -> dict[str, Any]:
    _server(url, "POST", "/stats/reset")
    wall, (phase, slowest), summ = run_nel(url, a)
    st = _server(url, "GET", "/stats")
    res = summ["results"][0]
    return {"wall": wall, "phase": phase, "slowest": slowest, "sent": summ["requests_sent"],
            "received": st["by_endpoint"].get("/v1/chat/completions", 0),
            "faults": st["faults"], "chain": chain_floor(st["fault_log"], a), "failed": res["failed"], "score": res["score"],
            "n": res["n_samples"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=2, help="GSM8K repeats (1,319 problems each)")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3, help="alternating clean/faulty rounds")
    ap.add_argument("--timeout", type=float, default=None,
                    help="nel's --timeout (s); default: none (nel's defaults)")
    ap.add_argument("--case", choices=["faults", "slow", "both"], default="faults")
    ap.add_argument("--slow-ms", default="5000,15000", help="slow case: answer time range (ms)")
    ap.add_argument("--slow-problems", type=int, default=96, help="slow case: GSM8K problems")
    ap.add_argument("--slow-concurrency", type=int, default=16)
    ap.add_argument("--retry-after", type=float, default=1.0)
    ap.add_argument("--fail-attempts", type=int, default=3,
                    help="faults hit only a prompt's first N attempts (so every sample can end well)")
    a = ap.parse_args()
    if a.case in ("slow", "both"):
        slow_case(a)
    if a.case in ("faults", "both"):
        fault_case(a)


def slow_case(a: argparse.Namespace) -> None:
    """A slow model at nel's defaults vs a huge --timeout: nothing cut, the same results."""
    lo, hi = (float(x) for x in a.slow_ms.split(","))
    proc, url = start_reference_server(default_content=ANSWER, delay_ms=lo, delay_ms_max=hi)
    sub = argparse.Namespace(**{**vars(a), "repeats": 1, "concurrency": a.slow_concurrency})
    runs: dict[str, dict[str, Any]] = {}
    try:
        for name, timeout in (("default", None), ("huge_timeout", 1e6)):
            sub.timeout = timeout
            _server(url, "POST", "/stats/reset")
            wall, _, summ = run_nel(url, sub, "-m", str(a.slow_problems))
            st = _server(url, "GET", "/stats")
            res = summ["results"][0]
            runs[name] = {"wall_s": round(wall, 2), "samples": res["n_samples"],
                          "requests_sent": summ["requests_sent"],
                          "received": st["by_endpoint"].get("/v1/chat/completions", 0),
                          "failed": res["failed"], "score": res["score"]}
            print(f"slow {name}: {runs[name]}", file=sys.stderr, flush=True)
    finally:
        proc.stop()
    d, h = runs["default"], runs["huge_timeout"]
    print(json.dumps({"case": "slow", "answer_ms": [lo, hi], "concurrency": a.slow_concurrency,
                      **runs, "no_attempt_cut": d["requests_sent"] == d["samples"] == d["received"],
                      "same_result": (d["score"], d["failed"], d["samples"])
                      == (h["score"], h["failed"], h["samples"]),
                      "ratio_wall_default_over_huge": round(d["wall_s"] / h["wall_s"], 2)}, indent=2))


def fault_case(a: argparse.Namespace) -> None:
    """The fault mix against a clean server (the module docstring)."""
    clean_proc, clean_url = start_reference_server(default_content=ANSWER)
    faulty_proc, faulty_url = start_reference_server(
        default_content=ANSWER, fault_per_request=True, fail_attempts=a.fail_attempts,
        fail_rate=0.10, status_429_rate=0.05, retry_after=a.retry_after, hang_rate=0.02,
        reset_rate=0.01, truncate_rate=0.01)
    rounds: list[dict[str, Any]] = []
    try:
        for i in range(a.rounds):
            order = ["clean", "faulty"] if i % 2 == 0 else ["faulty", "clean"]
            r = {name: one(clean_url if name == "clean" else faulty_url, a) for name in order}
            rounds.append(r)
            print(f"round {i + 1}: clean {r['clean']['wall']:.1f}s (requests {r['clean']['phase']:.1f}s) "
                  f"faulty {r['faulty']['wall']:.1f}s (requests {r['faulty']['phase']:.1f}s) "
                  f"faults {r['faulty']['faults']}", file=sys.stderr, flush=True)
    finally:
        clean_proc.stop()
        faulty_proc.stop()
    med = statistics.median
    for r in rounds:
        hangs = r["faulty"]["faults"].get("hang", 0)
        # The request phase cannot beat the clean phase plus the hangs' slot-seconds spread
        # over the slots, nor the longest forced chain; the rest of the run is as clean.
        r["floor"] = max(r["clean"]["phase"] + hangs * hang_cost(a) / a.concurrency,
                         r["faulty"]["chain"])
        r["wall_floor"] = r["clean"]["wall"] - r["clean"]["phase"] + r["floor"]
    faulty = [r["faulty"] for r in rounds]
    res = {
        "samples": faulty[0]["n"],
        "rounds": a.rounds,
        "concurrency": a.concurrency,
        "timeout_s": a.timeout,
        "clean_wall_s": round(med(r["clean"]["wall"] for r in rounds), 2),
        "faulty_wall_s": round(med(f["wall"] for f in faulty), 2),
        "ratio_faulty_over_clean": round(med(r["faulty"]["wall"] / r["clean"]["wall"] for r in rounds), 2),
        "wall_floor_s": round(med(r["wall_floor"] for r in rounds), 2),
        "ratio_wall_over_floor": round(med(r["faulty"]["wall"] / r["wall_floor"] for r in rounds), 2),
        "clean_request_phase_s": round(med(r["clean"]["phase"] for r in rounds), 2),
        "faulty_request_phase_s": round(med(f["phase"] for f in faulty), 2),
        "ratio_request_phase_faulty_over_clean": round(
            med(r["faulty"]["phase"] / r["clean"]["phase"] for r in rounds), 2),
        "request_phase_floor_s": round(med(r["floor"] for r in rounds), 2),
        "capacity_floor_s": round(med(r["clean"]["phase"] + r["faulty"]["faults"].get("hang", 0)
                                      * hang_cost(a) / a.concurrency for r in rounds), 2),
        "chain_floor_s": round(med(f["chain"] for f in faulty), 2),
        "slowest_sample_s": round(med(f["slowest"] for f in faulty), 2),
        "ratio_request_phase_over_floor": round(med(r["faulty"]["phase"] / r["floor"] for r in rounds), 2),
        "faults_per_round": [f["faults"] for f in faulty],
        "requests_sent_by_nel": [f["sent"] for f in faulty],
        "requests_received_by_server": [f["received"] for f in faulty],
        "failed_samples": [f["failed"] for f in faulty],
        "score_clean_vs_faulty": [rounds[0]["clean"]["score"], faulty[0]["score"]],
    }
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
