"""Throughput of `nel eval run` end to end vs a bare aiohttp loop, in one command.

All send the same GSM8K chat requests to the same reference server (answering at once)
at concurrency 64. Two yardsticks: the bare loop inside this process (requests only, timed
from its first request to its last answer: `ratio_nel_over_bare`), and issue 32's
harness-style one, `support/bare_harness.py` as a process of its own that also reads the
data, scores and writes its rows, timed from spawn to exit (`ratio_nel_over_bare_process`).
Prints samples/s of each and their ratios, nel's CPU ms per sample
(user+sys of the `nel` process, from its rusage), its loop phase per sample (first to last
model request, as the reference server recorded them: Dagster's start-up and the writing
of results are outside it), the time from spawning `nel` to the first request and to the
last one, the tail (from the last request to the process's exit: statistics, exports,
Dagster's recording, interpreter shutdown), its peak RSS (the largest of its processes', from
its rusage), the peak memory of its process tree (the sum of its processes' PSS, sampled), and the time and request count of an unchanged
rerun (which must send 0 requests). `--samples N --no-bare` makes it one live run of at least N
samples (a 1,000,000-sample run: memory and wall time, no ratio).

`--baseline DIR` also runs the `nel` of another checkout (`/work/main`, say) in the same
rounds, alternating which of the two goes first; the bare loop of each round stays the
common yardstick, and the summary gains a `baseline` block with the same figures and a
`vs_baseline` block of per-round ratios (this checkout / the baseline; below 1 is lower).

`--daemon` also runs this checkout's `nel` through a `nel daemon` started once before the
rounds (a `daemon` block): its CPU is the caller's plus the run's (the daemon's fork, as
`nel daemon status --json` reports it), its peak RSS the larger of the two. The daemon's
own start (imports, ~1.5 s) is not in any round, as a warm disk cache is not.

    NEL_DATA_DIR=../shared/datasets python bench/bench_eval_throughput.py --repeats 8
    NEL_DATA_DIR=../shared/datasets python bench/bench_eval_throughput.py --baseline /work/main --daemon
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.support.orphans import become_subreaper, own_children, reap_new  # noqa: E402
from benchmarks import get_benchmark  # noqa: E402
from nel_resources.reference_server import start_reference_server  # noqa: E402


async def bare_loop(url: str, bodies: list[bytes], concurrency: int) -> float:
    """Send every body once with `concurrency` workers; returns seconds."""
    conn = aiohttp.TCPConnector(limit=concurrency)
    it = iter(bodies)
    async with aiohttp.ClientSession(connector=conn) as s:
        async def worker() -> None:
            for b in it:
                async with s.post(url + "/chat/completions", data=b,
                                  headers={"Content-Type": "application/json"}) as r:
                    obj = orjson.loads(await r.read())
                    assert obj["choices"][0]["message"]["content"]
        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - t0


CHAT = "/v1/chat/completions"
BARE_HARNESS = Path(__file__).resolve().parent / "support" / "bare_harness.py"


def bare_process(url: str, repeats: int, concurrency: int) -> float:
    """The harness-style yardstick: `support/bare_harness.py` as a process of its own (reads
    the data, formats the prompts, sends, scores, writes its rows); seconds from spawn to exit."""
    data = Path(os.environ.get("NEL_DATA_DIR", "")) / "gsm8k" / "test.jsonl"
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, str(BARE_HARNESS), "--data", str(data), "--url", url,
                        "--repeats", str(repeats), "--concurrency", str(concurrency),
                        "--out", str(Path(out) / "rows.jsonl")], check=True, capture_output=True)
        return time.perf_counter() - t0


def stats(url: str) -> dict:
    import urllib.request

    with urllib.request.urlopen(url.removesuffix("/v1") + "/stats") as r:
        return json.loads(r.read())


def reset(url: str) -> None:
    import urllib.request

    urllib.request.urlopen(urllib.request.Request(url.removesuffix("/v1") + "/stats/reset", method="POST")).read()


def run_nel(args: list[str], repo: Path = REPO, daemon_dir: Path | None = None) -> dict:
    """Run the `nel` of checkout `repo` in a child; returns its wall s, CPU s, peak RSS MB,
    the wall-clock time it started and its JSON summary.

    With `daemon_dir`, the nel daemon there (`nel daemon start`) takes the run: the CPU is
    then the caller's plus the run's (the daemon's fork, as the daemon reports it in
    `nel daemon status --json`) and the peak RSS the larger of the two, so no work escapes
    the count. Without it, NEL_DAEMON=off keeps the run in-process whatever daemon runs."""
    env = {**os.environ, "PYTHONPATH": str(repo)}
    if daemon_dir is None:
        env["NEL_DAEMON"] = "off"
    else:
        env["NEL_DAEMON_DIR"] = str(daemon_dir)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        before = own_children()
        started = time.time()
        t0 = time.perf_counter()
        p = subprocess.Popen([sys.executable, "-m", "dagster_project.cli.main", *args], stdout=out,
                             stderr=err, cwd=repo, env=env)
        tree = TreeMemory(p.pid)
        _, status, usage = os.wait4(p.pid, 0)
        tree_pss = tree.stop()
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        # What nel left running after it returned (its Dagster recording, reparented to
        # this process, the subreaper): waited for here, its time and CPU counted apart.
        left_cpu, left_rss = reap_new(before)
        after = time.perf_counter() - t0 - wall
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if p.returncode != 0:
        raise SystemExit(f"nel failed:\n{stdout}\n{stderr}")
    res = {"wall": wall, "started": started, "summary": json.loads(stdout),
           "cpu": usage.ru_utime + usage.ru_stime + left_cpu, "rss": usage.ru_maxrss / 1024,
           "tree_pss": tree_pss, "after_exit": after, "after_exit_rss": left_rss}
    if daemon_dir is not None:
        run = daemon_last_run(repo, env)
        res["cpu"] += run["cpu_s"]
        res["rss"] = max(res["rss"], run["maxrss_mb"])
    return res


class TreeMemory:
    """The peak memory of a process and its descendants together, sampled every 50 ms: the
    sum of their PSS (a page shared by a fork and its parent counts once, split between them;
    the sum of their RSS would count it twice). `ru_maxrss` is only the largest process's."""

    def __init__(self, pid: int) -> None:
        import threading

        self._pid, self._peak, self._done = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _tree(self) -> list[int]:
        pids, i = [self._pid], 0
        while i < len(pids):
            for task in Path(f"/proc/{pids[i]}/task").glob("*/children"):
                with contextlib.suppress(OSError):  # ended meanwhile
                    pids += [int(c) for c in task.read_text().split()]
            i += 1
        return pids

    def _watch(self) -> None:
        while not self._done.wait(0.05):
            total = 0
            for pid in self._tree():
                try:
                    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                        if line.startswith("Pss:"):
                            total += int(line.split()[1])
                            break
                except OSError:
                    pass  # ended meanwhile
            self._peak = max(self._peak, total)

    def stop(self) -> float:
        """Stop sampling; the peak in MB."""
        self._done.set()
        self._thread.join()
        return self._peak / 1024


def daemon_last_run(repo: Path, env: dict[str, str]) -> dict:
    """The last run the daemon of `repo` served: its pid, exit status, CPU s, peak RSS MB."""
    p = subprocess.run([sys.executable, "-m", "dagster_project.cli.main", "daemon", "status", "--json"],
                       capture_output=True, text=True, cwd=repo, env=env, check=True)
    mine = [d for d in json.loads(p.stdout) if d["current_code"]]
    if not mine or not mine[0]["last_run"]:
        raise SystemExit(f"the nel daemon of {repo} took no run: {p.stdout}")
    return mine[0]["last_run"]


def daemon(repo: Path, where: Path, *action: str) -> None:
    """`nel daemon start|stop ...` of checkout `repo`, with its sockets under `where`."""
    env = {**os.environ, "PYTHONPATH": str(repo), "NEL_DAEMON_DIR": str(where)}
    subprocess.run([sys.executable, "-m", "dagster_project.cli.main", "daemon", *action],
                   capture_output=True, cwd=repo, env=env, check=True)


def precompile(repo: Path) -> None:
    """Write the bytecode of `repo`'s packages, so no run pays for compiling its source.

    A checkout whose `__pycache__` is missing (PYTHONDONTWRITEBYTECODE set, a fresh
    worktree) would compile every module it imports on every run: ~0.35 s of CPU here,
    which is no cost of nel and would favour whichever checkout has its bytecode.
    """
    import compileall

    for pkg in ("benchmarks", "dagster_project", "nel_assets", "nel_resources"):
        compileall.compile_dir(repo / pkg, quiet=1)


def nel_round(url: str, repo: Path, repeats: int, concurrency: int, daemon_dir: Path | None = None) -> dict:
    """One fresh run and one unchanged rerun of `repo`'s nel, with the requests each sent."""
    with tempfile.TemporaryDirectory() as out:
        args = ["eval", "run", "-b", "gsm8k", "-n", str(repeats), "--model-url", url,
                "--model-id", "m", "--max-concurrent", str(concurrency), "-o", out,
                "--no-progress", "--json"]
        first = run_nel(args, repo, daemon_dir)
        st = stats(url)
        sent = st["by_endpoint"].get(CHAT, 0)
        # The loop phase, as the server saw it: first to last model request.
        loop = st["last_at"][CHAT] - st["first_at"][CHAT] if sent else 0.0
        to_first = st["first_at"][CHAT] - first["started"] if sent else 0.0
        # The tail: from the last model request to the process's exit (statistics, exports,
        # Dagster's recording, interpreter shutdown), all of which the user waits for.
        to_last = st["last_at"][CHAT] - first["started"] if sent else 0.0
        reset(url)
        again = run_nel(args, repo, daemon_dir)
        sent2 = stats(url)["total_requests"]
        reset(url)
    return {"wall": first["wall"], "cpu": first["cpu"], "rss": first["rss"], "tree_pss": first["tree_pss"],
            "sent": sent, "loop": loop,
            "first": to_first, "to_last": to_last, "tail": first["wall"] - to_last, "wall2": again["wall"], "cpu2": again["cpu"], "sent2": sent2,
            "after_exit": first["after_exit"], "after_exit_rss": first["after_exit_rss"],
            "shards2": again["summary"]["shards_run"], "score": first["summary"]["results"][0]["score"]}


def summarize(n: int, bare: list[float], rounds: list[dict], bare_proc: list[float]) -> dict:
    """Medians over the rounds; ratios are taken per round against that round's bare loops."""
    med = statistics.median
    return {
        "nel_end_to_end_samples_per_s": round(med(n / r["wall"] for r in rounds), 1),
        # no bare loop ran (--no-bare): no ratio
        "ratio_nel_over_bare": round(med(b / r["wall"] for b, r in zip(bare, rounds, strict=True)), 3)
        if all(bare) else None,
        # the yardstick: the bare loop as a process that also scores and writes rows
        "ratio_nel_over_bare_process": round(med(b / r["wall"] for b, r in zip(bare_proc, rounds, strict=True)), 3)
        if all(bare_proc) else None,
        "nel_wall_s": round(med(r["wall"] for r in rounds), 2),
        "nel_cpu_ms_per_sample": round(med(1000 * r["cpu"] / n for r in rounds), 4),
        "nel_loop_us_per_sample": round(med(1e6 * r["loop"] / n for r in rounds), 1),
        "nel_first_request_s": round(med(r["first"] for r in rounds), 3),
        "nel_to_last_request_s": round(med(r["to_last"] for r in rounds), 3),
        "nel_tail_after_last_request_s": round(med(r["tail"] for r in rounds), 3),
        # nel's background Dagster recording: how long it went on after the command returned
        # (its CPU is in nel_cpu_ms_per_sample) and its peak RSS
        "nel_recording_after_exit_s": round(med(r["after_exit"] for r in rounds), 3),
        "nel_recording_peak_rss_mb": round(med(r["after_exit_rss"] for r in rounds), 1),
        "nel_peak_rss_mb": round(med(r["rss"] for r in rounds), 1),
        # nel and its forks together (sampled PSS; 0 where /proc has no smaps_rollup)
        "nel_tree_peak_pss_mb": round(med(r["tree_pss"] for r in rounds), 1),
        "nel_model_requests_sent": [r["sent"] for r in rounds],
        "rerun_wall_s": round(med(r["wall2"] for r in rounds), 2),
        "rerun_cpu_s": round(med(r["cpu2"] for r in rounds), 2),
        "rerun_requests_sent": [r["sent2"] for r in rounds],
        "rerun_shards_run": [r["shards2"] for r in rounds],
        "score": rounds[0]["score"],
    }


def versus(ours: list[dict], theirs: list[dict]) -> dict:
    """This checkout's figures as ratios of the baseline's, per round (the two ran in the
    same round, one after the other), then the median: below 1 means this checkout is lower."""
    def ratio(key: str) -> float:
        return round(statistics.median(o[key] / t[key] for o, t in zip(ours, theirs, strict=True)
                                       if t[key] > 0), 3)

    return {"wall": ratio("wall"), "to_last_request": ratio("to_last"), "tail": ratio("tail"),
            "peak_rss": ratio("rss"), "cpu": ratio("cpu"), "rerun_wall": ratio("wall2")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=8, help="GSM8K repeats (1,319 problems each)")
    ap.add_argument("--samples", type=int, default=None,
                    help="at least this many samples (the repeats of GSM8K that reach it; overrides --repeats)")
    ap.add_argument("--no-bare", action="store_true",
                    help="skip the bare aiohttp loop (a 1,000,000-sample run measures nel's memory and wall, "
                         "not the ratio)")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3, help="alternating bare/nel rounds (medians)")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="another checkout whose nel runs in the same rounds (e.g. /work/main)")
    ap.add_argument("--daemon", action="store_true",
                    help="also run this checkout's nel through a nel daemon (`nel daemon start`), "
                         "started once before the rounds, in each round")
    a = ap.parse_args()
    if a.baseline is not None and not (a.baseline / "dagster_project" / "cli" / "main.py").is_file():
        raise SystemExit(f"--baseline {a.baseline}: not a nel checkout (no dagster_project/cli/main.py)")
    for repo in (REPO, a.baseline) if a.baseline is not None else (REPO,):
        precompile(repo)
    become_subreaper()
    env = get_benchmark("gsm8k")
    if a.samples is not None:
        a.repeats = -(-a.samples // len(env))  # the fewest whole repeats that reach --samples
    n = len(env) * a.repeats
    proc, url = start_reference_server(default_content="Step by step.\n#### 42")
    bare: list[float] = []
    bare_proc: list[float] = []
    ours: list[dict] = []
    theirs: list[dict] = []
    warm: list[dict] = []
    daemon_dir = Path(tempfile.mkdtemp(prefix="nel-bench-daemon-")) if a.daemon else None
    if daemon_dir is not None:
        daemon(REPO, daemon_dir, "start")
    try:
        seeds = [asyncio.run(env.seed(i)) for i in range(len(env))]
        bodies = [] if a.no_bare else [
            orjson.dumps({"model": "m", "messages": [{"role": "user", "content": s.prompt}]})
            for s in seeds] * a.repeats
        for i in range(a.rounds):
            bare.append(0.0 if a.no_bare else asyncio.run(bare_loop(url, bodies, a.concurrency)))
            reset(url)
            bare_proc.append(0.0 if a.no_bare else bare_process(url, a.repeats, a.concurrency))
            reset(url)
            if a.baseline is None:
                ours.append(nel_round(url, REPO, a.repeats, a.concurrency))
            elif i % 2 == 0:  # alternate which checkout runs first in a round
                ours.append(nel_round(url, REPO, a.repeats, a.concurrency))
                theirs.append(nel_round(url, a.baseline, a.repeats, a.concurrency))
            else:
                theirs.append(nel_round(url, a.baseline, a.repeats, a.concurrency))
                ours.append(nel_round(url, REPO, a.repeats, a.concurrency))
            if daemon_dir is not None:
                warm.append(nel_round(url, REPO, a.repeats, a.concurrency, daemon_dir))
    finally:
        proc.stop()
        if daemon_dir is not None:
            daemon(REPO, daemon_dir, "stop", "--all")  # whatever code it was started from
    res = {
        "samples": n,
        "rounds": a.rounds,
        "bare_aiohttp_samples_per_s": None if a.no_bare else round(statistics.median(n / b for b in bare), 1),
        "bare_process_samples_per_s": None if a.no_bare else round(statistics.median(n / b for b in bare_proc), 1),
        "bare_process_wall_s": None if a.no_bare else round(statistics.median(bare_proc), 2),
        **summarize(n, bare, ours, bare_proc),
    }
    if warm:
        res["daemon"] = summarize(n, bare, warm, bare_proc)
    if a.baseline is not None:
        res["baseline"] = {"checkout": str(a.baseline.resolve()), **summarize(n, bare, theirs, bare_proc)}
        res["vs_baseline"] = versus(ours, theirs)
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
