"""The `#### N` fast path of extract_number gives exactly what the full search gives."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.scoring import numeric
from benchmarks.scoring.numeric import extract_number

# Pieces real replies are made of, the other rules' markers among them: each one could
# compete with a closing `#### N` if the fast path's reasoning were wrong.
PIECES = [
    "Step by step.", "\n", "\n\n", " ", "  ", "\t", "So", "the answer is", "The answer is 7.",
    "Answer:", "**Answer:**", "Final Answer: 12", r"\boxed{", r"\boxed{5}", "}", "{", "**",
    "**9**", "=", "≈", "or", "either 3 or 4", "####", "#", "####5", "-", "−", "$", "%", "1,234",
    "3/4", "0.5", "12", "007", "٤٢", "42", "x", "In 4 weeks,", "、", "。", "\u00a0", "\u3000",
    "万", "percent", "*", "_", "`", "\\frac{1}{2}", "Réponse : 8", "答案：6",
]
TAILS = ["#### 42", "####42", "#### 0042", "####\n\n42", "#### 42\n", "#### 42  \n ", "#### 7",
         "#### 1234567890123", "##### 42", "#### 42 #### 5", "#### 5 #### 42", "#### -42",
         "#### 42.5", "#### 42%", "#### 1,234", "#### 42x", "#### ٤٢", "#### 42\u00a0",
         "#### 42\u3000", "**#### 42**", "#### 42 }", "#### 9" * 3, "#### " + "9" * 301]


def full_search(text: str, language: str | None = None) -> object:
    orig = numeric._closing_hash
    numeric._closing_hash = lambda _text: None
    try:
        return extract_number(text, language)
    finally:
        numeric._closing_hash = orig


@settings(max_examples=3000, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(PIECES), max_size=12), st.sampled_from(TAILS),
       st.sampled_from([None, "de", "fr"]))
def test_fast_path_matches_full_search(body: list[str], tail: str, language: str | None) -> None:
    text = "".join(body) + tail
    assert extract_number(text, language) == full_search(text, language)


@pytest.mark.parametrize("text", ["Step by step.\n#### 42", "#### 42", "a\n####\t42 \n",
                                  r"\boxed{42} so #### 42", "Answer: 42\n#### 42"])
def test_fast_path_is_taken_for_a_closing_hash(text: str) -> None:
    ext = numeric._closing_hash(text)
    assert ext is not None and ext.answer == "42" and ext.method == "hash_marker"
    assert ext == full_search(text)


@pytest.mark.parametrize("text", ["#### 5 #### 42", "##### 42", "#### -42", "#### 42.5",
                                  "#### 1,234", "#### 42 then more", "#### ٤٢", "no marker 42"])
def test_fast_path_declines_other_shapes(text: str) -> None:
    assert numeric._closing_hash(text) is None
