"""The final answer of a math reply: `\\boxed{}` (nested braces), `\\fbox{}`, "final answer is
$...$", an `Answer:` line, the last `$...$`, the last number (step 1 of `math_equiv`'s pipeline)."""

from __future__ import annotations

import re

from benchmarks.scoring.extract import (
    MAX_SEGMENT,
    Extraction,
    answer_is_segments,
    last_box_group,
    last_matches,
    math_spans,
)
from benchmarks.scoring.numeric import _NUM_RE

_FINAL_IS_RE = re.compile(r"final\s+answer\s+is\s*:?\s*", re.IGNORECASE)
_ANSWER_COLON_RE = re.compile(
    r"(?:\*\*)?\banswer\s*(?:\*\*)?\s*[:：]\s*(?:\*\*)?\s*", re.IGNORECASE
)
# Longer "answers" (a runaway generation inside `\\boxed{`) are compared as plain strings:
# the LaTeX normalisation and the structural comparison recurse and rescan, so they only
# ever see inputs of bounded size.
MAX_MATH_ANSWER = 1000


# An exact answer followed by its decimal value: the exact one is the answer.
_APPROX_RE = re.compile(
    r",?\s*\(?\s*(?:approximately|approx\.?|about|roughly|or\s+about|which\s+is\s+about)\b"
    r"|\s*(?:\\approx|≈)",
    re.IGNORECASE,
)


def _after_marker(text: str, pos: int) -> str | None:
    """The answer right after a marker: a `$...$` span if one starts there, else the line."""
    rest = text[pos : pos + MAX_SEGMENT]
    spans = math_spans(rest)
    if spans and not rest[: spans[0][1]].strip(" *:"):
        return spans[0][0].strip()
    line = rest.split("\n", 1)[0]
    # Minerva's few-shot format ends "The final answer is $x$. I hope it is correct."
    line = re.split(r"\.\s+I hope|\s+I hope", line, maxsplit=1)[0]
    approx = _APPROX_RE.search(line)
    if approx and line[: approx.start()].strip():
        line = line[: approx.start()]
    line = line.strip().rstrip(".").strip()
    return line or None


_BOLD_RE = re.compile(r"\*\*([^*\n]{1,80})\*\*")
# A plain-text tuple or interval in the last lines: "the point is (3, π/2)."
_PLAIN_TUPLE_RE = re.compile(r"[(\[][^()\[\]\n$,]{1,80},[^()\[\]\n$]{1,80}[)\]]")
_APPROX_BEFORE_RE = re.compile(
    r"(?:approximately|approx\.?|about|roughly|\\approx|≈)\s*\$*\s*$", re.IGNORECASE
)


def _boxed_answer(text: str) -> Extraction | None:
    """The last box, or the boxes stated together with it (one per root) as a list."""
    group = last_box_group(text)
    if not group:
        return None
    contents: list[str] = []
    for content, _ in group:
        if content.strip() not in contents:
            contents.append(content.strip())
    return Extraction(", ".join(contents), "boxed", group[0][1])


# A value restated after the box: a number, a fraction or root, a parenthesised tuple; never
# prose ("The answer is reasonable because...").
_MATHY_RE = re.compile(r"[-−]?(?:\d|\\(?:d?frac|sqrt|pi)|\()[^\n]{0,80}")
_PROSE_WORD_RE = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{4,}")


def _restated_after(text: str, boxed: Extraction) -> Extraction | None:
    """A later "the answer is <value>" that corrects the box (`\\boxed{6}` ... "only 5
    remain. The answer is 5."): the last committed answer wins."""
    end = boxed.start + len(boxed.answer or "")
    tail = text[end:]
    for _seg, off in reversed(answer_is_segments(tail)):
        ans = _after_marker(tail, off)
        if ans and _MATHY_RE.fullmatch(ans) and not _PROSE_WORD_RE.search(ans):
            return Extraction(ans, "answer_is", end + off)
    return None


def extract_math_answer(text: str) -> Extraction | None:
    """Find the final answer of a math solution.

    Linear in the length of `text` (see `extract.MAX_SEGMENT` / `MAX_MARKERS`).

    Args:
        text: The answer part of a response (reasoning already split off).

    Returns:
        The raw LaTeX of the answer with the rule that found it (`boxed`, `answer_is`,
        `answer_line`, `last_latex`, `bold_answer`, `plain_tuple`, `last_number`), or
        None. Boxes stated together (`x = \\boxed{2}` and `x = \\boxed{-3}`) are one
        answer, their list; a decimal approximation after an exact value is skipped.
    """
    if not text:
        return None
    boxed = _boxed_answer(text)
    if boxed:
        return _restated_after(text, boxed) or boxed
    markers: list[tuple[int, str]] = []
    for regex, method in ((_FINAL_IS_RE, "answer_is"), (_ANSWER_COLON_RE, "answer_line")):
        markers += [(m.end(), method) for m in last_matches(regex, text)]
    markers += [(off, "answer_is") for _, off in answer_is_segments(text)]
    for pos, method in sorted(markers, reverse=True):
        ans = _after_marker(text, pos)
        if ans:
            return Extraction(ans, method, pos)
    for inner, start in reversed(math_spans(text)):
        if inner.strip() and not _APPROX_BEFORE_RE.search(text[max(0, start - 40) : start]):
            return Extraction(inner.strip(), "last_latex", start)
    tail = text[-MAX_SEGMENT:]
    base = len(text) - len(tail)
    bolds = list(_BOLD_RE.finditer(tail))
    if bolds:
        return Extraction(bolds[-1].group(1).strip(), "bold_answer", base + bolds[-1].start(1))
    tuples = list(_PLAIN_TUPLE_RE.finditer(tail))
    if tuples:
        return Extraction(tuples[-1].group(0), "plain_tuple", base + tuples[-1].start())
    # The last number, without a list of every match (136 bytes per character of `1,1,...`).
    last = None
    for m in _NUM_RE.finditer(text):
        if m.group("int") or m.group("dec"):
            last = m
    if last is not None:
        return Extraction(last.group(0).strip(), "last_number", last.start())
    return None
