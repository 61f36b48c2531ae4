"""Scorers: turn a model response and a gold answer into a `VerifyResult`.

Pure Python, no Dagster; sympy and scipy are imported only when a comparison needs them.

Every scorer has the signature
`scorer(response, expected, *, reasoning=None, **opts) -> VerifyResult` and records in
`scoring_details` at least `method` (the rule that extracted the answer, `none` when
nothing was found), `source` (`content`, or `reasoning` when the answer was only in the
reasoning) and the normalised forms it compared. An empty response never scores.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from benchmarks.registries import Registry

if TYPE_CHECKING:
    from benchmarks.scoring.drop import drop_em, drop_f1, f1_score, fuzzy_match, normalize_span
    from benchmarks.scoring.extract import Extraction, find_boxed, last_boxed
    from benchmarks.scoring.math_equiv import MathComparison, compare_math, math_equiv, math_match
    from benchmarks.scoring.math_extract import extract_math_answer
    from benchmarks.scoring.math_normalize import normalize_math
    from benchmarks.scoring.mcq import letters_for, mcq_extract, multichoice_regex
    from benchmarks.scoring.numeric import extract_number, numeric_match, parse_number
    from benchmarks.scoring.reasoning import split_reasoning
    from benchmarks.scoring.refusal import looks_like_refusal, refusal_match, refusal_rule
    from benchmarks.scoring.text import answer_line, exact_match, normalize_text, triviaqa_match

# Each name's module, imported on first use: the scorers compile hundreds of regexes at
# import, and a run (a rerun with nothing to do above all) uses one or two of the modules.
_HOME = {
    **dict.fromkeys(("drop_em", "drop_f1", "f1_score", "fuzzy_match", "normalize_span"), "drop"),
    **dict.fromkeys(("Extraction", "find_boxed", "last_boxed"), "extract"),
    **dict.fromkeys(("MathComparison", "compare_math", "math_equiv", "math_match"), "math_equiv"),
    "extract_math_answer": "math_extract",
    "normalize_math": "math_normalize",
    **dict.fromkeys(("letters_for", "mcq_extract", "multichoice_regex"), "mcq"),
    **dict.fromkeys(("extract_number", "numeric_match", "parse_number"), "numeric"),
    "split_reasoning": "reasoning",
    **dict.fromkeys(("looks_like_refusal", "refusal_match", "refusal_rule"), "refusal"),
    **dict.fromkeys(("answer_line", "exact_match", "normalize_text", "triviaqa_match"), "text"),
}


# The scorers a `scoring.metrics` entry of `type: scorer` may name (they share the scorer
# signature): the one table of scorer names. A new scorer is its function plus one line here.
SCORERS: Registry[Any] = Registry("scorer metric", {
    name: f"{__name__}.{_HOME[name]}:{name}"
    for name in ("answer_line", "exact_match", "fuzzy_match", "math_match", "multichoice_regex",
                 "numeric_match", "triviaqa_match")
}, aliases={
    # NeMo Evaluator's `mcq_extract` metric (extract the option letter, compare it to the gold
    # one) is what nel's `multichoice_regex` scorer does.
    "mcq_extract": "multichoice_regex",
})


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # the next lookup is a plain global
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})


class _Scoring(types.ModuleType):
    """This package, whose `math_equiv` stays the function when the submodule is loaded.

    The import system binds a loaded submodule to the attribute of its name on the package:
    `math_equiv` (the module) would hide `math_equiv` (the function) once anything imported
    the module. When everything was imported eagerly, the function was bound after the
    module; lazily, this property keeps that meaning.
    """

    @property
    def math_equiv(self) -> Any:
        from benchmarks.scoring.math_equiv import math_equiv

        return math_equiv

    @math_equiv.setter
    def math_equiv(self, value: Any) -> None:
        pass  # the submodule being bound by the import system (see the class docstring)


sys.modules[__name__].__class__ = _Scoring


__all__ = [
    "Extraction",
    "MathComparison",
    "answer_line",
    "compare_math",
    "drop_em",
    "drop_f1",
    "exact_match",
    "extract_math_answer",
    "extract_number",
    "f1_score",
    "find_boxed",
    "fuzzy_match",
    "last_boxed",
    "letters_for",
    "looks_like_refusal",
    "math_equiv",
    "math_match",
    "mcq_extract",
    "multichoice_regex",
    "normalize_math",
    "normalize_span",
    "normalize_text",
    "numeric_match",
    "parse_number",
    "refusal_match",
    "refusal_rule",
    "split_reasoning",
    "triviaqa_match",
]
