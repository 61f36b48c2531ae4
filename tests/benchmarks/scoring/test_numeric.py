"""numeric_match / extract_number on the ways real models write GSM8K/MGSM answers."""

from __future__ import annotations

from fractions import Fraction

import pytest

from benchmarks.scoring import extract_number, numeric_match, parse_number

GSM_COT = (
    "Janet's ducks lay 16 eggs per day. She eats 3 and bakes with 4, so she has "
    "16 - 3 - 4 = 9 eggs left. She sells them for $2 each: 9 * 2 = 18."
)

# (response, gold, reward, method)
CASES = [
    ("#### 42", "42", 1.0, "hash_marker"),
    (f"{GSM_COT}\n#### 18", "18", 1.0, "hash_marker"),
    ("The answer is 42.", "42", 1.0, "answer_is"),
    ("So the final answer is 42", "42", 1.0, "answer_is"),
    (r"Therefore she makes $\boxed{18}$ dollars.", "18", 1.0, "boxed"),
    (r"\boxed{\$1,234.50}", "1234.5", 1.0, "boxed"),
    ("**Answer:** 42", "42", 1.0, "answer_line"),
    ("**Answer:**\n\n42", "42", 1.0, "answer_line"),
    ("Answer: $1,234.50", "1234.50", 1.0, "answer_line"),
    ("Final Answer: 72 clips", "#### 72", 1.0, "answer_line"),
    ("She has 1,234 marbles.", "1234", 1.0, "last_number"),
    ("1,234", "1,234", 1.0, "last_number"),
    ("42.00", "42", 1.0, "last_number"),
    ("The temperature drops to -3 degrees.", "-3", 1.0, "last_number"),
    ("x = -3", "-3", 1.0, "last_number"),
    ("3/4", "0.75", 1.0, "last_number"),
    ("The answer is 0.75", "3/4", 1.0, "answer_is"),
    ("The value increased by 50%.", "50", 1.0, "last_number"),
    ("Answer: 150 %", "150", 1.0, "answer_line"),
    (f"{GSM_COT}\nThe answer is 18.", "18", 1.0, "answer_is"),
    # Decoys: the reasoning's numbers never beat the final stated answer.
    (f"{GSM_COT}\nThe answer is 18.", "9", 0.0, "answer_is"),
    ("The answer is 10. I considered 100 first.", "10", 1.0, "answer_is"),
    ("#### 18\nNote: 9 eggs at $2 each, 16 laid in total.", "18", 1.0, "hash_marker"),
    ("Answer: 18\n\n(16 - 3 - 4 = 9 and 9 * 2 = 18; step 3 checks out.)", "18", 1.0, "answer_line"),
    (r"We get $\boxed{18}$. Checking: 16 - 7 = 9, times 2.", "18", 1.0, "boxed"),
    ("The answer is 5 + 3 = 8.", "8", 1.0, "answer_is"),
    ("10", "100", 0.0, "last_number"),
    ("100", "10", 0.0, "last_number"),
    ("1,234", "234", 0.0, "last_number"),
    ("She buys 2 packs, so 2 * 12 = 24 eggs. **$24**", "24", 1.0, "bold_answer"),
    ("**Step 3: add them.**\nSo the total is 31", "31", 1.0, "last_number"),
    # Localized answer prefixes (MGSM).
    ("Réponse : 70\u202f000", "70000", 1.0, "answer_line"),
    ("Die Antwort ist 18.", "18", 1.0, "answer_is"),
    ("Antwort: 18", "18", 1.0, "answer_line"),
    ("Respuesta: 3", "3", 1.0, "answer_line"),
    ("答案：42", "42", 1.0, "answer_line"),
    ("Ответ: 25", "25", 1.0, "answer_line"),
    ("উত্তর: ১৮", "18", 1.0, "answer_line"),
    # Nothing to extract.
    ("", "18", 0.0, "none"),
    ("I don't know.", "18", 0.0, "none"),
]


@pytest.mark.parametrize(("response", "gold", "reward", "method"), CASES)
def test_numeric_match(response: str, gold: str, reward: float, method: str) -> None:
    r = numeric_match(response, gold)
    assert (r.reward, r.scoring_details["method"]) == (reward, method), r
    assert r.scoring_details["source"] == "content"
    if method == "none":
        assert r.extracted_answer is None


def test_none_response_scores_zero() -> None:
    r = numeric_match(None, "0")
    assert r.reward == 0.0 and r.scoring_details["method"] == "none"


def test_details_hold_normalised_forms() -> None:
    r = numeric_match("Answer: $1,234.50", "#### 1,234.5")
    assert r.scoring_details["normalized_pred"] == "1234.5"
    assert r.scoring_details["normalized_gold"] == "1234.5"


def test_tolerance_is_relative() -> None:
    assert numeric_match("1000000.5", "1000000").reward == 1.0  # 5e-7 relative
    assert numeric_match("1.01", "1").reward == 0.0
    assert numeric_match("0.0000001", "0").reward == 0.0


def test_gold_without_number_is_an_error() -> None:
    with pytest.raises(ValueError, match="no number"):
        numeric_match("42", "n/a")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("42", Fraction(42)),
        ("$1,234.50", Fraction(246900, 200)),
        ("-3", Fraction(-3)),
        ("3/4", Fraction(3, 4)),
        ("50%", Fraction(50)),
        ("42.00", Fraction(42)),
        (r"\frac{3}{4}", Fraction(3, 4)),
        (r"10,\!080", Fraction(10080)),
        (".5", Fraction(1, 2)),
        ("1,2", None),
        ("12 apples", None),
        ("", None),
    ],
)
def test_parse_number(text: str, value: Fraction | None) -> None:
    assert parse_number(text) == value


def test_lists_and_ranges_are_separate_numbers() -> None:
    assert extract_number("the primes 2, 3, 5").answer == "5"  # type: ignore[union-attr]
    assert extract_number("pages 1,2,3").answer == "3"  # type: ignore[union-attr]
    assert extract_number("from 5-10").answer == "10"  # type: ignore[union-attr]
    assert extract_number("no digits here") is None


@pytest.mark.parametrize(("text", "value"), [
    ("0", Fraction(0)), ("007", Fraction(7)), ("42", Fraction(42)), ("1,234", Fraction(1234)),
    ("1,234,567.25", Fraction(123456725, 100)), (".5", Fraction(1, 2)), ("0.125", Fraction(1, 8)),
    ("-3.50", Fraction(-7, 2)), ("3/4", Fraction(3, 4)), ("12.5/5", Fraction(5, 2)),
    ("$1,000.10", Fraction(10001, 10)), ("7万", Fraction(70000)), ("3万2500", Fraction(32500)),
    ("2億", Fraction(200000000)), ("١٢٣", Fraction(123)), ("١٢.٥", Fraction(25, 2)),
    ("５０", Fraction(50)), ("1\u00a0000", Fraction(1000)), ("-0.0", Fraction(0)),
    ("10/0", None), ("0.000", Fraction(0)), ("99.990", Fraction(9999, 100)),
])
def test_number_values_are_exact(text: str, value: Fraction | None) -> None:
    # The value is built from integers (not by parsing a string): it must be exact.
    from benchmarks.scoring.numeric import _NUM_RE, _value

    m = _NUM_RE.fullmatch(text)
    assert m is not None
    assert _value(m) == value
