"""Separating a model's reasoning from its answer.

Reasoning models return their chain of thought either in a separate `reasoning_content`
field or inline in `<think>...</think>` blocks. Scorers must look for the answer in the
answer part only (a number in the reasoning is not the answer), and fall back to the
reasoning only when the answer part holds nothing extractable, recording that they did.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from benchmarks.scoring.extract import (
    NO_EXTRACTION,
    Extraction,
    ForwardSearch,
    cut_run_on,
    last_matches,
)

__all__ = ["FINAL_METHODS", "extract_with_fallback", "split_reasoning", "thinking_cut_off"]

# Rules that find an answer the model stated as final. Thinking that stops mid-way (the
# generation hit its token limit inside `<think>`) is full of numbers and letters that are
# not answers: from the reasoning, only these rules may take one.
FINAL_METHODS = frozenset({"hash_marker", "answer_line", "boxed", "answer_is", "hedged"})

_TAGS = "think|thinking|reasoning"
_OPEN_TAG_RE = re.compile(rf"<({_TAGS})>", re.IGNORECASE)
_CLOSE_RE = re.compile(rf"</(?:{_TAGS})>", re.IGNORECASE)
_OPEN_RE = re.compile(rf"<(?:{_TAGS})>", re.IGNORECASE)
# The closing tag of each kind, compiled once (not per reply).
_CLOSER_RES = {tag: re.compile(f"</{tag}>", re.IGNORECASE) for tag in _TAGS.split("|")}


def split_reasoning(
    content: str | None, reasoning_content: str | None = None
) -> tuple[str, str | None]:
    """Split a response into its answer text and its reasoning text.

    Handles, in `content`:
      * complete `<think>...</think>` blocks (also `<thinking>`, `<reasoning>`), removed;
      * a lone closing `</think>` with no opening tag, as produced when the chat template
        puts `<think>` in the prompt (DeepSeek-R1, Qwen3): everything before it is
        reasoning;
      * an unclosed `<think>` (the generation stopped while thinking): everything after
        it is reasoning.

    Args:
        content: The message content (may be None for a failed or empty reply).
        reasoning_content: The provider's separate reasoning field, if any.

    Returns:
        (answer_text, reasoning_text): the answer stripped of surrounding whitespace, and
        the reasoning parts joined by blank lines (None when there is no reasoning).
    """
    parts: list[str] = []
    if reasoning_content and reasoning_content.strip():
        parts.append(reasoning_content.strip())
    text = content or ""
    if "<" not in text:
        # Every tag starts with `<`: most replies hold none, and the scans below (run
        # for every sample, often twice) would find nothing.
        return text.strip(), (parts[0] if parts else None)

    text = _remove_blocks(text, parts)
    closes = list(_CLOSE_RE.finditer(text))
    if closes:
        last = closes[-1]
        parts.append(_OPEN_RE.sub("", text[: last.start()]).strip())
        text = text[last.end() :]
    opened = _OPEN_RE.search(text)
    if opened:
        parts.append(text[opened.end() :].strip())
        text = text[: opened.start()]
    reasoning = "\n\n".join(p for p in parts if p)
    return text.strip(), (reasoning or None)


def thinking_cut_off(content: str | None) -> bool:
    """Whether the reply stops inside a `<think>` block (opened and never closed after).

    Such a reply is truncated: the generation hit its limit while thinking, so whatever
    the reasoning holds ("so the answer is 12? Let me check...") was never committed to.
    """
    text = content or ""
    if "<" not in text:
        return False
    opened = last_matches(_OPEN_RE, text, limit=1)
    return bool(opened) and _CLOSE_RE.search(text, opened[-1].end()) is None


def extract_with_fallback(
    response: str | None,
    reasoning: str | None,
    extractor: Callable[[str], Extraction | None],
    *,
    use_reasoning: bool = True,
    details: dict[str, Any] | None = None,
) -> tuple[Extraction, str, str, str | None]:
    """Run `extractor` on the answer part, and on the reasoning only if that finds nothing.

    Args:
        response: The raw response content (may contain `<think>` blocks).
        reasoning: Separate reasoning text, if the provider returned one.
        extractor: Returns an `Extraction` (or None / an empty one when nothing is found).
        use_reasoning: Set False to never take an answer from the reasoning.
        details: When given, receives the decisions made: `run_on_cut` (the answer ran on
            into a next few-shot question and was cut there) and `reasoning_decision`
            (`unused`, `final_answer` when the reasoning stated one, `no_final_answer`
            when it held only a `<method>` guess, which is not taken, or `truncated` when
            the reply stopped inside `<think>`: nothing in it was committed to).

    Returns:
        (extraction, source, answer_text, reasoning_text) where source is `content` or
        `reasoning`; a failed extraction is `NO_EXTRACTION` with source `content`.
    """
    answer_text, reasoning_text = split_reasoning(response, reasoning)
    answer_text, cut = cut_run_on(answer_text)
    notes: dict[str, Any] = details if details is not None else {}
    if cut:
        notes["run_on_cut"] = True
    notes["reasoning_decision"] = "unused"
    declined = NO_EXTRACTION
    if answer_text:
        ext = extractor(answer_text)
        if ext:
            return ext, "content", answer_text, reasoning_text
        if ext is not None and ext.method != "none":
            declined = ext  # a rule that read the reply as no answer (`no_option_fits`)
    if use_reasoning and reasoning_text:
        ext = extractor(reasoning_text)
        if ext and not answer_text and thinking_cut_off(response) and not _closes(reasoning_text, ext):
            # Cut off while thinking, after a tentative answer ("so it's 12? Let me check").
            notes["reasoning_decision"] = f"truncated:{ext.method}"
            return NO_EXTRACTION, "content", answer_text, reasoning_text
        if ext and ext.method in FINAL_METHODS:
            notes["reasoning_decision"] = "final_answer"
            return ext, "reasoning", answer_text, reasoning_text
        if ext:
            notes["reasoning_decision"] = f"no_final_answer:{ext.method}"
    return declined, "content", answer_text, reasoning_text


_SENTENCE_END_RE = re.compile(r"[.!?。！？\n]")
# A unit or a short remark may follow the answer in its sentence ("is 18 dollars in all").
_WORDS_AFTER_ANSWER = 3
_CLOSING_WINDOW = 2000


def _closes(text: str, ext: Extraction) -> bool:
    """Whether the answer at `ext.start` is the last thing `text` says: its sentence ends
    the text and is not a question (thinking cut off after it stated an answer in passing
    is not an answer; thinking whose last words are the answer, tag never closed, is)."""
    if ext.start < 0:
        return False
    rest = text[ext.start : ext.start + _CLOSING_WINDOW]
    end = _SENTENCE_END_RE.search(rest)
    sentence = rest if end is None else rest[: end.start()]
    if len(sentence.split()) > _WORDS_AFTER_ANSWER + 1:
        return False  # "the answer is 9, but wait the question says": thinking went on
    if end is None:
        return len(rest) < _CLOSING_WINDOW
    if end.group(0) in "?？":
        return False
    return not rest[end.end() :].strip(" \t\n*$`.。")


def _remove_blocks(text: str, parts: list[str]) -> str:
    """Replace each complete `<tag>...</tag>` block by a newline, appending its inside to parts.

    The same blocks as the regex `<(tag)>(.*?)</\\1>` scanned left to right, in linear time:
    that regex rescans to the end of the text from every unclosed opening tag.
    """
    closers = {tag: ForwardSearch(pat, text) for tag, pat in _CLOSER_RES.items()}
    out: list[str] = []
    pos = 0
    while True:
        m = _OPEN_TAG_RE.search(text, pos)
        if m is None:
            break
        close = closers[m.group(1).lower()].search(m.end())
        if close is None:
            # Unclosed here: the regex would move on one character, and so do we.
            out.append(text[pos : m.start() + 1])
            pos = m.start() + 1
            continue
        out.append(text[pos : m.start()])
        parts.append(text[m.end() : close.start()].strip())
        out.append("\n")
        pos = close.end()
    out.append(text[pos:])
    return "".join(out)
