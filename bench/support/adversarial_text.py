"""Adversarial model replies and every scorer entry point, for the extraction-bound tests.

Each input is built from one short unit repeated up to a length: unclosed delimiters
(`\\boxed{`, `$`, `\\(`, `<think>`), markers repeated on one line (`Answer:`, `the answer
is`, `####`), long runs of digits, separators, markup and whitespace. They are the shapes
that make a scan restart from every position (quadratic) or a regex backtrack. The
`nest_*` shapes are balanced nests (`\\boxed{\\boxed{...}}`, `((...))`, `<think>` in
`<think>`, fences in fences): code that copies every nested level (a slice per box) needs
memory quadratic in their length. Shared by
`tests/benchmarks/scoring/test_adversarial_inputs.py` and `bench/bench_extraction_scaling.py`.
"""

from __future__ import annotations

from collections.abc import Callable

from benchmarks import judges as J
from benchmarks import scoring as S
from benchmarks.scoring import extract as E
from benchmarks.scoring.code import extract_code
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
    # Round 3 (issue 33): what the new rules look for.
    "correction": "Answer: x. Hmm, actually ",
    "cjk_digits": "年1",
    "scale_words": "1 million ",
    "space_groups": "1 000 ",
    "dot_groups": "1.000.",
    "hedge_thai": "1 หรือ ",
    "ai_disclaimer": "As an AI, I have no opinion but ",
    "crisis": "It sounds like you 988 ",
    "no_opening": "No. discrimination ",
    "over": "1 over ",
    "therefore": "Therefore x = 1 ",
    "none_of": "none of the options ",
    "call_eq": "f(1)+g(",
    "letters_run": "a",
}


# name -> (opening, innermost, closing): the opening repeated k times, the innermost text,
# then the closing repeated k times, k as large as `size` allows (balanced nesting).
NESTS: dict[str, tuple[str, str, str]] = {
    "nest_boxed": ("\\boxed{", "42", "}"),
    "nest_fbox": ("\\fbox{", "42", "}"),
    "nest_boxed_text": ("The answer is $\\boxed{", "42", "}$."),
    "nest_braces": ("{", "42", "}"),
    "nest_frac": ("\\frac{", "1", "}{2}"),
    "nest_dfrac_boxed": ("\\boxed{\\dfrac{", "1", "}{2}}"),
    "nest_sqrt": ("\\sqrt{", "2", "}"),
    "nest_parens": ("(", "42", ")"),
    "nest_left_right": ("\\left(", "42", "\\right)"),
    "nest_brackets": ("[", "42", "]"),
    "nest_json": ('{"a": ', "1", "}"),
    "nest_think": ("<think>", "42", "</think>"),
    "nest_think_answer": ("<think>Answer: ", "42", "</think>Answer: 7\n"),
    "nest_fence": ("````\n```python\n", "def f(): return 42", "\n```\n````\n"),
    "nest_dollar": ("$\\text{$", "42", "$}$"),
    "nest_bold": ("**", "42", "**"),
}


def adversarial(name: str, size: int) -> str:
    """The input `name`, about `size` characters long (exactly `size` for a repeated unit)."""
    if name in NESTS:
        opening, inner, closing = NESTS[name]
        k = max(1, (size - len(inner)) // (len(opening) + len(closing)))
        return opening * k + inner + closing * k
    unit = UNITS[name]
    return (unit * (size // len(unit) + 1))[:size]


# Every shape: the repeated units and the balanced nests.
SHAPES: tuple[str, ...] = (*UNITS, *NESTS)


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
    "refusal_match": lambda t: S.refusal_match(t, "refuse"),
    "multichoice_options": lambda t: S.multichoice_regex(
        t, "B", options=["5 over 12", "$64.20", "Dorothy Hodgkin", "45 bottles"]),
    "numeric_match_es": lambda t: S.numeric_match(t, "42", language="es"),
    "numeric_match_th": lambda t: S.numeric_match(t, "42", language="th"),
    "triviaqa_forms": lambda t: S.triviaqa_match(t, ["Fly", "Blue-green", "Toyota"]),
    "math_base": lambda t: S.math_match(t, "40_9", timeout=5),
    "split_reasoning": S.split_reasoning,
    "normalize_text": S.normalize_text,
    "normalize_span": S.normalize_span,
    "last_box_group": E.last_box_group,
    "cut_run_on": E.cut_run_on,
    # A gold answer is data, not a reply, but a served /verify takes it from the body.
    "math_gold": lambda t: S.math_match("\\boxed{1}", t, timeout=5),
    "extract_code": lambda t: extract_code(t, "f"),
    "parse_simpleqa": lambda t: _judged(J.parse_simpleqa, t),
    "parse_rubric_reply": lambda t: _judged(J.parse_rubric_reply, t),
    "parse_xstest": lambda t: _judged(J.parse_xstest, t),
    "parse_correctness": lambda t: _judged(J.parse_correctness, t),
}


def _judged(parse: Callable[[str], object], reply: str) -> object:
    """A judge parser's verdict; `JudgeParseError` is its answer to a reply with no grade."""
    try:
        return parse(reply)
    except J.JudgeParseError as exc:
        return exc


def run_all(scorer: str, size: int, report: Callable[[str], None]) -> None:
    """Call `scorer` on every adversarial input of `size`, reporting each input's name first."""
    fn = SCORERS[scorer]
    for name in SHAPES:
        report(name)
        fn(adversarial(name, size))
