"""Adversarial model replies and every scorer entry point, for the extraction-bound tests.

Each input is built from one short unit repeated up to a length: unclosed delimiters
(`\\boxed{`, `$`, `\\(`, `<think>`), markers repeated on one line (`Answer:`, `the answer
is`, `####`), long runs of digits, separators, markup and whitespace. They are the shapes
that make a scan restart from every position (quadratic) or a regex backtrack. Shared by
`tests/benchmarks/scoring/test_adversarial_inputs.py` and `bench/bench_extraction_scaling.py`.
"""

from __future__ import annotations

from collections.abc import Callable

from benchmarks import scoring as S
from benchmarks.scoring import extract as E
from benchmarks.scoring.numeric import parse_number

# name -> the unit repeated to the requested length (one case per shape).
UNITS: dict[str, str] = {
    "boxed_open": "\\boxed{",
    "boxed_space": "\\boxed ",
    "fbox_open": "\\fbox{x",
    "open_brace": "{",
    "dollar_open": "$a",
    "display_open": "$$a",
    "paren_open": "\\(",
    "bracket_open": "\\[",
    "answer_is": "the answer is ",
    "final_answer_is": "final answer is ",
    "answer_colon": "Answer: ",
    "answer_colon_newline": "Answer:\n",
    "answer_bold": "**Answer** ",
    "localized_answer": "Réponse : ",
    "hash": "#### ",
    "digits": "1",
    "digits_comma": "1,",
    "comma_digits": ",1",
    "digits_dot": "1.",
    "digits_space": "1 ",
    "percent": "1%",
    "minus": "-",
    "frac_open": "\\frac{",
    "frac_half_open": "\\frac{1}{",
    "caret_open": "^{",
    "text_open": "\\text{",
    "left": "\\left",
    "think_open": "<think>",
    "think_close": "</think>",
    "stars": "*",
    "bold_letter": "**A",
    "paren_letter": "(A ",
    "letter_dot": "A. ",
    "letters": "A ",
    "spaces": " ",
    "newlines": "\n",
    "blank_lines": " \n",
    "backslashes": "\\",
    "underscores": "_",
    "refusal_words": "I cannot ",
    "equals": "x=",
    "plus_minus": "\\pm",
    "matrix_open": "\\begin{pmatrix}",
    "mixed": "Answer: \\boxed{$1,2 the answer is (A) **B** #### <think>",
}


def adversarial(name: str, size: int) -> str:
    """The input `name`, `size` characters long."""
    unit = UNITS[name]
    return (unit * (size // len(unit) + 1))[:size]


# name -> the scorer or extractor called on one reply (gold answers are ordinary).
SCORERS: dict[str, Callable[[str], object]] = {
    "find_boxed": E.find_boxed,
    "math_spans": E.math_spans,
    "answer_line_segments": E.answer_line_segments,
    "answer_is_segments": E.answer_is_segments,
    "strip_markdown": E.strip_markdown,
    "extract_number": S.extract_number,
    "parse_number": parse_number,
    "numeric_match": lambda t: S.numeric_match(t, "42"),
    "extract_math_answer": S.extract_math_answer,
    "normalize_math": S.normalize_math,
    "math_match": lambda t: S.math_match(t, "\\frac{1}{2}", timeout=5),
    "compare_math": lambda t: S.compare_math(t, "\\frac{1}{2}", timeout=5),
    "mcq_extract": S.mcq_extract,
    "multichoice_regex": lambda t: S.multichoice_regex(t, "B"),
    "exact_match": lambda t: S.exact_match(t, "paris"),
    "answer_line": lambda t: S.answer_line(t, "paris"),
    "triviaqa_match": lambda t: S.triviaqa_match(t, ["paris"]),
    "fuzzy_match": lambda t: S.fuzzy_match(t, "paris"),
    "drop_f1": lambda t: S.drop_f1(t, ["paris"]),
    "drop_em": lambda t: S.drop_em(t, ["paris"]),
    "looks_like_refusal": S.looks_like_refusal,
    "split_reasoning": S.split_reasoning,
    "normalize_text": S.normalize_text,
    "normalize_span": S.normalize_span,
}


def run_all(scorer: str, size: int, report: Callable[[str], None]) -> None:
    """Call `scorer` on every adversarial input of `size`, reporting each input's name first."""
    fn = SCORERS[scorer]
    for name in UNITS:
        report(name)
        fn(adversarial(name, size))
