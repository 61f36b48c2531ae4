"""The HTML report shows prompts and responses faithfully: escaped, whole, and summarised by
their words (issue 35, item 5: a tiny model's responses showed as `"`, prompts were cut in
the middle of a word)."""

from __future__ import annotations

import html
import re

from nel_assets.engine.reports.html import SUMMARY_CHARS, TEXT_CAP, _text_cell


def _summary(cell: str) -> str:
    m = re.search(r"<summary>(.*?)</summary>", cell, re.S)
    assert m, cell
    return html.unescape(m.group(1))


def _body(cell: str) -> str:
    m = re.search(r"<pre>(.*?)</pre>", cell, re.S)
    assert m, cell
    return html.unescape(m.group(1))


def test_a_response_that_opens_with_a_lone_quote_is_summarised_by_its_words() -> None:
    response = '"\n\nOnce upon a time, there was a little girl named Lily. She loved to play outside in the park with her dog.'
    cell = _text_cell(response)
    assert _summary(cell).startswith('" Once upon a time, there was a little girl')
    assert _body(cell) == response


def test_summaries_end_and_start_at_word_boundaries() -> None:
    words = [f"word{i}" for i in range(200)]
    text = " ".join(words)
    head = _summary(_text_cell(text))
    assert head.endswith("…") and len(head) <= SUMMARY_CHARS + 1
    assert all(w in words for w in head[:-1].split())  # no word cut in two
    tail = _summary(_text_cell(text, last=True))
    assert tail.startswith("…") and tail.endswith("word199")
    assert all(w in words for w in tail[1:].split())


def test_long_prompts_are_whole_and_escaped() -> None:
    prompt = "<script>alert('x')</script> & " + "Question: how many apples? " * 400  # ~11k chars
    cell = _text_cell(prompt, last=True)
    assert "<script>" not in cell and "&lt;script&gt;" in cell
    assert _body(cell) == prompt  # whole: the old 4,000-character cap cut it


def test_short_text_is_shown_as_it_is() -> None:
    assert _body(_text_cell("42")) == "42" and "<details>" not in _text_cell("42")
    assert "(empty)" in _text_cell("  \n ")


def test_only_a_runaway_text_is_cut_at_a_boundary_and_says_so() -> None:
    text = "lorem ipsum " * (TEXT_CAP // 6)
    body = _body(_text_cell(text))
    kept, note = body.rsplit("\n", 1)
    assert text.startswith(kept) and kept.endswith(("lorem", "ipsum"))
    assert "more characters: the whole text is in results.jsonl" in note
