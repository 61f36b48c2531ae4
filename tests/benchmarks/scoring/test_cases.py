"""The scoring case set: every real-style answer of `cases/cases.jsonl` scores as a careful
grader would (issue 16's patterns 1-11, their decoys, and the easy majority)."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import pytest

from tests.benchmarks.scoring.cases.score_case import load_cases, score, verdict

CASES = load_cases()


def test_case_set_covers_every_pattern_and_benchmark() -> None:
    patterns = {c["pattern"].split("_")[0] for c in CASES}
    assert {f"P{i}" for i in range(1, 12)} <= patterns
    per_bench = Counter(c["benchmark"] for c in CASES)
    assert set(per_bench) >= {"gsm8k", "mgsm", "math500", "mmlu", "mmlu_pro", "gpqa",
                              "triviaqa", "drop"}
    assert len(CASES) >= 300
    # Both verdicts occur, so a scorer that always says yes (or no) fails the set.
    assert 0.2 < sum(c["correct"] for c in CASES) / len(CASES) < 0.9
    assert len({c["id"] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_case_scores_right(case: dict[str, Any]) -> None:
    result = score(case)
    assert verdict(case, result) is case["correct"], (case["pattern"], result)
    details = result.scoring_details
    # Every verdict records what was extracted and by which rule.
    assert details.get("method"), details
    assert "source" in details


def test_nel_matches_or_beats_math_verify_on_the_math_cases() -> None:
    """Hugging Face's `math-verify` 0.9.0 (the library issue 16 measured) on the same math
    cases, given the answer part of each reply: nel agrees with the known verdicts at least
    as often. (Cost per answer is compared by `bench/bench_scoring_cases.py`, not here.)"""
    try:
        from math_verify import parse, verify
    except ImportError:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("math-verify is not installed (pip install -e '.[test]')")
        pytest.skip("math-verify not installed")
    from benchmarks.scoring import split_reasoning

    math_cases = [c for c in CASES if c["benchmark"] == "math500"]
    nel = mv = 0
    for case in math_cases:
        nel += verdict(case, score(case)) is case["correct"]
        answer, reasoning = split_reasoning(case["response"], case.get("reasoning"))
        got = bool(verify(parse("$" + case["gold"] + "$"), parse(answer or reasoning or "")))
        mv += got is case["correct"]
    assert len(math_cases) >= 100
    assert nel >= mv, (nel, mv, len(math_cases))
    assert nel == len(math_cases)
