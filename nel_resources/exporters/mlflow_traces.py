"""`emit_traces: true` of the `mlflow` exporter: one MLflow trace per sample (problem x repeat),
linked to the bundle's run, as NeMo Evaluator 0.3.0 emits them for MLflow's Traces tab.

Each trace is a root `AGENT` span `sample_<idx>` (`.r<repeat>` for later repeats) whose
inputs are the prompt and outputs the answer and reward, with the sample's identity and score
as `nel.*` attributes (0.3.0's names), and one `LLM` child span: the model call (prompt,
response, tokens, latency). Texts are cut at `emit_traces_content_max` characters;
`emit_traces_max_samples` caps how many samples get one. A run's traces are written once:
a re-export that finds the run's traces leaves them (no duplicates), as 0.3.0 emits them only
for a new run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient


def read_samples(bundle_path: Path) -> list[dict[str, Any]]:
    """The rows of the `results.jsonl` beside a bundle (none when it is missing)."""
    results = bundle_path.parent / "results.jsonl"
    if not results.is_file():
        return []
    return [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines() if line]


def log_traces(client: MlflowClient, uri: str, run_id: str, rows: list[dict[str, Any]], *,
               benchmark: str, model: str, content_max: int = 4000,
               max_samples: int | None = None) -> int:
    """Emit one trace per row into the run's experiment at `uri` (the client's store), linked
    to the run; how many were emitted (0 when the run has traces already)."""
    import mlflow

    exp_id = client.get_run(run_id).info.experiment_id
    if client.search_traces(locations=[exp_id], run_id=run_id, max_results=1,
                            include_spans=False):
        return 0
    # MLflow's tracer sends finished traces to the process's tracking URI, not the client's:
    # point it at the same store while tracing (else a default ./mlflow.db gets them).
    previous = mlflow.get_tracking_uri() if mlflow.is_tracking_uri_set() else None
    mlflow.set_tracking_uri(uri)
    emitted = 0
    try:
        for row in rows[:max_samples] if max_samples is not None else rows:
            _trace(client, exp_id, run_id, row, benchmark, model, content_max)
            emitted += 1
    finally:
        mlflow.flush_trace_async_logging(terminate=False)  # written before the export returns
        mlflow.set_tracking_uri(previous)
    return emitted


def _trace(client: MlflowClient, exp_id: str, run_id: str, row: dict[str, Any], benchmark: str,
           model: str, cap: int) -> None:
    idx, repeat = row.get("problem_idx"), int(row.get("repeat") or 0)
    name = (f"sample_{idx}" if idx is not None else "sample") + (f".r{repeat}" if repeat else "")
    prompt = _trim(row.get("prompt") or "", cap)
    answer = _trim(row.get("model_response") or "", cap)
    reward = row.get("reward")
    attrs: dict[str, Any] = {"nel.benchmark": benchmark, "nel.model": model}
    if idx is not None:
        attrs["nel.problem_idx"] = idx
    if repeat:
        attrs["nel.repeat"] = repeat
    if isinstance(reward, int | float) and not isinstance(reward, bool):
        attrs["nel.reward"] = float(reward)
    if row.get("extracted_answer") is not None:
        attrs["nel.extracted_answer"] = _trim(row["extracted_answer"], cap)
    if isinstance(row.get("scoring_details"), dict) and row["scoring_details"]:
        attrs["nel.scoring_details"] = _trim(row["scoring_details"], cap)
    error = row.get("error")
    if error:
        attrs["nel.error"] = _trim(error, cap)
    root = client.start_trace(name, span_type="AGENT", inputs={"prompt": prompt},
                              attributes=attrs, experiment_id=exp_id, run_id=run_id)
    llm_attrs: dict[str, Any] = {"model": model}
    tokens = row.get("tokens")
    if isinstance(tokens, dict):
        llm_attrs.update({f"tokens.{k}": v for k, v in tokens.items() if isinstance(v, int | float)})
    if isinstance(row.get("latency_ms"), int | float):
        llm_attrs["latency_ms"] = row["latency_ms"]
    span = client.start_span("llm_call", trace_id=root.trace_id, parent_id=root.span_id,
                             span_type="LLM", inputs={"prompt": prompt}, attributes=llm_attrs)
    status = "ERROR" if error else "OK"
    client.end_span(root.trace_id, span.span_id, outputs={"response": answer}, status=status)
    client.end_trace(root.trace_id, outputs={"response": answer, "reward": attrs.get("nel.reward")},
                     status=status)


def _trim(value: Any, cap: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= cap else text[:cap] + f"... [{len(text) - cap} more characters]"
