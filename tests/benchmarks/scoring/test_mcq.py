"""mcq_extract / multichoice_regex on real multiple-choice answer styles and decoys."""

from __future__ import annotations

import pytest

from benchmarks.scoring import letters_for, mcq_extract, multichoice_regex

LONG_COT = (
    "Let's analyze each option.\n"
    "A) Mitochondria produce ATP, but that is not what is asked.\n"
    "Option B ignores the membrane potential.\n"
    "(D) is a distractor.\n"
)

# (response, letter or None, method)
CASES = [
    ("**Answer:** C", "C", "answer_line"),
    ("**Answer: C**", "C", "answer_line"),
    ("Answer: (C)", "C", "answer_line"),
    ("Answer: C) Paris", "C", "answer_line"),
    ("Answer: Option B", "B", "answer_line"),
    (r"Answer: $\boxed{D}$", "D", "answer_line"),
    ("ANSWER: a", "A", "answer_line"),
    (f"{LONG_COT}\nAnswer: C", "C", "answer_line"),
    ("The correct answer is C) Paris.", "C", "answer_is"),
    ("Thus, the answer is (B).", "B", "answer_is"),
    ("The answer is A because the enzyme is saturated.", "A", "answer_is"),
    ("The best answer is: D", "D", "answer_is"),
    ("B is correct.", "B", "answer_is"),
    (r"$\boxed{C}$", "C", "boxed"),
    (r"\boxed{\text{(B)}}", "B", "boxed"),
    ("C.", "C", "bare_letter"),
    ("C", "C", "bare_letter"),
    ("(D)", "D", "bare_letter"),
    ("B) 42 kg", "B", "bare_letter"),
    ("After weighing everything.\n\nD", "D", "bare_letter"),
    ("**C**", "C", "bold_answer"),
    ("So we pick **B) the second law**.", "B", "answer_is"),  # "we pick B" states the choice
    ("Options (A) and (C) both look right, but (C) is more precise.", "C", "paren_letter"),
    # Final stated answer wins over earlier ones.
    ("Answer: A\n\nWait, re-checking the units... Answer: D", "D", "answer_line"),
    ("The answer is (B). Hmm, no: the answer is (C).", "C", "answer_is"),
    # English words "A" and "I" are not answers.
    ("I think A is wrong. A better choice is clear.", None, "none"),
    ("Answer: I think it is not clear.", None, "none"),
    ("The answer is a bit tricky.", None, "none"),
    ("Answer: a dog", None, "none"),
    ("I", None, "none"),  # only A-D are options
    # Localized prefixes.
    ("Réponse : B", "B", "answer_line"),
    ("Antwort: C", "C", "answer_line"),
    ("Respuesta: D", "D", "answer_line"),
    ("答案：A", "A", "answer_line"),
    ("答案是 B", "B", "answer_is"),
    # Out of range or nothing.
    ("Answer: E", None, "none"),
    ("", None, "none"),
    ("I have no idea.", None, "none"),
]


@pytest.mark.parametrize(("response", "letter", "method"), CASES)
def test_mcq_extract(response: str, letter: str | None, method: str) -> None:
    ext = mcq_extract(response, "ABCD")
    assert (ext.answer, ext.method) == (letter, method)


@pytest.mark.parametrize(
    ("response", "letter"),
    [
        ("The answer is (J).", "J"),
        ("Answer: I", "I"),
        ("the answer is I.", "I"),
        ("Answer: I believe it is G", "G"),  # issue 16: "I think it's C" is C
        ("I'm fairly sure. Answer: H", "H"),
    ],
)
def test_ten_options(response: str, letter: str | None) -> None:
    assert mcq_extract(response, letters_for(10)).answer == letter


def test_multichoice_regex_scores_and_records() -> None:
    r = multichoice_regex(f"{LONG_COT}\n**Answer:** (C)", "C")
    assert r.reward == 1.0
    assert r.extracted_answer == "C"
    assert r.scoring_details["method"] == "answer_line"
    assert r.scoring_details["source"] == "content"
    assert multichoice_regex("Answer: B", "(C)").reward == 0.0
    assert multichoice_regex("", "C").reward == 0.0


def test_multichoice_reasoning_fallback_and_think_decoy() -> None:
    r = multichoice_regex("<think>Answer: A? no...</think>\nAnswer: B", "B")
    assert r.reward == 1.0 and r.scoring_details["source"] == "content"
    r = multichoice_regex(None, "B", reasoning="...so the answer is (B).")
    assert (r.reward, r.scoring_details["source"]) == (1.0, "reasoning")


def test_multichoice_n_options_and_bad_gold() -> None:
    assert multichoice_regex("Answer: J", "J", n_options=10).reward == 1.0
    assert multichoice_regex("Answer: J", "J", letters="ABCDEFGHIJ").reward == 1.0
    with pytest.raises(ValueError, match="not among"):
        multichoice_regex("Answer: E", "E", n_options=4)
    with pytest.raises(ValueError):
        letters_for(1)
