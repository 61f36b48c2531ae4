"""The `inspect` exporter: one Inspect AI eval log per (benchmark, model), from the run's files.

It reads what a run already wrote for each (benchmark, model): the bundle
`eval-<ts>-<bench>.json` and the `results.jsonl` beside it, and writes
`<bench>_<model>.json` in Inspect's JSON log format (version 2), or `<bench>_<model>.eval` in
its zipped `.eval` format (inspect_eval_zip), which `inspect view` and
`inspect_ai.log.read_eval_log` read: the task (benchmark), the model, one sample per
(problem, repeat) with its prompt, target, answer and score (nel's reward, the extracted
answer and the scoring details), and the run's metrics (nel's mean and standard error, the
confidence interval, pass@k). nel does not import `inspect_ai`: the log is plain JSON.

Settings (`output.export_config.inspect`, or `nel export -o KEY=VALUE`):
    output_dir: where the logs go (default: `<folder of the bundle>/inspect/`, or
        `nel export`'s `--output-dir`).
    format: `json` (the default) or `eval` (Inspect's zipped log, NeMo Evaluator's format).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

from benchmarks.errors import NelError
from nel_resources.exporters.bundle_content import read_bundle
from nel_resources.storage.store import write_json_atomic

SCORER = "nel"  # the score's name in the log: nel's reward, as the benchmark's scorer gave it


SETTINGS = ("output_dir", "format")
FORMATS = ("json", "eval")


def check_settings(settings: dict[str, Any]) -> str | None:
    """What is wrong with the settings, in one line, or None (the config check asks this)."""
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        return f"inspect exporter: unknown setting {unknown[0]!r}; the settings are {', '.join(SETTINGS)}"
    if settings.get("format", "json") not in FORMATS:
        return (f"inspect exporter: setting 'format': unknown log format {settings['format']!r}; "
                "write format: json (Inspect's JSON log) or eval (its zipped .eval log)")
    return None


def export(bundles: list[Path], settings: dict[str, Any], output_dir: str | None = None) -> int:
    """Write one Inspect eval log per bundle; 0 when all were written.

    Args:
        bundles: `eval-*.json` files, each with its `results.jsonl` beside it.
        settings: the exporter's settings (`output_dir`).
        output_dir: where to write, when `settings` names no `output_dir`.

    Raises:
        NelError: a bundle that cannot be read, or without its results file (one line).
    """
    problem = check_settings(settings)
    if problem is not None:
        raise NelError(problem)
    for path in bundles:
        dest = settings.get("output_dir") or output_dir
        write_log(path, Path(dest) if dest else path.parent / "inspect",
                  fmt=str(settings.get("format", "json")))
    return 0


def write_log(bundle_path: Path, out_dir: Path, *, fmt: str = "json") -> Path:
    """The Inspect eval log of one bundle, written into `out_dir` as `fmt` (`json` or
    `eval`); its path."""
    results = bundle_path.parent / "results.jsonl"
    if not results.is_file():
        raise NelError(f"{bundle_path}: no results.jsonl beside it (the samples of the log)")
    doc = read_bundle(bundle_path)
    rows = [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines() if line]
    log = eval_log(doc, rows)
    bench, model = str(log["eval"]["task"]), str(log["eval"]["model"])
    dest = out_dir / f"{_slug(bench)}_{_slug(model)}.{fmt}"
    out_dir.mkdir(parents=True, exist_ok=True)
    if fmt == "eval":
        from nel_resources.exporters.inspect_eval_zip import write_eval_zip

        return write_eval_zip(log, dest)
    write_json_atomic(dest, log)
    return dest


def eval_log(doc: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Inspect's `EvalLog` (as JSON) for a bundle document and its `results.jsonl` rows."""
    bundle = doc.get("bundle") or {}
    score = bundle.get("score") or {}
    bench = str(bundle.get("benchmark") or (doc.get("benchmark") or {}).get("name") or "?")
    model = str(doc.get("model_id") or bundle.get("model_id") or doc.get("model") or "?")
    created = _iso(bundle.get("created_at")) or str(doc.get("timestamp") or _iso(0.0))
    samples = [_sample(r, model) for r in rows]
    scored = sum(1 for s in samples if s.get("scores"))
    runtime = bundle.get("runtime") or {}
    return {
        "version": 2,
        "status": "success" if bundle.get("complete", True) else "cancelled",
        "eval": {
            "eval_id": str(doc.get("run_id") or ""), "run_id": str(doc.get("run_id") or ""),
            "created": created, "task": bench, "task_id": bench,
            "task_version": str(bundle.get("bundle_version", 0)),
            "dataset": {"name": bench, "samples": len({r.get("problem_idx") for r in rows})},
            "model": model, "config": {"epochs": int(score.get("n_repeats") or 1)},
            "packages": {"nel": str((doc.get("generator") or {}).get("version", ""))
                         if isinstance(doc.get("generator"), dict) else str(doc.get("generator", ""))},
            "metadata": {"nel_model": doc.get("model"), "nel_config": doc.get("config"),
                         "nel_provenance": bundle.get("provenance"), "nel_cost": bundle.get("cost")},
            "scorers": [{"name": SCORER}],
        },
        "plan": {"name": "plan", "steps": [{"solver": "nel", "params": {}}]},
        "results": {
            "total_samples": len(samples), "completed_samples": scored,
            "scores": [{"name": SCORER, "scorer": SCORER, "params": {},
                        "scored_samples": scored, "unscored_samples": len(samples) - scored,
                        "metrics": _metrics(score)}],
        },
        "stats": {"started_at": created, "completed_at": created,
                  "model_usage": {model: _usage(runtime.get("tokens") or {})}},
        "samples": samples,
    }


def _metrics(score: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """nel's headline statistics as Inspect metrics (only those the bundle has)."""
    values = {"accuracy" if score.get("binary") else "mean": score.get("mean"),
              "stderr": score.get("se"), "ci_low": score.get("ci_low"),
              "ci_high": score.get("ci_high")}
    for k, entry in (score.get("pass_at_k") or {}).items():
        values[f"pass_at_{k}"] = (entry or {}).get("mean")
    return {name: {"name": name, "value": float(v), "params": {}}
            for name, v in values.items() if isinstance(v, int | float)}


def _sample(row: dict[str, Any], model: str) -> dict[str, Any]:
    prompt = row.get("prompt")
    answer = row.get("model_response") or ""
    messages = [{"role": "user", "content": str(prompt or ""), "source": "input"},
                {"role": "assistant", "content": str(answer), "source": "generate"}]
    out: dict[str, Any] = {
        "id": int(row["problem_idx"]) if isinstance(row.get("problem_idx"), int) else str(row.get("problem_idx")),
        "epoch": int(row.get("repeat") or 0) + 1,
        "input": str(prompt or ""),
        "target": _target(row.get("expected_answer")),
        "messages": messages,
        "output": {"model": model, "choices": [
            {"message": messages[1], "stop_reason": "stop"}], "completion": str(answer)},
        "metadata": row.get("metadata") or {},
    }
    reward = row.get("reward")
    if isinstance(reward, int | float) and not isinstance(reward, bool):
        details = row.get("scoring_details")
        out["scores"] = {SCORER: {
            "value": float(reward),
            "answer": None if row.get("extracted_answer") is None else str(row["extracted_answer"]),
            "metadata": details if isinstance(details, dict) else None}}
    error = row.get("error")
    if error:
        out["error"] = {"message": str(error), "traceback": "", "traceback_ansi": ""}
    return out


def _target(expected: Any) -> str | list[str]:
    if isinstance(expected, list):
        return [str(x) for x in expected]
    return "" if expected is None else str(expected)


def _usage(tokens: dict[str, Any]) -> dict[str, int]:
    inp = int(tokens.get("prompt_total") or 0)
    outp = int(tokens.get("completion_total") or 0)
    return {"input_tokens": inp, "output_tokens": outp, "total_tokens": inp + outp}


def _iso(ts: Any) -> str | None:
    if not isinstance(ts, int | float):
        return None
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat()


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "x"

