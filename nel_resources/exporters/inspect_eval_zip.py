"""Inspect's `.eval` log format (NeMo Evaluator's `format: eval`): the same `EvalLog` as the
JSON log, laid out as Inspect's own recorder writes it, in a zip:

  header.json            the log without its samples (eval, plan, results, stats, status)
  _journal/start.json    the log's start record (version, eval, plan)
  samples/<id>_epoch_<n>.json   one file per sample
  summaries.json         one summary per sample (what `inspect view` lists)

`inspect_ai.log.read_eval_log` reads it (checked by the real package in the peer venv); nel
does not import `inspect_ai`. Written to a temp name and renamed: a re-export replaces it.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any

#: a sample summary holds these of the sample (Inspect's `EvalSampleSummary`)
_SUMMARY_KEYS = ("id", "epoch", "input", "target", "metadata", "scores", "error")


def write_eval_zip(log: dict[str, Any], dest: Path) -> Path:
    """Write `log` (an `EvalLog` as JSON, samples included) as an Inspect `.eval` zip."""
    samples: list[dict[str, Any]] = list(log.get("samples") or [])
    header = {k: v for k, v in log.items() if k != "samples"}
    start = {"version": log["version"], "eval": log["eval"], "plan": log["plan"]}
    summaries = [_summary(s) for s in samples]
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("_journal/start.json", _dumps(start))
        for s in samples:
            zf.writestr(f"samples/{s['id']}_epoch_{s['epoch']}.json", _dumps(s))
        zf.writestr("summaries.json", _dumps(summaries))
        zf.writestr("header.json", _dumps(header))
    os.replace(tmp, dest)
    return dest


def _summary(sample: dict[str, Any]) -> dict[str, Any]:
    out = {k: sample[k] for k in _SUMMARY_KEYS if sample.get(k) is not None}
    if "error" in out:
        out["error"] = str(out["error"].get("message", ""))  # a summary's error is its message
    return out


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, default=str)
