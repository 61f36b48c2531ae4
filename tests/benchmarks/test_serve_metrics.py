"""`/aggregate_metrics` (benchmarks/serve_metrics.py): linear in the rollouts, bounded, exact.

The summary once computed pass@k for each k on its own, quadratic in the rollouts of a task
(4,000 rollouts of one task: 105 s, in a thread nothing could stop). The scaling tests time
n and 10n rollouts in the same process and allow 30x (linear is ~10x, quadratic ~100x);
the reference test checks the vectorised numbers against a plain per-task computation.
"""

from __future__ import annotations

import math
import random
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from benchmarks import serve_metrics
from benchmarks.serve_metrics import aggregate_metrics

REPO = Path(__file__).resolve().parents[2]
# 10x the rollouts may take at most this many times as long.
MAX_RATIO = 30.0
HANG_S = 120.0

_CHILD = """
import sys, time
from benchmarks.serve_metrics import aggregate_metrics
one_task = sys.argv[1] == "one_task"
for n in (4_000, 40_000):
    body = {"verify_responses": [
        {"reward": float(i % 3 == 0), "_ng_task_index": 0 if one_task else i,
         "_ng_rollout_index": i if one_task else 0, "tokens": i % 50}
        for i in range(n)]}
    aggregate_metrics({"verify_responses": body["verify_responses"][:50]})  # warm up
    t0 = time.perf_counter()
    out = aggregate_metrics(body)
    print(n, time.perf_counter() - t0, len(out["group_level_metrics"]), flush=True)
"""


def _scaling(shape: str) -> tuple[float, float]:
    """(seconds for 4,000 rollouts, for 40,000), timed in one child process.

    The child is killed once the larger input has had MAX_RATIO times the smaller one's
    time (a quadratic summary needs hours there), or HANG_S: that is the failure, named.
    """
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, shape], cwd=REPO,
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().split()
        assert first, "the child printed nothing"
        small = float(first[1])
        budget = min(max(MAX_RATIO * small, 5.0), HANG_S)
        try:
            out, _ = proc.communicate(timeout=budget)
        except subprocess.TimeoutExpired:
            pytest.fail(f"40,000 rollouts ({shape}) took over {budget:.1f} s, "
                        f"4,000 took {small:.2f} s: not linear")
        large = float(out.split()[1])
        return small, large
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("shape", ["one_task", "one_rollout_per_task"])
def test_ten_times_the_rollouts_take_about_ten_times_as_long(shape: str) -> None:
    small, large = _scaling(shape)
    assert large < MAX_RATIO * max(small, 0.005), (shape, small, large)


def _reference(items: list[dict[str, Any]]) -> dict[str, Any]:
    """The summary computed the plain way: per task, per field, with `statistics`."""
    tasks: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for item in items:
        tasks[item.get("_ng_task_index", 0)].append(item)

    def numbers(item: dict[str, Any]) -> dict[str, float]:
        out = {k: float(v) for k, v in item.get("response", {}).get("usage", {}).items()}
        out.update({k: float(v) for k, v in item.items()
                    if k not in ("_ng_task_index", "_ng_rollout_index", "response")})
        return out

    def describe(rows: list[dict[str, float]]) -> dict[str, float]:
        out: dict[str, float] = {}
        for name in sorted({k for r in rows for k in r}):
            vals = [r[name] for r in rows if name in r]
            out.update({f"mean/{name}": statistics.fmean(vals), f"max/{name}": max(vals),
                        f"min/{name}": min(vals), f"median/{name}": statistics.median(vals),
                        f"std/{name}": statistics.stdev(vals) if len(vals) > 1 else 0.0})
        return out

    groups = {t: describe([numbers(i) for i in rows]) for t, rows in sorted(tasks.items())}
    agent = describe([numbers(i) for i in items])
    per_task = {t: [i["reward"] for i in rows] for t, rows in tasks.items()}
    means = [statistics.fmean(r) for r in per_task.values()]
    agent["n_tasks"], agent["n_rollouts"] = float(len(tasks)), float(len(items))
    if len(means) > 1:
        se = statistics.stdev(means) / math.sqrt(len(means))
        agent["stderr/reward"] = se
    if all(r in (0.0, 1.0) for r in (i["reward"] for i in items)):
        for k in range(1, min(len(r) for r in per_task.values()) + 1):
            agent[f"pass@{k}/reward"] = statistics.fmean(
                1 - math.comb(len(r) - int(sum(r)), k) / math.comb(len(r), k)
                for r in per_task.values())
    return {"groups": groups, "agent": agent}


def test_numbers_match_a_plain_computation() -> None:
    rng = random.Random(7)
    for _ in range(60):
        binary = rng.random() < 0.6
        items = []
        for _ in range(rng.randint(1, 30)):
            item: dict[str, Any] = {
                "reward": float(rng.random() < 0.5) if binary else rng.choice([0.25, 1.0, 3.5, -2.0]),
                "_ng_task_index": rng.randrange(5) - 1,
                "_ng_rollout_index": rng.randrange(8),
            }
            if rng.random() < 0.5:
                item["tokens"] = rng.randint(0, 100)
            if rng.random() < 0.3:
                item["response"] = {"usage": {"input_tokens": rng.randint(1, 9)}}
            items.append(item)
        got = aggregate_metrics({"verify_responses": items})
        want = _reference(items)
        groups = {g["_ng_task_index"]: g for g in got["group_level_metrics"]}
        assert list(groups) == list(want["groups"])
        for task, stats in want["groups"].items():
            got_stats = {k: v for k, v in groups[task].items() if "/" in k}
            assert got_stats.keys() == stats.keys()
            for key, value in stats.items():
                assert got_stats[key] == pytest.approx(value, rel=1e-9, abs=1e-12), (task, key)
        for key, value in want["agent"].items():
            assert got["agent_metrics"][key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
        pass_keys = {k for k in got["agent_metrics"] if k.startswith("pass@")}
        assert pass_keys == {k for k in want["agent"] if k.startswith("pass@")}


def test_work_stops_at_its_time_limit() -> None:
    body = {"verify_responses": [{"reward": 1.0, "_ng_task_index": i} for i in range(20_000)]}
    started = time.monotonic()
    with pytest.raises(serve_metrics.AggregateTimeout, match="time limit"):
        aggregate_metrics(body, timeout=0.0)
    assert time.monotonic() - started < 5.0


def test_too_many_rollouts_are_refused_before_any_work(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serve_metrics, "MAX_ROLLOUTS", 10)
    with pytest.raises(serve_metrics.TooManyRollouts, match="11 rollouts in one request, more than the limit of 10"):
        aggregate_metrics({"verify_responses": [{"reward": 1.0}] * 11})
