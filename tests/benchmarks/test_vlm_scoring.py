"""VLMEvalKit's judge-free answer extraction, as nel reimplements it (`benchmarks.vlm_scoring`)."""

from __future__ import annotations

import pytest

from benchmarks.vlm_scoring import can_infer, verify_mcq, verify_yes_no, yes_or_no

CHOICES = {"A": "apple", "B": "banana", "C": "cherry", "D": "red grape"}


@pytest.mark.parametrize(("reply", "got"), [
    ("B", "B"), ("Answer: (C).", "C"), ("**D**", "D"), ("The answer is C", "C"),
    ("A or B", None),  # two option letters: no answer
    ("It is a banana.", "B"),  # no letter: the one option text inside the reply
    ("apple or banana", None),  # two option texts
    ("Cannot determine the answer", "Z"),  # VLMEvalKit's refusal phrases
    ("Z", "Z"),
    ("I think " + "very " * 40 + "banana", None),  # longer than twice the options: no text match
    ("", None),
])
def test_can_infer(reply: str, got: str | None) -> None:
    assert can_infer(reply, CHOICES) == got


@pytest.mark.parametrize(("reply", "got"), [
    ("Yes.", "Yes"), ("no, it is not", "No"), ("Yes and no", "Unknown"), ("Maybe", "Unknown"),
    ("NO!", "No"), ("yesterday", "Unknown"),
])
def test_yes_or_no(reply: str, got: str) -> None:
    assert yes_or_no(reply) == got


def test_verdicts_record_what_was_extracted() -> None:
    v = verify_mcq("Answer: B", "B", CHOICES)
    assert (v.reward, v.extracted_answer, v.scoring_details["method"]) == (1.0, "B", "vlmevalkit_can_infer")
    assert verify_mcq("Cannot determine the answer", "B", CHOICES).reward == 0.0
    v = verify_yes_no("I am not sure", "Yes")
    assert (v.reward, v.extracted_answer) == (0.0, None)
    assert verify_yes_no("yes", "Yes").reward == 1.0
