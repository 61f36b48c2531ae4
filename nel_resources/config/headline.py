"""Which metric of a benchmark's `scoring:` block is its headline score.

Two rules, chosen by how the benchmark entry is written:

- **NeMo Evaluator's spelling** (the model under `solver.service`, which 0.3.0 requires):
  0.3.0's rule. The default scorer's verdict is the headline (`pass@1`) and each configured
  scorer is reported beside it (`scorer:<name>`), so the same config gives the same numbers
  in both tools.
- **nel's spelling** (the benchmark's own `service:`, or none): the first configured metric
  is the headline and the default scorer's figure is reported beside it, since a user who
  names a metric means it to be the score.

`scoring.primary` names the headline explicitly in either spelling. The rule is applied
when the entry is read and written into `primary`, so a config dumped and read again (the
CLI's `-O` pass, the `nel-config.yaml` that remote shards load) keeps the same headline
although the dump spells the model as `service:`.
"""

from __future__ import annotations

from typing import Any

#: Metric types whose verdict comes from another model: with one of these a NeMo-spelled
#: entry keeps the grader's own rule (a judge-graded benchmark's judge, else the default),
#: which needs the benchmark's class to decide.
_MODEL_GRADED = frozenset({"judge", "pairwise_judge", "ensemble_judge", "reward_model"})


def _field(metric: Any, key: str, default: Any = None) -> Any:
    if isinstance(metric, dict):
        return metric.get(key, default)
    return getattr(metric, key, default)


def headline_primary(scoring: Any, *, nemo_spelling: bool) -> str | None:
    """The `primary` a benchmark's raw `scoring:` block gets when it names none.

    Args:
        scoring: the raw block (a mapping, or a `ScoringConfig`).
        nemo_spelling: the entry names its model as `solver.service`.

    Returns:
        The metric name to write into `primary`, or None to leave the block as it is.
    """
    if scoring is None or _field(scoring, "primary") is not None:
        return None
    metrics = _field(scoring, "metrics") or []
    if not isinstance(metrics, list) or not metrics:
        return None
    if nemo_spelling:
        if _field(scoring, "include_defaults", True) is False:
            return None  # no default scorer: the grader's rule picks among the metrics
        if any(_field(m, "type", "scorer") in _MODEL_GRADED for m in metrics):
            return None
        return "default"
    name = _field(metrics[0], "name")
    return name if isinstance(name, str) else None


def with_headline(scoring: Any, *, nemo_spelling: bool) -> Any:
    """`scoring` with `primary` set by `headline_primary` (a copy; the input is not changed)."""
    primary = headline_primary(scoring, nemo_spelling=nemo_spelling)
    if primary is None:
        return scoring
    if isinstance(scoring, dict):
        return {**scoring, "primary": primary}
    # A ScoringConfig instance: `primary` set on a copy counts as written (kept by dumps
    # with exclude_unset).
    copy = scoring.model_copy()
    copy.primary = primary
    return copy
