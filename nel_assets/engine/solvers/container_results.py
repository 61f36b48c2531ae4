"""Read what a legacy eval-factory harness leaves in its results directory.

A harness run as a `container://image#task` benchmark writes, under its `/results` mount:
- `results.yml` (or `results.json`): the scores, either in the eval-factory layout
  (`results.tasks.<task>.metrics.<group>.scores.<metric>.value`, or the same under
  `results.groups`) or flat (`metrics: {acc: 0.8}` / `scores: {acc: {value: 0.8}}`);
- `eval_factory_metrics.json`: the adapter's request statistics (`response_stats`: count,
  successful_count, average latency and tokens, ...), and sometimes `timing`;
- optionally per-sample files `eval-results/**/output*.jsonl`, one JSON object a sample.

These are the files NeMo Evaluator 0.3.0 reads back from such a harness; nel reads the same
ones. Parsing is pure (no Docker), so it is tested on its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchmarks.errors import NelError

# Keys a per-sample row may carry its 0/1 or float verdict under, in the order harnesses use.
_REWARD_KEYS = ("reward", "score")
_VERDICT_KEYS = ("symbolic_correct", "correct", "is_correct", "passed", "success")


@dataclass
class HarnessResults:
    """The scores and samples a harness reported.

    Attributes:
        scores: `"<task>/<group>/<metric>"` (or the flat name) -> `{"value": float,
            "stats": {...}}` as the harness wrote it.
        samples: How many samples the harness says it scored (0 when it did not say).
        repeats: `config.params.extra.num_repeats` echoed back by the harness (default 1).
        rows: Per-sample records from `eval-results/**/output*.jsonl` (empty when none).
        response_stats: `eval_factory_metrics.json`'s `response_stats` block (may be empty).
        metrics_file: The whole `eval_factory_metrics.json` (may be empty).
    """

    scores: dict[str, dict[str, Any]]
    samples: int = 0
    repeats: int = 1
    rows: list[dict[str, Any]] = field(default_factory=list)
    response_stats: dict[str, Any] = field(default_factory=dict)
    metrics_file: dict[str, Any] = field(default_factory=dict)

    def headline(self) -> tuple[str, dict[str, Any]]:
        """The metric that stands for the benchmark: the first one the harness listed."""
        name = next(iter(self.scores))
        return name, self.scores[name]


def _score_entries(block: Any, prefix: str) -> dict[str, dict[str, Any]]:
    """`{<group>: {scores: {<metric>: {value, stats}}}}` flattened to `prefix/group/metric`."""
    out: dict[str, dict[str, Any]] = {}
    if not isinstance(block, dict):
        return out
    for group, gdata in block.items():
        if not isinstance(gdata, dict):
            continue
        for metric, mdata in (gdata.get("scores") or {}).items():
            if isinstance(mdata, dict) and isinstance(mdata.get("value"), int | float):
                entry: dict[str, Any] = {"value": float(mdata["value"])}
                if isinstance(mdata.get("stats"), dict):
                    entry["stats"] = mdata["stats"]
                out[f"{prefix}/{group}/{metric}"] = entry
    return out


def extract_scores(raw: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every score in a parsed `results.yml`, in the order the harness wrote them."""
    results = raw.get("results")
    if isinstance(results, dict):
        for section in ("tasks", "groups"):
            out: dict[str, dict[str, Any]] = {}
            for name, data in (results.get(section) or {}).items():
                if isinstance(data, dict):
                    out.update(_score_entries(data.get("metrics"), str(name)))
            if out:
                return out
    flat = raw.get("metrics") or raw.get("scores") or {}
    out = {}
    if isinstance(flat, dict):
        for key, value in flat.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[str(key)] = {"value": float(value)}
            elif isinstance(value, dict) and isinstance(value.get("value"), int | float):
                out[str(key)] = dict(value, value=float(value["value"]))
    return out


def _sample_count(raw: dict[str, Any], scores: dict[str, dict[str, Any]]) -> int:
    for key in ("samples", "n_samples"):
        if isinstance(raw.get(key), int):
            return int(raw[key])
    for entry in scores.values():
        count = (entry.get("stats") or {}).get("count")
        if isinstance(count, int):
            return count
    limit = ((raw.get("config") or {}).get("params") or {}).get("limit_samples")
    return limit if isinstance(limit, int) and limit > 0 else 0


def _repeats(raw: dict[str, Any]) -> int:
    extra = (((raw.get("config") or {}).get("params") or {}).get("extra") or {})
    n = extra.get("num_repeats")
    return int(n) if isinstance(n, int) and n > 0 else 1


def row_reward(row: dict[str, Any]) -> float | None:
    """The verdict a harness wrote for one sample (None when it wrote none)."""
    for key in _REWARD_KEYS:
        v = row.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool):
            return float(v)
    for key in _VERDICT_KEYS:
        v = row.get(key)
        if isinstance(v, bool | int | float):
            return float(v)
    return None


def _sample_rows(results_dir: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in sorted(results_dir.glob("eval-results/**/output*.jsonl")):
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                raise NelError(f"harness per-sample file {path.name} line {n} is not JSON") from None
            if isinstance(rec, dict):
                rows.append(rec)
    return rows


def read_results(results_dir: Path) -> HarnessResults:
    """Parse a harness's results directory.

    Raises:
        NelError: one line when there is no `results.yml`/`results.json`, when it does not
            parse, or when it holds no score.
    """
    yml, js = results_dir / "results.yml", results_dir / "results.json"
    try:
        if yml.is_file():
            raw = yaml.safe_load(yml.read_text(encoding="utf-8")) or {}
        elif js.is_file():
            raw = json.loads(js.read_text(encoding="utf-8"))
        else:
            raise NelError("the harness wrote no results.yml (nor results.json) into /results")
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise NelError(f"the harness's results file does not parse: {first}") from None
    if not isinstance(raw, dict):
        raise NelError("the harness's results file is not a mapping")
    scores = extract_scores(raw)
    if not scores:
        raise NelError("the harness's results file holds no score (no `results.tasks`, "
                       "`results.groups`, `metrics` or `scores` with a numeric value)")
    metrics: dict[str, Any] = {}
    mpath = results_dir / "eval_factory_metrics.json"
    if mpath.is_file():
        try:
            loaded = json.loads(mpath.read_text(encoding="utf-8"))
            metrics = loaded if isinstance(loaded, dict) else {}
        except json.JSONDecodeError:
            metrics = {}  # request statistics are optional; the scores stand without them
    stats = metrics.get("response_stats")
    return HarnessResults(scores=scores, samples=_sample_count(raw, scores), repeats=_repeats(raw),
                          rows=_sample_rows(results_dir), metrics_file=metrics,
                          response_stats=stats if isinstance(stats, dict) else {})
