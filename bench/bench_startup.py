"""Fixed costs of nel, in one command: start-up to the first request, `nel --help`,
`nel list`, an unchanged rerun, statistics on a 100,000-row bundle, peak RSS.

* first request: wall time from spawning `nel eval run -b gsm8k -m 5` to the first
  `/v1/chat/completions` request arriving at an instant local reference server (the server
  records the arrival time), next to NeMo Evaluator 0.3.0's own CLI (`--peer`, default
  `.venv-peers/nemo-evaluator/bin/nel`) running the same 5 GSM8K problems (a BYOB file over
  the same test.jsonl) against the same server; the two alternate round by round.
* `nel --help`, `nel list`: wall time of the whole child process.
* unchanged rerun: GSM8K 1,319 x 8 = 10,552 samples; the first run fills the store, each
  rerun must send 0 requests.
* stats: `build_bundle` (means, clustered SE, pass@k, maj@k, per category, runtime and
  failure analysis) on a synthetic 100,000-row table (25,000 items x 4 repeats), in-process.
* peak RSS: `ru_maxrss` of each child (os.wait4).
* `--daemon`: this checkout once more, as `nel (daemon)`: its `nel eval run`s handed to a
  `nel daemon` started before the rounds (its RSS: the larger of the caller's and the
  run's, the daemon's fork, as `nel daemon status --json` reports it).

Every figure is the median of `--rounds` alternating rounds. Prints a table and, with
`--json`, the raw figures.

    NEL_DATA_DIR=../shared/datasets python bench/bench_startup.py --rounds 5 [--baseline DIR]
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
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench_eval_throughput import daemon_last_run, precompile  # noqa: E402  (bench/ is on sys.path)

from bench.support.orphans import become_subreaper, own_children, reap_new  # noqa: E402
from nel_resources.reference_server import start_reference_server  # noqa: E402

CHAT = "/v1/chat/completions"
PEER_BENCH = '''
from nemo_evaluator import ScorerInput, benchmark, exact_match, scorer


@benchmark(name="gsm8k_local", dataset={dataset!r}, prompt="{{question}}", target_field="answer")
@scorer
def check(sample: ScorerInput) -> dict:
    return exact_match(sample)
'''
# Variables of nel's test suite that would change what either tool selects.
# PYTHONDONTWRITEBYTECODE too: a user's nel runs from cached bytecode (a warm start).
_UNSET = ("NEL_SHUFFLE_SEED", "NEL_SHARD_IDX", "NEL_TOTAL_SHARDS", "DAGSTER_HOME", "PYTHONDONTWRITEBYTECODE")


def _server(url: str, path: str, post: bool = False) -> dict[str, Any]:
    req = urllib.request.Request(url.removesuffix("/v1") + path, method="POST" if post else "GET")
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read())


def _child(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, int]:
    """Run a child to completion; returns (wall s, its peak RSS in MB, the time it started)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        before = own_children()
        t0 = time.time()
        p = subprocess.Popen(argv, stdout=out, stderr=err, env=env, cwd=cwd, start_new_session=True)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.time() - t0
        reap_new(before)  # nel's background recording: not in the figures, nor in the next one
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            err.seek(0)
            out.seek(0)
            raise SystemExit(f"{argv[:4]} exited {p.returncode}:\n{out.read()[-2000:]!r}\n{err.read()[-3000:]!r}")
    return wall, usage.ru_maxrss / 1024, int(t0 * 1e6)


def _nel_env(repo: Path = REPO, daemon_dir: Path | None = None) -> dict[str, str]:
    """The environment of a nel child: in-process (NEL_DAEMON=off), or through the daemon
    whose sockets are in `daemon_dir`."""
    env = {k: v for k, v in os.environ.items() if k not in _UNSET}
    env["PYTHONPATH"] = str(repo)
    if daemon_dir is None:
        env["NEL_DAEMON"] = "off"
    else:
        env["NEL_DAEMON_DIR"] = str(daemon_dir)
    return env


def _peer_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in (*_UNSET, "PYTHONPATH")}


def nel_cmd(*args: str) -> list[str]:
    """`nel ARGS` of the checkout on PYTHONPATH (what the installed console script runs)."""
    return [sys.executable, "-c", "import sys; from dagster_project.cli.main import main; sys.exit(main())", *args]


def first_request(argv: list[str], env: dict[str, str], url: str, cwd: Path) -> dict[str, float]:
    """Seconds from spawning `argv` to its first chat request at the server, its wall time and RSS."""
    _server(url, "/stats/reset", post=True)
    wall, rss, t0_us = _child(argv, env, cwd)
    if "NEL_DAEMON_DIR" in env:
        rss = max(rss, daemon_last_run(REPO, env)["maxrss_mb"])
    first = _server(url, "/stats")["first_at"].get(CHAT)
    if first is None:
        raise SystemExit(f"{argv[:4]} sent no chat request")
    return {"first_s": first - t0_us / 1e6, "wall_s": wall, "rss_mb": rss}


# nel's real statistics (build_bundle: means, clustered SE, pass@k, maj@k, per category,
# runtime and failure analysis) on a synthetic 100,000-row table, timed in a child of the
# checkout under test; prints the median seconds of ROUNDS calls and the row count.
_STATS = """
import statistics, sys, time
try:
    from nel_assets.engine.results.bundle import build_bundle
    from nel_resources.storage.schema import rows_to_table
except ImportError:  # a baseline checkout from before the modules were grouped by concept
    from nel_assets.engine.bundle import build_bundle
    from nel_resources.schema import rows_to_table
rounds, repeats = int(sys.argv[1]), 4
rows = [{"run_id": "r", "benchmark": "b", "model": "m", "model_id": "m", "shard": i % 8,
         "problem_idx": i // repeats, "repeat": i % repeats, "sample_id": f"{i // repeats}:{i % repeats}",
         "category": f"c{(i // repeats) % 7}", "prompt": "p", "expected": "4",
         "response": "The answer is 4." if i % 3 else "5", "reward": float(i % 3 != 0),
         "extracted": "4", "method": "last_number", "finish_reason": "stop",
         "failure_category": "timeout" if i % 997 == 0 else None,
         "error": "timed out" if i % 997 == 0 else None,
         "prompt_tokens": 60, "completion_tokens": 12, "model_ms": 10.0 + i % 7, "total_ms": 10.5 + i % 7,
         "attempts": 1, "timestamp": 1.7e9 + i / 100} for i in range(100_000)]
table = rows_to_table(rows)
times = []
for _ in range(rounds):
    t0 = time.perf_counter()
    b = build_bundle(table, benchmark="b", model="m")
    times.append(time.perf_counter() - t0)
print(statistics.median(times), b["score"]["n_samples"])
"""


def stats_100k(rounds: int, repo: Path = REPO) -> tuple[float, int]:
    """Median seconds of nel's bundle statistics over a synthetic 100,000-row table."""
    p = subprocess.run([sys.executable, "-c", _STATS, str(rounds)], capture_output=True, text=True,
                       env=_nel_env(repo), cwd=repo, check=True)
    s, n = p.stdout.split()
    return float(s), int(n)


def import_summary(module: str, top: int = 8) -> list[tuple[str, float]]:
    """`python -X importtime -c 'import MODULE'`: the packages it pulls in, by the cumulative
    ms of each place another package imports them (top `top`, largest first)."""
    p = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"],
                       capture_output=True, text=True, env=_nel_env(), cwd=REPO)
    per_pkg: dict[str, float] = {}
    # Lines come children first; a line's children are the deeper lines just before it.
    pending: list[tuple[int, str, float]] = []  # (depth, package, cumulative ms)
    for line in p.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cum_us, raw = line.split("|")
        name = raw[1:]
        depth = (len(name) - len(name.lstrip())) // 2
        pkg = name.strip().split(".")[0]
        while pending and pending[-1][0] > depth:
            _, child, ms = pending.pop()
            if child != pkg:  # an entry into another package: what that package costs here
                per_pkg[child] = per_pkg.get(child, 0.0) + ms
        pending.append((depth, pkg, int(cum_us) / 1000))
    for _, pkg, ms in pending:
        per_pkg[pkg] = per_pkg.get(pkg, 0.0) + ms
    return sorted(per_pkg.items(), key=lambda kv: -kv[1])[:top]


def _targets(baseline: str | None) -> dict[str, Path]:
    """The nel checkouts measured: this one, and the `--baseline` one (e.g. a `git worktree`
    of the commit before a change), alternated in every round."""
    return {"nel": REPO, **({"nel (baseline)": Path(baseline).resolve()} if baseline else {})}


def _print_table(res: dict[str, Any], names: list[str], a: argparse.Namespace) -> None:
    """The figures as a Markdown table (a column per checkout and the peer), the import
    times, and with `--json` the raw figures."""
    rows: list[tuple[str, ...]] = []

    def cell(key: str, fmt: Any) -> str:
        return fmt(res[key]) if key in res else "-"

    rows.append(("first request after start, -m 5 (range)", *(cell(
        f"first_request {n}", lambda d: f"{d['first_s']:.2f} s ({d['range'][0]:.2f}-{d['range'][1]:.2f})") for n in names)))
    rows.append(("whole -m 5 run / its peak RSS", *(cell(
        f"first_request {n}", lambda d: f"{d['wall_s']:.2f} s / {d['rss_mb']:.0f} MB") for n in names)))
    for cmd in ("--help", "list"):
        rows.append((f"nel {cmd}", *(cell(f"{n} {cmd}", lambda d: f"{d['wall_s']:.3f} s") for n in names)))
    rows.append((f"first run, GSM8K x{a.repeats}: wall / peak RSS", *(cell(
        f"full_run {n}", lambda d: f"{d['wall_s']:.2f} s / {d['rss_mb']:.0f} MB ({d['samples']} requests)")
        for n in names)))
    rows.append(("unchanged rerun: wall / peak RSS / requests", *(cell(
        f"unchanged_rerun {n}", lambda d: f"{d['wall_s']:.3f} s / {d['rss_mb']:.0f} MB / {max(d['requests'])}")
        for n in names)))
    rows.append(("stats, 100,000-row bundle", *(cell(f"stats_100k {n}", lambda d: f"{d['s']:.3f} s") for n in names)))
    print(f"medians of {a.rounds} alternating rounds")
    print("| | " + " | ".join(names) + " |\n|---|" + "---|" * len(names))
    print("\n".join("| " + " | ".join(r) + " |" for r in rows))
    print("\npython -X importtime -c 'import M': cumulative ms of the packages M pulls in")
    for key in (k for k in res if k.startswith("import_ms ")):
        print(f"  {key.split()[1]}: " + ", ".join(f"{k} {v:.0f}" for k, v in res[key]))
    if a.json:
        print(json.dumps(res, indent=2))


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds (medians)")
    ap.add_argument("--repeats", type=int, default=8, help="GSM8K repeats of the rerun check (x1,319)")
    ap.add_argument("--peer", default=str(REPO / ".venv-peers" / "nemo-evaluator" / "bin" / "nel"),
                    help="NeMo Evaluator 0.3.0's `nel` executable (skipped if missing)")
    ap.add_argument("--baseline", metavar="DIR",
                    help="another nel checkout measured in the same rounds (e.g. `git worktree add "
                    "/tmp/before <commit>`)")
    ap.add_argument("--json", action="store_true", help="print the raw figures as JSON too")
    ap.add_argument("--daemon", action="store_true",
                    help="also measure this checkout's runs handed to a `nel daemon`")
    return ap


def main() -> None:
    a = _parser().parse_args()
    become_subreaper()  # so `_child` can wait for what a run leaves running (its recording)
    data_dir = os.environ.get("NEL_DATA_DIR")
    if not data_dir:
        raise SystemExit("set NEL_DATA_DIR to the shared datasets (gsm8k/test.jsonl)")
    peer = Path(os.environ.get("NEL_PEER_NEMO") or a.peer)
    targets = _targets(a.baseline)
    for repo in set(targets.values()):
        precompile(repo)  # a checkout without bytecode would compile on every run
    daemons: dict[str, Path] = {}
    if a.daemon:
        targets["nel (daemon)"] = REPO
        daemons["nel (daemon)"] = Path(tempfile.mkdtemp(prefix="nel-bench-daemon-"))
        subprocess.run(nel_cmd("daemon", "start"), env=_nel_env(REPO, daemons["nel (daemon)"]), check=True,
                       capture_output=True)

    def env_of(name: str) -> dict[str, str]:
        return _nel_env(targets[name], daemons.get(name))

    med = statistics.median
    res: dict[str, Any] = {}
    proc, url = start_reference_server(default_content="Step by step.\n#### 42")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            bench_file = work / "gsm8k_local.py"
            bench_file.write_text(PEER_BENCH.format(dataset=str(Path(data_dir) / "gsm8k" / "test.jsonl")))

            def quick(out: Path) -> list[str]:
                return nel_cmd("eval", "run", "-b", "gsm8k", "-m", "5", "--model-url", url, "--model-id", "m",
                               "-o", str(out), "--no-progress")

            def peer_quick(out: Path) -> list[str]:
                return [str(peer), "eval", "run", "--bench", str(bench_file), "--model-url", url,
                        "--model-id", "m", "-o", str(out), "--max-problems", "5"]

            # Warm-up (not measured): bytecode caches and the disk cache, as on a user's machine.
            for name in targets:
                _child(quick(work / f"warm-{len(name)}"), env_of(name), work)
                _child(nel_cmd("list"), env_of(name), work)
            if peer.is_file():
                _child(peer_quick(work / "peer-warm"), _peer_env(), work)
            runs: dict[str, list[dict[str, float]]] = {name: [] for name in [*targets, "NeMo Evaluator 0.3.0"]}
            cli: dict[str, list[tuple[float, float]]] = {}
            for r in range(a.rounds):
                # A new output dir per round: each run is a first run (a fresh store).
                for i, name in enumerate(targets):
                    runs[name].append(first_request(quick(work / f"nel{i}-{r}"), env_of(name), url, work))
                    for cmd in ("--help", "list") if name not in daemons else ():  # never handed over
                        w, rss, _ = _child(nel_cmd(cmd), env_of(name), work)
                        cli.setdefault(f"{name} {cmd}", []).append((w, rss))
                if peer.is_file():
                    runs["NeMo Evaluator 0.3.0"].append(first_request(peer_quick(work / f"peer{r}"), _peer_env(), url, work))
            for who, rs in runs.items():
                if rs:
                    res[f"first_request {who}"] = {k: round(med(x[k] for x in rs), 3) for k in rs[0]}
                    res[f"first_request {who}"]["range"] = [round(min(x["first_s"] for x in rs), 3),
                                                            round(max(x["first_s"] for x in rs), 3)]
            for k, v in cli.items():
                res[k] = {"wall_s": round(med(x[0] for x in v), 3), "rss_mb": round(med(x[1] for x in v), 1)}

            # Unchanged rerun of 10,552 samples: one filling run per checkout, then alternating reruns.
            def big(out: Path) -> list[str]:
                return nel_cmd("eval", "run", "-b", "gsm8k", "-n", str(a.repeats), "--model-url", url,
                               "--model-id", "m", "--max-concurrent", "64", "-o", str(out), "--no-progress")

            reruns: dict[str, list[tuple[float, float, int]]] = {name: [] for name in targets}
            for i, name in enumerate(targets):
                _server(url, "/stats/reset", post=True)
                w, rss, _ = _child(big(work / f"big{i}"), env_of(name), work)
                if name in daemons:
                    rss = max(rss, daemon_last_run(REPO, env_of(name))["maxrss_mb"])
                res[f"full_run {name}"] = {"samples": _server(url, "/stats")["by_endpoint"].get(CHAT, 0),
                                           "wall_s": round(w, 2), "rss_mb": round(rss, 1)}
            for _ in range(a.rounds):
                for i, name in enumerate(targets):
                    _server(url, "/stats/reset", post=True)
                    w, rss, _ = _child(big(work / f"big{i}"), env_of(name), work)
                    if name in daemons:
                        rss = max(rss, daemon_last_run(REPO, env_of(name))["maxrss_mb"])
                    reruns[name].append((w, rss, _server(url, "/stats")["total_requests"]))
            for name, xs in reruns.items():
                res[f"unchanged_rerun {name}"] = {"wall_s": round(med(x[0] for x in xs), 3),
                                                  "rss_mb": round(med(x[1] for x in xs), 1),
                                                  "requests": [x[2] for x in xs]}
    finally:
        proc.stop()
        for d in daemons.values():
            subprocess.run(nel_cmd("daemon", "stop", "--all"), env=_nel_env(REPO, d), capture_output=True)
    for name, repo in targets.items():
        if name in daemons:
            continue  # in-process statistics: the same code as `nel`
        s, n = stats_100k(a.rounds, repo)
        res[f"stats_100k {name}"] = {"rows": n, "s": round(s, 3)}
    for module in ("dagster_project.cli.main", "dagster_project.runner", "dagster"):
        res[f"import_ms {module}"] = [(k, round(v, 1)) for k, v in import_summary(module)]

    _print_table(res, [*targets, "NeMo Evaluator 0.3.0"], a)


if __name__ == "__main__":
    main()
