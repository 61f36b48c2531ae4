"""Which metric of a benchmark's `scoring:` block is its headline score.

Two rules, chosen by how the benchmark entry is written:

- **NeMo Evaluator's spelling** (the model under `solver.service`, which 0.3.0 requires):
  0.3.0's rule. The default scorer's verdict is the headline (`pass@1`) and each configured
  scorer is reported beside it (`scorer:<name>`), so the same config gives the same numbers
  in both tools.
- **nel's spelling** (the benchmark's own `service:`, or none): the first configured scorer
  is the headline and the default scorer's figure is reported beside it, since a user who
  names a metric means it to be the score.

With an LLM judge (or another model-graded metric) among the metrics, or
`include_defaults: false`, both spellings keep the grader's rule: a judge-graded benchmark's
judge, else the default scorer (without defaults: the first judge, else the first scorer).

`scoring.primary` names the headline explicitly in either spelling. The rule is applied
when the entry is read and written into `primary`, so a config dumped and read again (the
CLI's `-O` pass, the `nel-config.yaml` that remote shards load) keeps the same headline
although the dump spells the model as `service:`.
"""

from __future__ import annotations

from typing import Any

#: Metric types whose verdict comes from another model: with one of these the grader's own
#: rule applies, which needs the benchmark's class (is it judge-graded?) to decide.
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
    # Without the default scorer, or with a model-graded metric, both spellings leave the
    # pick to the grader's rule at run time (the judge of a judge-graded benchmark, else the
    # default; without defaults the first judge, else the first scorer). Both must: a dump
    # spells every entry the nel way, so a NeMo-spelled entry read again is judged by the
    # nel rule, and a primary that appeared only then would change the shard fingerprint
    # between the run and its remote shards.
    if _field(scoring, "include_defaults", True) is False:
        return None
    if any(_field(m, "type", "scorer") in _MODEL_GRADED for m in metrics):
        return None
    if nemo_spelling:
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
