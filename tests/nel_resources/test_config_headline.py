"""Which metric is a benchmark's headline (`scoring.primary`), by the entry's spelling, and
that the choice survives the dumps nel reads back (the CLI's pass, `nel-config.yaml`)."""

from __future__ import annotations

from typing import Any

import pytest

from nel_resources.config import ScoringConfig, load_config
from nel_resources.config.benchmarks import BenchmarkConfig

SCORER = {"type": "scorer", "name": "mcq_extract"}
JUDGE = {"type": "judge", "name": "j", "service": "grader"}


def primary(bench: dict[str, Any]) -> str | None:
    cfg = load_config(data={"services": {"m": {"url": "http://127.0.0.1:9/v1"},
                                         "grader": {"url": "http://127.0.0.1:9/v1", "role": "judge"}},
                            "benchmarks": [{"name": "mmlu", **bench}]})
    scoring = cfg.benchmarks[0].scoring
    assert scoring is not None
    # read back from both dumps nel writes and reads: the same headline
    for dump in (cfg.model_dump(mode="json", exclude_unset=True),
                 cfg.model_dump(mode="json", exclude_defaults=True)):
        again = load_config(data=dump).benchmarks[0].scoring
        assert again is not None and again.primary == scoring.primary, dump
    return scoring.primary


NEMO = {"solver": {"type": "simple", "service": "m"}}


@pytest.mark.parametrize(("bench", "expected"), [
    # nel's spelling: the first configured metric
    ({"service": "m", "scoring": {"metrics": [SCORER]}}, "mcq_extract"),
    ({"scoring": {"metrics": [SCORER]}}, "mcq_extract"),
    ({"service": "m", "scoring": {"metrics": [SCORER, {"type": "scorer", "name": "exact_match"}]}},
     "mcq_extract"),
    # a judge among them, or no default scorer: the grader's rule at run time, in both spellings
    ({"service": "m", "scoring": {"metrics": [JUDGE, SCORER]}}, None),
    ({"service": "m", "scoring": {"include_defaults": False, "metrics": [SCORER]}}, None),
    # NeMo Evaluator's spelling: the default scorer (0.3.0's pass@1), scorers beside it
    ({**NEMO, "scoring": {"metrics": [SCORER]}}, "default"),
    ({**NEMO, "scoring": {"metrics": [JUDGE]}}, None),
    ({**NEMO, "scoring": {"include_defaults": False, "metrics": [SCORER]}}, None),
    # an explicit primary wins in both spellings
    ({"service": "m", "scoring": {"metrics": [SCORER], "primary": "default"}}, "default"),
    ({**NEMO, "scoring": {"metrics": [SCORER], "primary": "mcq_extract"}}, "mcq_extract"),
    # no metric configured: nothing to choose
    ({"service": "m", "scoring": {"metrics": []}}, None),
])
def test_headline_by_spelling(bench: dict[str, Any], expected: str | None) -> None:
    assert primary(bench) == expected


def test_scoring_given_as_a_model() -> None:
    b = BenchmarkConfig(name="mmlu", service="m", scoring=ScoringConfig(metrics=[SCORER]))
    assert b.scoring is not None and b.scoring.primary == "mcq_extract"
    assert "primary" in b.scoring.model_dump(exclude_unset=True)
