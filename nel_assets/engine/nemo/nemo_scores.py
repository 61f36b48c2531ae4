"""The scores of a NeMo-format export as NeMo Evaluator names them, for `nel eval run`'s output.

NeMo Evaluator 0.3.0 prints each benchmark's `benchmark.scores` entries that carry a value
(`mean_reward` or `pass@k`, `scorer:<name>`); nel prints the same names with the same values,
read back from the `eval-*.json` it exported (plus `judge:<name>`, see nemo_bundle).
"""

from __future__ import annotations

from pathlib import Path

import orjson


def exported_scores(export_dir: str | Path | None) -> dict[str, float]:
    """`{name: value}` of the newest `eval-*.json` in `export_dir` (empty when there is none
    or it cannot be read: the scores line is a convenience, the files are the record)."""
    if not export_dir:
        return {}
    files = sorted(Path(export_dir).glob("eval-*.json"))
    if not files:
        return {}
    try:
        scores = orjson.loads(files[-1].read_bytes())["benchmark"]["scores"]
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError):
        return {}
    return {name: float(entry["value"]) for name, entry in scores.items()
            if isinstance(entry, dict) and isinstance(entry.get("value"), int | float)}


def scores_line(scores: dict[str, float]) -> str:
    """`mean_reward=0.8000 judge:correctness=0.8000`: 0.3.0's `name=value` spelling."""
    return " ".join(f"{name}={value:.4f}" for name, value in scores.items())
