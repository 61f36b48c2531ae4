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

This module holds the key lists, names and per-row lines; the bundle document and its blocks
are in `nemo_bundle`, a comparison's and a report's keys in `nemo_regression`.
"""

from __future__ import annotations

import functools
import hashlib
import re
import time
from typing import Any

import orjson

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
    user: dict[str, Any] = {"source": "user", "message": row.get("prompt") or ""}
    if row.get("images"):  # the images sent with the prompt, by name (`nel-image:<sha256>`)
        user["extra"] = {"images": orjson.loads(row["images"])}
    steps.append(user)
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
    # scorers (`scorer:<name>` keys, or the configured scorers of nel's grader) are parsed,
    # the rest are spliced in as they are stored.
    if has_scorers(raw):
        d = orjson.loads(raw)
        return d, d
    return orjson.Fragment(raw), None


def has_scorers(raw: str) -> bool:
    """Whether a row's stored details text may carry per-scorer rewards."""
    return '"scorer:' in raw or '"scorers"' in raw


def scorer_rewards(details: dict[str, Any]) -> dict[str, Any]:
    """0.3.0's per-row `scorer_rewards`: `{"scorer:<name>": reward}` of each extra scorer, from
    0.3.0-style `scorer:<name>` keys (BYOB files) or nel's grader (`scorers` names the
    configured scorers, `metrics` holds their rewards)."""
    out = {k: v.get("reward", 0.0) for k, v in details.items()
           if k.startswith("scorer:") and isinstance(v, dict)}
    metrics = details.get("metrics")
    if isinstance(details.get("scorers"), dict) and isinstance(metrics, dict):
        out.update({f"scorer:{n}": metrics[n] for n in details["scorers"] if metrics.get(n) is not None})
    return out


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
    rewards = scorer_rewards(parsed or {})
    out: dict[str, Any] = {
        "problem_idx": row["problem_idx"], "repeat": row["repeat"],
        "reward": 0.0 if row.get("reward") is None else row["reward"],
        "scorer_rewards": rewards, "prompt": row.get("prompt") or "",
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


def trajectory_row(row: dict[str, Any], traj: Any = _UNSET, *, messages: bool = False) -> dict[str, Any]:
    """One `trajectories.jsonl` line: 0.3.0's step record, then nel's keys (`traj` as in
    `result_row`).

    `messages` adds nel's `messages` key (the request's messages and the answer as chat
    turns): the same conversation as `trajectory`, ~21% of the file, which 0.3.0 does not
    write and its readers do not need, so it is there only when asked
    (`output.trajectory_messages: true`).
    """
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
    out["sample_id"] = row.get("sample_id")
    if messages:
        out["messages"] = orjson.Fragment(_messages(row))
    out.update({
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


def run_config(benchmark: str, *, model_id: str | None, base_url: str | None, repeats: int,
               max_problems: int | None, shuffle: dict[str, Any] | None,
               generation: dict[str, Any] | None = None, system_prompt: str | None = None) -> dict[str, Any]:
    """The bundle's `config` in 0.3.0's shape (flat: `benchmark`, `model`, `repeats`, ...);
    `eval merge` reads `repeats` and `benchmark` from it."""
    from nel_resources.wire.endpoint_url import redact_url

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


@functools.cache
def _nel_version() -> str:
    # Cached: a metadata lookup scans the installed distributions (milliseconds), and every
    # trajectory line names the version.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nel")
    except PackageNotFoundError:
        return "0.1.0"
