"""NeMo Evaluator 0.3.0's result files, built from nel's stored rows.

A NeMo Evaluator run leaves one directory per benchmark, `<out>/<bench>/`, holding
`eval-<YYYYmmddTHHMMSSZ>-<bench>.json` (the bundle), `results.jsonl`, `trajectories.jsonl`,
`runtime_stats.json` and, only when some step failed, `failure_analysis.json`. Its `compare`,
`gate`, `eval report` and `eval merge` read those names and keys, and so do dashboards built
on them. The functions here turn a (benchmark, model)'s Parquet rows and nel bundle into the
same documents: every key 0.3.0 writes, with its shape, plus nel's own keys next to them
(nel may add keys, never rename or drop theirs). The key lists below are what the tests
check against a run of the real NeMo Evaluator. No Dagster import.

Where nel and 0.3.0 disagree on a number, the file carries nel's (a failed request is an
error, not a wrong answer; intervals are nel's), and the README says so.
"""

from __future__ import annotations

import functools
import hashlib
import re
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:  # numpy/pyarrow load where rows are scored or written, not where artifacts are checked
    import numpy as np
    import pyarrow as pa

FORMAT_VERSION = "0.3.0"
"""The NeMo Evaluator release whose files these are; written as the bundle's `sdk_version`
(readers gate on it), with nel's own version in `generator`."""

ATIF_VERSION = "ATIF-v1.6"

BUNDLE_KEYS = ("run_id", "config_hash", "sdk_version", "timestamp", "config", "benchmark", "n_results")
BENCHMARK_KEYS = ("name", "samples", "repeats", "scores")
RESULT_KEYS = ("problem_idx", "repeat", "reward", "scorer_rewards", "prompt", "model_response",
               "extracted_answer", "expected_answer", "scoring_details", "metadata", "tokens",
               "latency_ms")
TRAJECTORY_KEYS = ("step_id", "problem_idx", "repeat", "timestamp", "prompt", "expected_answer",
                   "reward", "extracted_answer", "scoring_method", "scoring_details", "seed_metadata",
                   "timing", "failure_category", "retries")
TRAJECTORY_MODEL_KEYS = ("content", "model", "finish_reason", "tokens", "latency_ms", "request_hash",
                         "response_hash")
RUNTIME_KEYS = ("total_steps", "total_tokens", "total_prompt_tokens", "total_completion_tokens",
                "total_reasoning_tokens", "elapsed_seconds", "latency_percentiles_ms",
                "tokens_per_second", "steps_per_second", "model_errors", "total_retries",
                "finish_reason_counts")
FAILURE_KEYS = ("total_steps", "total_failures", "failure_rate", "categories")
FAILURE_CATEGORY_KEYS = ("count", "percentage", "exemplars")

# nel's own per-row keys, kept next to 0.3.0's in results.jsonl (nel's readers and older
# dashboards of nel use them).
NEL_RESULT_KEYS = ("sample_id", "shard", "category", "expected", "response", "extracted", "method",
                   "failure_category", "error", "finish_reason", "model_ms", "total_ms",
                   "prompt_tokens", "completion_tokens")

_FAILED_DETAILS = {"error_category": "infra_error", "method": "infra_error"}


def safe_name(benchmark: str) -> str:
    """The benchmark name as 0.3.0 puts it in file names and run ids."""
    return re.sub(r"[^a-zA-Z0-9_.-]", "_", benchmark)


def run_id(benchmark: str, created_at: float) -> str:
    """`eval-<UTC timestamp>-<bench>`: the bundle's `run_id` and its file's stem."""
    return f"eval-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(created_at))}-{safe_name(benchmark)}"


def config_hash(config: dict[str, Any]) -> str:
    """`sha256:<hex>` over the settings 0.3.0 hashes (model, sampling, prompt, selection)."""
    keys = ("model", "model_url", "temperature", "max_tokens", "top_p", "seed", "system_prompt",
            "benchmark", "repeats", "max_problems", "shuffle_seed")
    subset = {k: config.get(k) for k in keys if config.get(k) is not None}
    return "sha256:" + hashlib.sha256(orjson.dumps(subset, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _r(x: Any, nd: int = 2) -> float:
    return 0.0 if x is None or x != x else round(float(x), nd)  # x != x: NaN


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _tokens(row: dict[str, Any]) -> int:
    return int(row.get("prompt_tokens") or 0) + int(row.get("completion_tokens") or 0)


def atif(row: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The step's ATIF-v1.6 trajectory (system, user, agent), as 0.3.0's chat solver records
    it; None for a failed request (0.3.0 has no trajectory then either). An agentic row
    (`steps` stored by a tool-calling solver) has every model turn and tool result, failed
    or not: what the agent did before it failed is the point."""
    if row.get("steps"):
        return _agentic_atif(row)
    if row.get("error") is not None:
        return None
    steps: list[dict[str, Any]] = []
    if row.get("system"):
        steps.append({"source": "system", "message": row["system"]})
    steps.append({"source": "user", "message": row.get("prompt") or ""})
    agent: dict[str, Any] = {"source": "agent", "message": row.get("response") or "",
                             "model_name": row.get("model_id")}
    if row.get("reasoning"):
        agent["reasoning_content"] = row["reasoning"]
    pt, ct = row.get("prompt_tokens"), row.get("completion_tokens")
    if pt is not None and ct is not None:
        agent["metrics"] = {"prompt_tokens": pt, "completion_tokens": ct}
    steps.append(agent)
    for i, s in enumerate(steps, start=1):
        s["step_id"] = i
    final: dict[str, Any] = {"total_steps": len(steps)}
    if pt is not None and ct is not None:
        final.update(total_prompt_tokens=pt, total_completion_tokens=ct)
    # A stable session id (not a random one): a rebuild from the store writes the same file.
    session = _short_hash(f"{row.get('run_id')}:{row.get('sample_id')}")
    return [{"schema_version": ATIF_VERSION, "session_id": session,
             "agent": {"name": "nel", "version": _nel_version(), "model_name": row.get("model_id")},
             "steps": steps, "final_metrics": final}]


def _agentic_atif(row: dict[str, Any]) -> list[dict[str, Any]]:
    steps = orjson.loads(row["steps"])
    final: dict[str, Any] = {"total_steps": len(steps), "total_turns": row.get("turns"),
                             "total_tool_calls": row.get("tool_calls")}
    pt, ct = row.get("prompt_tokens"), row.get("completion_tokens")
    if pt is not None and ct is not None:
        final.update(total_prompt_tokens=pt, total_completion_tokens=ct)
    session = _short_hash(f"{row.get('run_id')}:{row.get('sample_id')}")
    out: dict[str, Any] = {"schema_version": ATIF_VERSION, "session_id": session,
                           "agent": {"name": "nel-tool-calling", "version": _nel_version(),
                                     "model_name": row.get("model_id")},
                           "steps": steps, "final_metrics": final}
    if row.get("error") is not None:
        out["status"] = "error"
    return [out]


def _details(row: dict[str, Any]) -> tuple[Any, dict[str, Any] | None]:
    """(scoring_details as written, parsed dict when it had to be parsed)."""
    if row.get("error") is not None:
        d = {"error": row["error"], **_FAILED_DETAILS, "failure_category": row.get("failure_category")}
        return d, d
    raw = row.get("details")
    if not raw:
        return {}, {}
    # Parsing every row's details costs most of an export's time: only rows carrying extra
    # scorers (`scorer:<name>` keys) are parsed, the rest are spliced in as they are stored.
    if '"scorer:' in raw:
        d = orjson.loads(raw)
        return d, d
    return orjson.Fragment(raw), None


_UNSET: Any = object()


def result_row(row: dict[str, Any], traj: Any = _UNSET) -> dict[str, Any]:
    """One `results.jsonl` line: 0.3.0's keys, then nel's.

    A failed request has `reward` 0.0 here (0.3.0's `eval merge` and `compare` call
    `float(reward)`) and is marked as 0.3.0 marks its own infrastructure failures
    (`scoring_details.error_category = "infra_error"`); nel's `error` and `failure_category`
    keys say what failed, and nel's scores leave it out. `traj` is the row's `atif()` when
    the caller has it already.
    """
    details, parsed = _details(row)
    scorer_rewards = {k: v.get("reward", 0.0) for k, v in (parsed or {}).items()
                      if k.startswith("scorer:") and isinstance(v, dict)}
    out: dict[str, Any] = {
        "problem_idx": row["problem_idx"], "repeat": row["repeat"],
        "reward": 0.0 if row.get("reward") is None else row["reward"],
        "scorer_rewards": scorer_rewards, "prompt": row.get("prompt") or "",
        "model_response": row.get("response") or "", "extracted_answer": row.get("extracted"),
        "expected_answer": row.get("expected"), "scoring_details": details,
        "metadata": orjson.Fragment(row["metadata"]) if row.get("metadata") else {},
        "tokens": _tokens(row), "latency_ms": _r(row.get("model_ms")),
    }
    traj = atif(row) if traj is _UNSET else traj
    if traj is not None:
        out["trajectory"] = traj
    out.update({k: row.get(k) for k in NEL_RESULT_KEYS})
    return out


def trajectory_row(row: dict[str, Any], traj: Any = _UNSET) -> dict[str, Any]:
    """One `trajectories.jsonl` line: 0.3.0's step record, then nel's keys (`traj` as in
    `result_row`)."""
    details, _ = _details(row)
    failed = row.get("error") is not None
    if traj is _UNSET:
        traj = atif(row)
    # the step id is the ATIF session id's head: both stable, derived from run and step
    sid = traj[0]["session_id"] if traj else _short_hash(f"{row.get('run_id')}:{row.get('sample_id')}")
    out: dict[str, Any] = {
        "step_id": sid[:12],
        "problem_idx": row["problem_idx"], "repeat": row["repeat"],
        "timestamp": row.get("timestamp"), "prompt": row.get("prompt") or "",
        "expected_answer": row.get("expected"),
        "reward": 0.0 if row.get("reward") is None else row["reward"],
        "extracted_answer": row.get("extracted"),
        "scoring_method": "infra_error" if failed else (row.get("method") or ""),
        "scoring_details": details,
        "seed_metadata": orjson.Fragment(row["metadata"]) if row.get("metadata") else {},
        "timing": {"seed_ms": _r(row.get("seed_ms")), "model_ms": _r(row.get("model_ms")),
                   "verify_ms": _r(row.get("verify_ms")), "total_ms": _r(row.get("total_ms"))},
        "failure_category": row.get("failure_category"),
        "retries": max(0, int(row.get("attempts") or 1) - 1),
    }
    if not failed:
        prompt, system, content = row.get("prompt") or "", row.get("system") or "", row.get("response") or ""
        out["model"] = {
            "content": content, "model": row.get("model_id") or "",
            "finish_reason": row.get("finish_reason") or "",
            "tokens": {"prompt": row.get("prompt_tokens"), "completion": row.get("completion_tokens"),
                       "total": _tokens(row), "reasoning": row.get("reasoning_tokens")},
            "latency_ms": _r(row.get("model_ms")),
            # 0.3.0's request hash: prompt, system prompt and model, not the response
            "request_hash": _short_hash(f"{prompt}|{system}|{row.get('model_id') or ''}"),
            "response_hash": _short_hash(content),
        }
        out["trajectory"] = traj
    else:
        out["model_error"] = row.get("error")
        if traj is not None:  # an agent's turns before it failed
            out["trajectory"] = traj
    if row.get("system"):
        out["system_prompt"] = row["system"]
    out.update({
        "sample_id": row.get("sample_id"), "messages": orjson.Fragment(_messages(row)),
        "finish_reason": row.get("finish_reason"), "error": row.get("error"),
        "usage": {"prompt_tokens": row.get("prompt_tokens"), "completion_tokens": row.get("completion_tokens"),
                  "reasoning_tokens": row.get("reasoning_tokens")},
        "attempts": row.get("attempts"),
    })
    if row.get("turns") is not None:  # agentic solvers
        out.update(turns=row["turns"], tool_calls=row.get("tool_calls"))
    return out


def _messages(row: dict[str, Any]) -> str:
    """nel's `messages`: the request's messages plus the answer turn, as JSON text (spliced,
    not parsed: the stored messages are already JSON)."""
    msgs = row.get("messages") or "[]"
    if row.get("error") is not None:
        return msgs
    turn: dict[str, Any] = {"role": "assistant", "content": row.get("response")}
    if row.get("reasoning"):
        turn["reasoning_content"] = row["reasoning"]
    head = msgs.rstrip()[:-1].rstrip()
    sep = "" if head.endswith("[") else ","
    return f"{head}{sep}{orjson.dumps(turn).decode()}]"


def runtime_block(table: pa.Table, nel_runtime: dict[str, Any]) -> dict[str, Any]:
    """`runtime_stats.json`: 0.3.0's keys (latency over answered steps, tokens, throughput
    over the run's wall time), then nel's runtime stats.

    `table` holds at least `error`, `model_ms`, the token columns, `attempts` and
    `finish_reason` (a missing one counts as null); the sums come from Arrow's kernels,
    not a Python pass over the rows."""
    import numpy as np
    import pyarrow.compute as pc

    from nel_resources.arrow import pa

    n = table.num_rows
    ok = (table.column("error").is_null() if "error" in table.column_names
          else pa.array(np.ones(n, dtype=bool)))
    n_ok = int(pc.sum(ok).as_py() or 0)

    def column(name: str) -> Any:
        return table.column(name) if name in table.column_names else None

    def ok_int_sum(name: str) -> int:
        """`sum(int(r.get(name) or 0) for r in ok)`"""
        col = column(name)
        if col is None:
            return 0
        if pa.types.is_integer(col.type):
            return int(pc.sum(col.filter(ok)).as_py() or 0)
        return sum(int(v or 0) for v in col.filter(ok).to_pylist())

    ms = column("model_ms")
    lat = (np.asarray(ms.filter(ok).drop_null().to_numpy(), dtype=float).reshape(-1)
           if ms is not None else np.zeros(0))
    elapsed = float(nel_runtime.get("wall_time_s") or 0.0)
    prompt_tokens, completion_tokens = ok_int_sum("prompt_tokens"), ok_int_sum("completion_tokens")
    total_tokens = prompt_tokens + completion_tokens

    def pct(q: float) -> float:
        return round(float(np.percentile(lat, q)), 2) if lat.size else 0.0

    attempts = column("attempts")
    if attempts is None:
        retries = 0
    elif pa.types.is_integer(attempts.type):
        # max(0, int(attempts or 1) - 1): null and 0 count as one attempt
        retries = int(pc.sum(pc.max_element_wise(pc.subtract(pc.fill_null(attempts, 1), 1), 0)).as_py() or 0)
    else:
        retries = sum(max(0, int(a or 1) - 1) for a in attempts.to_pylist())
    finish = column("finish_reason")
    reasons: dict[str, int] = {}
    if finish is not None:
        finish = finish.filter(ok)
        if pa.types.is_string(finish.type):
            # value_counts keeps the order of first appearance, as Counter does
            vc = finish.value_counts()
            reasons = {v: int(c) for v, c in zip(vc.field("values").to_pylist(),
                                                  vc.field("counts").to_pylist(), strict=True) if v}
        else:
            reasons = dict(Counter(f for f in finish.to_pylist() if f))
    out: dict[str, Any] = {
        "total_steps": n, "total_tokens": total_tokens,
        "total_prompt_tokens": prompt_tokens,
        "total_completion_tokens": completion_tokens,
        "total_reasoning_tokens": ok_int_sum("reasoning_tokens"),
        "elapsed_seconds": round(elapsed, 2),
        "latency_percentiles_ms": {"p50": pct(50), "p90": pct(90), "p99": pct(99)},
        "tokens_per_second": round(total_tokens / elapsed, 2) if elapsed > 0 else 0.0,
        "steps_per_second": round(n / elapsed, 2) if elapsed > 0 else 0.0,
        "model_errors": n - n_ok,
        "total_retries": retries,
        "finish_reason_counts": reasons,
    }
    return {**out, **{k: v for k, v in nel_runtime.items() if k not in out}}


def failure_block(rows: list[dict[str, Any]], nel_failures: dict[str, Any]) -> dict[str, Any]:
    """`failure_analysis.json`: 0.3.0's report (count, percentage, three exemplars per
    category), with nel's rate, examples and request counts alongside."""
    n = len(rows)
    by_cat: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("failure_category"):
            by_cat.setdefault(r["failure_category"], []).append(r)
    total = sum(len(v) for v in by_cat.values())
    nel_cats = nel_failures.get("categories") or {}
    cats = {}
    for cat, items in by_cat.items():
        cats[cat] = {
            "count": len(items), "percentage": round(len(items) / n, 4) if n else 0,
            "exemplars": [{"problem_idx": r["problem_idx"], "repeat": r["repeat"],
                           "error": r.get("error") or cat} for r in items[:3]],
            **{k: v for k, v in (nel_cats.get(cat) or {}).items() if k != "count"},
        }
    out = {"total_steps": n, "total_failures": total,
           "failure_rate": round(total / n, 4) if n else 0, "categories": cats}
    return {**out, **{k: v for k, v in nel_failures.items() if k not in out}}


def _ci(entry: dict[str, Any] | None) -> dict[str, Any]:
    if not entry or entry.get("ci_low") is None:
        return {}
    return {"ci_lower": round(float(entry["ci_low"]), 4), "ci_upper": round(float(entry["ci_high"]), 4)}


def _bootstrap(values: np.ndarray) -> dict[str, Any]:
    import numpy as np

    from nel_assets.engine import stats

    if values.size == 0:
        return {}
    # Resampled in blocks of ~250k values (4 MB with their indices) rather than all 1,000
    # resamples at once (21 MB for GSM8K's 1,319 items): the same seeded draws, so the same
    # interval, without the export's peak memory.
    b = stats.bootstrap_ci(np.mean, values, n_resamples=1000, seed=0, max_block=250_000)
    return {"bootstrap_ci_lower": round(float(b["ci_low"]), 4), "bootstrap_ci_upper": round(float(b["ci_high"]), 4)}


def headline_scores(rows: list[dict[str, Any]], score: dict[str, Any], n_repeats: int) -> dict[str, Any]:
    """0.3.0's headline entries: `pass@1` (and `pass@<repeats>`) for 0/1 rewards, else
    `mean_reward`; each `{value, ci_lower, ci_upper, bootstrap_ci_lower, bootstrap_ci_upper}`.

    Values are nel's (failed requests left out); `ci_*` is nel's interval for the score
    (labelled by `ci_method`), `bootstrap_ci_*` a seeded bootstrap over questions.
    """
    import numpy as np

    from nel_assets.engine import stats

    pids: list[int] = []
    rewards: list[float] = []
    for r in rows:
        if r.get("reward") is not None:
            pids.append(int(r["problem_idx"]))
            rewards.append(float(r["reward"]))
    if not pids:
        return {}
    flat = np.asarray(rewards, dtype=float)
    if not np.isin(flat, (0.0, 1.0)).all():
        per_q: dict[int, list[float]] = {}
        for p, x in zip(pids, rewards, strict=True):
            per_q.setdefault(p, []).append(x)
        means = np.asarray([sum(v) / len(v) for v in per_q.values()])
        return {"mean_reward": {"value": round(float(score.get("mean") or means.mean()), 4),
                                **_ci(score), **_bootstrap(means), "ci_method": score.get("ci_method")}}
    # Samples and correct samples per question, the questions in order of first appearance
    # (the order the bootstrap draws from): counted by numpy, not grouped row by row.
    _, first, inv = np.unique(np.asarray(pids, dtype=np.int64), return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=np.intp)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    q = rank[inv.reshape(-1)]
    n = np.bincount(q, minlength=first.size)
    c = np.bincount(q[flat > 0], minlength=first.size)
    out: dict[str, Any] = {}
    pak = score.get("pass_at_k") or {}
    for k in [1] + ([n_repeats] if n_repeats > 1 else []):
        keep = n >= k
        if not keep.any():
            continue
        per = np.asarray(stats.pass_at_k(n[keep], c[keep], k), dtype=float)
        entry = pak.get(str(k)) or pak.get(k) or (score if k == 1 else None)
        value = entry.get("mean") if entry else None
        out[f"pass@{k}"] = {"value": round(float(per.mean() if value is None else value), 4),
                            **_ci(entry), **_bootstrap(per),
                            "ci_method": (entry or {}).get("ci_method")}
    return out


def breakdowns(rows: list[dict[str, Any]], max_groups: int = 50) -> dict[str, Any]:
    """`scores.breakdowns`: the mean reward per value of every scoring-details field that
    every row has as a short string or a bool, with 2 to `max_groups` distinct values (0.3.0's
    rule); `{field: [{group, n, mean_reward, ci_lower, ci_upper}]}` over scored rows."""
    import numpy as np

    from nel_assets.engine import stats

    # Rows share their details text (a question's repeats, a scorer's fixed fields): each
    # distinct text is parsed once, and a group's rewards are then picked out of the reward
    # array with one mask, in row order, rather than appended row by row.
    codes_of: dict[str, int] = {}
    codes: list[int] = []
    rewards: list[float] = []
    for r in rows:
        raw, reward = r.get("details"), r.get("reward")
        if reward is None or not raw:
            return {}  # a failed or detail-less row: no field is in every row
        code = codes_of.get(raw)
        if code is None:
            code = codes_of[raw] = len(codes_of)
        codes.append(code)
        rewards.append(float(reward))
    n = len(rewards)
    code_arr = np.asarray(codes, dtype=np.intp)
    per_code = np.bincount(code_arr, minlength=len(codes_of))  # rows per distinct text
    reward_arr = np.asarray(rewards, dtype=float)
    # {field: {value: [codes]}} over the distinct texts in order of first appearance (so the
    # fields come out in the order their first row gives them), and how many rows have each
    # field. A field past `max_groups` values can no longer qualify: its groups are dropped
    # at once (an answer-valued field would otherwise hold a group per answer).
    fields: dict[str, dict[str, list[int]] | None] = {}
    seen: dict[str, int] = {}
    for raw, code in codes_of.items():
        for k, v in orjson.loads(raw).items():
            if isinstance(v, bool) or (isinstance(v, str) and len(v) < 100):
                seen[k] = seen.get(k, 0) + int(per_code[code])
                by_value = fields.setdefault(k, {})
                if by_value is not None:
                    by_value.setdefault(str(v), []).append(code)
                    if len(by_value) > max_groups:
                        fields[k] = None
    out: dict[str, Any] = {}
    for name, groups in fields.items():
        if groups is None or seen[name] != n or not 2 <= len(groups) <= max_groups:
            continue
        out[name] = []
        for val in sorted(groups):
            picked = reward_arr[np.isin(code_arr, groups[val])]
            ci = stats.mean_ci(picked)
            out[name].append({"group": val, "n": int(picked.size), "mean_reward": round(float(ci["mean"]), 4),
                              "ci_lower": round(float(ci["ci_low"] if ci["ci_low"] is not None else ci["mean"]), 4),
                              "ci_upper": round(float(ci["ci_high"] if ci["ci_high"] is not None else ci["mean"]), 4)})
    return out


def summary_block(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """0.3.0's `scores.summary` over the scored rewards."""
    import numpy as np

    arr = np.asarray([r["reward"] for r in rows if r.get("reward") is not None], dtype=float)
    if arr.size == 0:
        return {"mean": 0.0, "std": 0.0, "min": 0.0, "max": 0.0, "median": 0.0, "n": 0}
    return {"mean": float(arr.mean()), "std": float(arr.std(ddof=1)) if arr.size > 1 else 0.0,
            "min": float(arr.min()), "max": float(arr.max()), "median": float(np.median(arr)),
            "n": int(arr.size)}


def categories_block(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """`benchmark.categories`: `{category: {mean_reward, n}}` (n = steps), when rows have one."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("category") is not None:
            groups.setdefault(str(r["category"]), []).append(r)
    if not groups:
        return None
    out = {}
    for cat in sorted(groups):
        scored = [float(r["reward"]) for r in groups[cat] if r.get("reward") is not None]
        out[cat] = {"mean_reward": round(sum(scored) / len(scored), 4) if scored else 0.0, "n": len(groups[cat])}
    return out


def run_config(benchmark: str, *, model_id: str | None, base_url: str | None, repeats: int,
               max_problems: int | None, shuffle: dict[str, Any] | None,
               generation: dict[str, Any] | None = None, system_prompt: str | None = None) -> dict[str, Any]:
    """The bundle's `config` in 0.3.0's shape (flat: `benchmark`, `model`, `repeats`, ...);
    `eval merge` reads `repeats` and `benchmark` from it."""
    from nel_resources.endpoint_url import redact_url

    # A URL's user-info and query string are credentials: never into an artifact.
    base_url = redact_url(base_url) if base_url else base_url
    cfg: dict[str, Any] = {"benchmark": benchmark, "model": model_id, "base_url": base_url,
                           "repeats": repeats, "max_problems": max_problems, "scorers": None}
    for k, v in (generation or {}).items():
        if v is not None:
            cfg[k] = v
    if system_prompt:
        cfg["system_prompt"] = system_prompt
    if shuffle:
        cfg.update(shuffle_seed=shuffle.get("seed"), shuffle=shuffle)
    return cfg


def bundle_document(table: pa.Table | list[dict[str, Any]], bundle: dict[str, Any],
                    config: dict[str, Any], nel_config: dict[str, Any] | None = None, *,
                    runtime: dict[str, Any] | None = None) -> dict[str, Any]:
    """The `eval-<ts>-<bench>.json` document: 0.3.0's bundle with nel's keys added
    (`model`, `model_id`, `metrics`, `per_category`, `bundle` = nel's own bundle, `nel_config`).
    `runtime` is `runtime_block`'s result when the caller has it already."""
    from nel_resources.arrow import pa

    rows = table.to_pylist() if isinstance(table, pa.Table) else table
    score = bundle["score"]
    n_repeats = int(score.get("n_repeats") or config.get("repeats") or 1)
    scores: dict[str, Any] = headline_scores(rows, score, n_repeats)
    scores["summary"] = summary_block(rows)
    if groups := breakdowns(rows):
        scores["breakdowns"] = groups
    if runtime is None:
        runtime = runtime_block(table if isinstance(table, pa.Table) else pa.Table.from_pylist(rows),
                                bundle["runtime"])
    scores["runtime"] = runtime
    failures = failure_block(rows, bundle["failures"])
    scores["failures"] = {k: failures[k] for k in FAILURE_KEYS}
    for k, v in scores["failures"]["categories"].items():
        scores["failures"]["categories"][k] = {kk: v[kk] for kk in FAILURE_CATEGORY_KEYS}
    bench: dict[str, Any] = {"name": bundle["benchmark"],
                             "samples": len({r["problem_idx"] for r in rows}),
                             "repeats": n_repeats, "scores": scores}
    cats = categories_block(rows)
    if cats:
        bench["categories"] = cats
    created = float(bundle.get("created_at") or time.time())
    return {
        "run_id": run_id(bundle["benchmark"], created),
        "config_hash": config_hash(config),
        "sdk_version": FORMAT_VERSION,
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(created)),
        "config": config,
        "benchmark": bench,
        "n_results": len(rows),
        # nel's keys
        "generator": {"name": "nel", "version": _nel_version()},
        "model": bundle["model"], "model_id": bundle.get("model_id"),
        "metrics": {"score": score.get("mean"), "se": score.get("se"),
                    "ci_95": [score.get("ci_low"), score.get("ci_high")],
                    "pass_at_k": score.get("pass_at_k"), "n_items": score.get("n_items"),
                    "n_samples": score.get("n_samples"), "n_repeats": score.get("n_repeats"),
                    "n_failed_samples": score.get("n_failed_samples")},
        "per_category": bundle.get("per_category"),
        "bundle": bundle,
        "nel_config": nel_config or {},
    }


@functools.cache
def _nel_version() -> str:
    # Cached: a metadata lookup scans the installed distributions (milliseconds), and every
    # trajectory line names the version.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nel")
    except PackageNotFoundError:
        return "0.1.0"


def regression_keys(base_items: dict[str, Any], cand_items: dict[str, Any],
                    comp: dict[str, Any]) -> dict[str, Any]:
    """NeMo Evaluator 0.3.0's per-benchmark regression keys for one nel comparison:
    `score_deltas` ({metric: {baseline, candidate, delta, relative_pct, ci_overlap}}),
    `runtime_deltas` and, when either side has categories, `category_deltas`.

    The metric is named as 0.3.0 names it (`pass@1` for 0/1 rewards, else `mean_reward`);
    `ci_overlap` compares the two scores' own intervals (nel's, as in the bundles), as 0.3.0
    does; nel's paired test is what decides the verdict.

    Args:
        base_items: the baseline's `stats.item_table`.
        cand_items: the candidate's.
        comp: nel's comparison of the two (`compare_scores` + `runtime`).
    """
    import numpy as np

    from nel_assets.engine import stats

    def interval(items: dict[str, Any]) -> dict[str, Any]:
        n = int(sum(items["n_samples"])) if items.get("binary") else None
        return stats.score_interval(np.asarray(items["scores"], dtype=float), None, n_samples=n)

    bi, ci = interval(base_items), interval(cand_items)
    metric = "pass@1" if base_items.get("binary") and cand_items.get("binary") else "mean_reward"
    b, c = bi.get("mean"), ci.get("mean")
    overlap = None
    if None not in (bi.get("ci_low"), bi.get("ci_high"), ci.get("ci_low"), ci.get("ci_high")):
        overlap = bool(bi["ci_low"] <= ci["ci_high"] and ci["ci_low"] <= bi["ci_high"])
    score = {"baseline": None if b is None else round(float(b), 4),
             "candidate": None if c is None else round(float(c), 4),
             "delta": None if b is None or c is None else round(float(c) - float(b), 4),
             "relative_pct": (round((float(c) - float(b)) / float(b) * 100, 2)
                              if b not in (None, 0) and c is not None else None),
             "ci_overlap": overlap}
    runtime = {}
    for key, d in (comp.get("runtime") or {}).items():
        if isinstance(d, dict) and isinstance(d.get("base"), dict):
            runtime[key] = {"baseline": d["base"].get("mean"), "candidate": d["cand"].get("mean"),
                            "delta": d.get("delta_mean")}
    out: dict[str, Any] = {"score_deltas": {metric: score}, "runtime_deltas": runtime}
    bc, cc = _category_means(base_items), _category_means(cand_items)
    if bc or cc:
        out["category_deltas"] = {
            cat: {"baseline": (bc.get(cat) or {}).get("mean_reward", 0),
                  "candidate": (cc.get(cat) or {}).get("mean_reward", 0),
                  "delta": round((cc.get(cat) or {}).get("mean_reward", 0)
                                 - (bc.get(cat) or {}).get("mean_reward", 0), 4)}
            for cat in sorted(set(bc) | set(cc))}
    return out


def _category_means(items: dict[str, Any]) -> dict[str, dict[str, float]]:
    """`{category: {mean_reward}}` over an item table's questions (empty without categories)."""
    cats = items.get("categories")
    if not cats:
        return {}
    groups: dict[str, list[float]] = {}
    for cat, score in zip(cats, items["scores"], strict=True):
        groups.setdefault(str(cat), []).append(float(score))
    return {k: {"mean_reward": round(sum(v) / len(v), 4)} for k, v in groups.items()}


def single_report_keys(doc: dict[str, Any]) -> dict[str, Any]:
    """0.3.0's top-level `regression.json` keys for a one-benchmark comparison (its `compare`
    writes that benchmark's report itself then): `report_version`, `score_deltas`,
    `runtime_deltas`, `category_deltas`, `verdict`, `verdict_reasons`, `threshold`, and
    `run_id`/`config` inside `baseline`/`candidate`. Empty for several benchmarks (0.3.0
    keys its file by benchmark then; nel's per-benchmark keys are under `benchmarks`)."""
    benches = doc.get("benchmarks") or {}
    if len(benches) != 1:
        return {}
    (comp,) = benches.values()
    out: dict[str, Any] = {"report_version": 1,
                           **{k: comp[k] for k in ("score_deltas", "runtime_deltas", "category_deltas")
                              if k in comp},
                           "verdict": comp.get("outcome"), "verdict_reasons": [comp.get("outcome_reason")],
                           "threshold": doc.get("max_drop")}
    for side in ("baseline", "candidate"):
        if isinstance(doc.get(side), dict):
            out[side] = {"run_id": doc[side].get("run_id") or doc[side].get("source"),
                         "config": doc[side].get("config") or {}, **doc[side]}
    return out
