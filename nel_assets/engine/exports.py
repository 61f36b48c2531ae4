"""Seed-compatible files written from the store: `eval-<id>.json`, `results.jsonl`,
`trajectories.jsonl`, `runtime_stats.json`, `failure_analysis.json`.

Each file is written to a temp name and renamed into place, so a crash leaves either the old
file or the new one, never a torn one (`artifacts.py` checks them on every run)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

from nel_resources.store import write_json_atomic

_RESULT_KEYS = ("sample_id", "problem_idx", "repeat", "shard", "category", "expected",
                "response", "extracted", "method", "reward", "failure_category", "error",
                "finish_reason", "model_ms", "total_ms", "prompt_tokens", "completion_tokens")


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        for r in rows:
            f.write(orjson.dumps(r, default=str))
            f.write(b"\n")
    os.replace(tmp, path)


def write_exports(out_dir: Path, table: pa.Table, bundle: dict[str, Any], *,
                  eval_id: str, config_summary: dict[str, Any] | None = None) -> dict[str, Path]:
    """Write the seed-compatible files for one (benchmark, model); returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = table.to_pylist()
    results = [{k: r.get(k) for k in _RESULT_KEYS} for r in rows]
    # The stored JSON columns (messages, details, metadata) are spliced in as orjson
    # Fragments instead of being parsed and re-serialised: the exports of a 40k-sample run
    # took over a second in json.loads alone.
    trajectories = []
    for r in rows:
        msgs = r.get("messages") or "[]"
        if r.get("error") is None:
            turn: dict[str, Any] = {"role": "assistant", "content": r.get("response")}
            if r.get("reasoning"):
                turn["reasoning_content"] = r["reasoning"]
            head = msgs.rstrip()[:-1].rstrip()
            sep = "" if head.endswith("[") else ","
            msgs = f"{head}{sep}{orjson.dumps(turn).decode()}]"
        trajectories.append({
            "sample_id": r["sample_id"], "problem_idx": r["problem_idx"], "repeat": r["repeat"],
            "messages": orjson.Fragment(msgs), "expected": r.get("expected"),
            "reward": r.get("reward"), "extracted": r.get("extracted"),
            "scoring_details": orjson.Fragment(r["details"]) if r.get("details") else None,
            "metadata": orjson.Fragment(r["metadata"]) if r.get("metadata") else None,
            "finish_reason": r.get("finish_reason"), "error": r.get("error"),
            "timing_ms": {k: r.get(f"{k}_ms") for k in ("seed", "model", "verify", "total")},
            "usage": {"prompt_tokens": r.get("prompt_tokens"),
                      "completion_tokens": r.get("completion_tokens"),
                      "reasoning_tokens": r.get("reasoning_tokens")},
            "attempts": r.get("attempts"),
        })
    paths = {
        "eval": out_dir / f"eval-{eval_id}.json",
        "results": out_dir / "results.jsonl",
        "trajectories": out_dir / "trajectories.jsonl",
        "runtime_stats": out_dir / "runtime_stats.json",
        "failure_analysis": out_dir / "failure_analysis.json",
    }
    score = bundle["score"]
    write_json_atomic(paths["eval"], {
        "eval_id": eval_id,
        "benchmark": bundle["benchmark"],
        "model": bundle["model"],
        "model_id": bundle.get("model_id"),
        "metrics": {"score": score.get("mean"), "se": score.get("se"),
                    "ci_95": [score.get("ci_low"), score.get("ci_high")],
                    "pass_at_k": score.get("pass_at_k"), "n_items": score.get("n_items"),
                    "n_samples": score.get("n_samples"), "n_repeats": score.get("n_repeats")},
        "per_category": bundle.get("per_category"),
        "bundle": bundle,
        "config": config_summary or {},
    })
    _write_jsonl(paths["results"], results)
    _write_jsonl(paths["trajectories"], trajectories)
    write_json_atomic(paths["runtime_stats"], bundle["runtime"])
    write_json_atomic(paths["failure_analysis"], bundle["failures"])
    # Old files go only once the new ones are in place: a crash above leaves the previous
    # complete set, never a gap. Temp files of a writer that died are swept too.
    for old in [*out_dir.glob("eval-*.json"), *out_dir.glob(".*.tmp*")]:
        if old != paths["eval"]:
            old.unlink(missing_ok=True)
    return paths
