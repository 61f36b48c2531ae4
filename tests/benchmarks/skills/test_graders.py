"""Skills' grading rules on hand-written cases, each following the Skills file it cites
(NVIDIA-NeMo/Skills at 8b18f39)."""

from __future__ import annotations

import time

import pytest

from benchmarks.skills.graders import code_completion, extract_boxed, math_equal, mcq_letter


@pytest.mark.parametrize(("text", "want"), [
    # as nemo_skills/evaluation/math_grader.py:extract_answer does: the LAST \boxed, braces matched
    ("first \\boxed{1} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("\\boxed{a{b}c} trailing", "a{b}c"),
    ("no box here: the answer is 5", None),   # no `\boxed`: no answer (no regex fallback)
    ("\\boxed 5", None),                      # not `\boxed{`: the assertion fails -> None
    ("\\boxed{unclosed", None),
    ("\\fbox{3}", None),                      # `\fbox` alone is never reached
])
def test_extract_boxed_follows_math_grader(text: str, want: str | None) -> None:
    assert extract_boxed(text) == want


@pytest.mark.parametrize(("gold", "pred", "want"), [
    # as nemo_skills/evaluation/math_grader.py:math_equal does
    (42, "42", True),
    ("50\\%", "50", True),                 # a percentage loses its sign
    ("12", "12.", True),                   # a trailing sentence period goes
    ("C", "(C)", True),                    # a gold option letter compared as a letter
    ("Evelyn", "Evelyn", True),
    ("Evelyn", "evelyn", False),           # literal answers are compared literally
    ("Monday", "Tuesday", False),
    ("\\frac{1}{2}", "0.5", True),         # symbolic fallback
    ("p - q", "-q + p", True),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3, \\pi/2)", True),
    ("7", None, False),                    # nothing extracted is never equal
    ("7", "8", False),
])
def test_math_equal_follows_math_grader(gold: object, pred: str | None, want: bool) -> None:
    assert math_equal(gold, pred, timeout=5) is want


@pytest.mark.parametrize(("text", "want"), [
    # as nemo_skills/evaluation/evaluator/mcq.py:eval_mcq's extract_letter does
    ("Reasoning...\nAnswer: C", ("C", "answer_line")),
    ("**Answer:** D", ("D", "answer_line")),
    ("answer: b", ("b", "answer_line")),            # case-insensitive label, letter kept as written
    ("Answer: A at first. Answer: E", ("E", "answer_line")),  # the last one
    ("Answer: Apple", (None, "none")),             # a word, not a letter
    ("\\boxed{B}", ("B", "boxed")),
    ("\\boxed{\\text{(C) Paris}}", ("C", "boxed")),  # longer box: its last standalone A-J
    ("\\boxed{B} but Answer: C", ("B", "boxed")),  # the box wins over the answer line
    ("\\boxed{xyz}", ("xyz", "boxed")),            # kept as is, then wrong against a letter
    ("I think it is C.", (None, "none")),
])
def test_mcq_letter_follows_eval_mcq(text: str, want: tuple[str | None, str]) -> None:
    assert mcq_letter(text) == want


@pytest.mark.parametrize(("gen", "completion", "method"), [
    # as nemo_skills/evaluation/evaluator/code.py:preprocess_code does
    ("Here:\n```python\n    return 1\n```\nmore ```python\nx\n```", "return 1", "fence_python"),
    ("```\nreturn 2\n```", "return 2", "fence"),
    ("<think>plan ```python\nbad\n```</think>\n```python\nreturn 3\n```", "return 3", "fence_python"),
    ("<think>never closed ```python\nreturn 4\n```", "", "unfinished_think"),
    ("    return 5", "return 5", "plain"),
])
def test_code_completion_follows_preprocess_code(gen: str, completion: str, method: str) -> None:
    got = code_completion(gen)
    assert (got.completion, got.method) == (completion, method)


def test_extraction_is_linear_on_adversarial_answers() -> None:
    """A long box full of letters and a long run of `Answer:` labels: Skills' look-ahead
    regex rescans the rest of the text at every letter; nel's scan is one pass."""
    box = "\\boxed{" + "A " * 200_000 + "}"
    lines = "Answer: A\n" * 100_000
    start = time.perf_counter()
    assert mcq_letter(box) == ("A", "boxed")
    assert mcq_letter(lines) == ("A", "answer_line")
    assert extract_boxed("\\boxed{" + "{" * 200_000) is None
    assert time.perf_counter() - start < 2.0
