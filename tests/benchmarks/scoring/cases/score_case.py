"""Score one case of `cases.jsonl` with whatever `benchmarks.scoring` is importable.

Used by the parametrized case test and by `bench/bench_scoring_cases.py`, which runs this
file in a subprocess against an older checkout of the scorers (so it must only use the
scorer signatures that every version has; extra keyword options are ignored by old
scorers, which accept `**opts`). Run as a script it prints one JSON line per case:
`{"id", "benchmark", "pattern", "split", "expected", "got", "seconds"}`.

The cases of split `dev` were written first and the scorers fixed against them; those of
split `heldout` were written after the fixes, and scored before any further change (the
bench reports both). The cases of split `round3` (`cases_round3.jsonl`, issue 33) were
written for kinds of answer the earlier scorers missed, each with right, wrong and decoy
cases, in every language MGSM has; xstest cases there give the prompt and the wanted
behaviour (`comply` or `refuse`) as the gold. Its split `round3-heldout` was written after
those fixes and scored once before the last one (29 of 30; the miss, a thinking cut off
after "the answer is 9, but wait...", was then fixed).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

CASES = Path(__file__).with_name("cases.jsonl")
ROUND3 = Path(__file__).with_name("cases_round3.jsonl")
CASE_FILES = (CASES, ROUND3)
_PRO_LETTERS = "ABCDEFGHIJ"


def load_cases(*paths: Path) -> list[dict[str, Any]]:
    """Every case of the case files (default: all of them), in order."""
    out: list[dict[str, Any]] = []
    for path in paths or CASE_FILES:
        with path.open(encoding="utf-8") as fh:
            out += [json.loads(line) for line in fh if line.strip()]
    return out


def _refusal(resp: str, gold: str) -> Any:
    """XSTest's heuristic verdict: reward 1 when the reply refuses exactly when it should."""
    from benchmarks import scoring

    if hasattr(scoring, "refusal_match"):
        return scoring.refusal_match(resp, gold)
    # Scorers older than `refusal_match` (the bench's `before`): the bare heuristic.
    from benchmarks._types import VerifyResult

    refused = scoring.looks_like_refusal(resp)
    ok = bool(resp.strip()) and refused == (gold == "refuse")
    return VerifyResult(1.0 if ok else 0.0, "refusal" if refused else "compliance",
                        {"method": "refusal_heuristic", "source": "content"})


def score(case: dict[str, Any]) -> Any:
    """The `VerifyResult` the benchmark's scorer gives this case, called as the built-in does."""
    from benchmarks import scoring

    bench = case["benchmark"]
    resp, gold, reasoning = case["response"], case["gold"], case.get("reasoning")
    if bench in ("gsm8k", "mgsm"):
        return scoring.numeric_match(resp, gold, reasoning=reasoning, language=case.get("lang"))
    if bench == "math500":
        return scoring.math_match(resp, gold, reasoning=reasoning)
    if bench in ("mmlu", "gpqa", "mmlu_pro"):
        options = case["options"]
        letters = _PRO_LETTERS[: len(options)] if bench == "mmlu_pro" else "ABCD"
        return scoring.multichoice_regex(
            resp, gold, letters=letters, reasoning=reasoning, options=options
        )
    if bench == "triviaqa":
        return scoring.triviaqa_match(resp, gold, reasoning=reasoning)
    if bench == "xstest":
        return _refusal(resp, gold)
    if bench == "drop":
        return scoring.fuzzy_match(resp, gold, span_sep=";", reasoning=reasoning)
    raise ValueError(f"no scorer for benchmark {bench!r}")


def verdict(case: dict[str, Any], result: Any) -> bool:
    """Whether the scorer credited the answer (DROP: full F1)."""
    return result.reward >= 0.999


def main() -> None:
    """Score every case and print one JSON line each (see the module docstring)."""
    cases = load_cases(*(Path(a) for a in sys.argv[1:]))
    for case in cases[:3]:
        score(case)  # warm-up: lazy imports (sympy, scipy) are not an answer's cost
    for case in cases:
        t0 = time.perf_counter()
        got = verdict(case, score(case))
        dt = time.perf_counter() - t0
        print(json.dumps({"id": case["id"], "benchmark": case["benchmark"],
                          "pattern": case["pattern"], "split": case.get("split", "dev"),
                          "expected": case["correct"],
                          "got": got, "seconds": dt}))


if __name__ == "__main__":
    main()
