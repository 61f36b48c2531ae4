"""split_reasoning and the content/reasoning fallback rule."""

from __future__ import annotations

import pytest

from benchmarks.scoring import numeric_match, split_reasoning


@pytest.mark.parametrize(
    ("content", "reasoning_content", "answer", "reasoning"),
    [
        ("The answer is 4.", None, "The answer is 4.", None),
        ("<think>2+2 is 4</think>\n\nThe answer is 4.", None, "The answer is 4.", "2+2 is 4"),
        ("<think>\nfirst</think>A<think>second</think>B", None, "A\nB", "first\n\nsecond"),
        # Chat template put <think> in the prompt: only the closing tag comes back.
        (
            "Let me count... 3, 4.\n</think>\n\n**Answer:** 4",
            None,
            "**Answer:** 4",
            "Let me count... 3, 4.",
        ),
        # Generation stopped while thinking.
        ("<think>I need to compute 17*3 = 51, then", None, "", "I need to compute 17*3 = 51, then"),
        ("Partial answer. <think>more thoughts", None, "Partial answer.", "more thoughts"),
        ("The answer is 7.", "Thinking: 3+4=7", "The answer is 7.", "Thinking: 3+4=7"),
        ("<THINK>x</THINK>y", "sep", "y", "sep\n\nx"),
        ("<thinking>plan</thinking>done", None, "done", "plan"),
        (None, None, "", None),
        ("", "only reasoning", "", "only reasoning"),
        ("   \n  ", "  ", "", None),
    ],
)
def test_split_reasoning(
    content: str | None, reasoning_content: str | None, answer: str, reasoning: str | None
) -> None:
    assert split_reasoning(content, reasoning_content) == (answer, reasoning)


def test_decoy_in_think_block_is_ignored() -> None:
    r = numeric_match("<think>Maybe it is 100? No.</think>The answer is 10.", "10")
    assert r.reward == 1.0
    assert r.scoring_details["source"] == "content"
    r = numeric_match("<think>The answer is 10.</think>The answer is 100.", "10")
    assert r.reward == 0.0
    assert r.extracted_answer == "100"


def test_answer_only_in_reasoning_is_used_and_recorded() -> None:
    r = numeric_match("", "18", reasoning="16 - 3 - 4 = 9 eggs, 9 * 2 = 18.\n#### 18")
    assert r.reward == 1.0
    assert r.scoring_details["source"] == "reasoning"
    assert r.scoring_details["method"] == "hash_marker"
    assert r.scoring_details["reasoning_decision"] == "final_answer"
    # Unclosed <think> that states a final answer: credited from the reasoning.
    r = numeric_match("<think>so she earns $18 per day, so the answer is 18", "18")
    assert (r.reward, r.scoring_details["source"]) == (1.0, "reasoning")


def test_truncated_reasoning_without_a_final_answer_gets_no_credit() -> None:
    # The generation stopped mid-thought (issue 16, pattern 4): its last number is not an
    # answer, and the decision is recorded.
    r = numeric_match("<think>so she earns $18 per day", "18")
    assert r.reward == 0.0
    assert r.scoring_details["method"] == "none"
    assert r.scoring_details["reasoning_decision"] == "no_final_answer:last_number"


def test_reasoning_fallback_can_be_disabled() -> None:
    r = numeric_match("", "18", reasoning="#### 18", use_reasoning=False)
    assert r.reward == 0.0
    assert r.scoring_details["method"] == "none"


def test_content_wins_over_reasoning_even_when_wrong() -> None:
    r = numeric_match("I think it's 17.", "18", reasoning="#### 18")
    assert r.reward == 0.0
    assert r.scoring_details["source"] == "content"


def test_thinking_cut_off_after_a_tentative_answer_is_no_answer() -> None:
    from benchmarks.scoring.reasoning import thinking_cut_off

    cut = "<think>7 boxes of 6 make 42, so the answer is 42. Let me verify with the other"
    assert thinking_cut_off(cut) and not thinking_cut_off("<think>a</think>42")
    r = numeric_match(cut, "42")
    assert r.reward == 0.0 and r.scoring_details["reasoning_decision"] == "truncated:answer_is"
    # A question mark makes the statement tentative even at the very end.
    assert numeric_match("<think>7 * 6 = 42, so the answer is 42?", "42").reward == 0.0
    # Thinking whose last words are the final answer (the tag never closed) still counts.
    done = numeric_match("<think>7 * 6 = 42.\nThe answer is 42.", "42")
    assert done.reward == 1.0 and done.scoring_details["reasoning_decision"] == "final_answer"
