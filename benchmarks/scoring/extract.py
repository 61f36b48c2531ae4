"""Shared extraction primitives: the `Extraction` record, answer markers, LaTeX boxes.

Every extractor in this package returns where the answer came from (`method`) so that
failure analysis can tell a model that answered in the wrong format from one that answered
wrongly. Nothing here imports anything heavy.
"""

from __future__ import annotations

import heapq
import re
from array import array
from collections import deque
from dataclasses import dataclass

__all__ = [
    "ANSWER_IS_PHRASES",
    "ANSWER_PREFIXES",
    "MAX_BOX_CONTENT",
    "MAX_MARKERS",
    "MAX_SEGMENT",
    "Extraction",
    "ForwardSearch",
    "answer_is_segments",
    "answer_line_segments",
    "cut_run_on",
    "find_boxed",
    "last_box_group",
    "last_boxed",
    "math_spans",
    "strip_markdown",
]

# Bounds that keep every extractor linear on any input (a reply is untrusted text: a 350 KB
# body of unclosed `\boxed{` once pinned `nel serve` for minutes). The answer a marker
# points at is on its line within MAX_SEGMENT characters, and only the last MAX_MARKERS
# markers of a kind are tried (the last stated answer wins), so the work per reply is the
# regex scan plus a constant.
MAX_SEGMENT = 2000
MAX_MARKERS = 64


@dataclass(frozen=True, slots=True)
class Extraction:
    """An answer pulled out of a model response.

    Attributes:
        answer: The extracted answer text (None when nothing was found).
        method: The rule that found it (`hash_marker`, `boxed`, `answer_line`, `answer_is`,
            `bold_answer`, `bare_letter`, `paren_letter`, `last_number`, ... or `none`).
        start: Character offset of the answer in the searched text (-1 if unknown).
    """

    answer: str | None
    method: str
    start: int = -1

    def __bool__(self) -> bool:
        return self.answer is not None


NO_EXTRACTION = Extraction(None, "none")

# "Answer:" in the languages of MGSM and the common multilingual benchmarks. Models asked
# in French frequently answer "Réponse :" (with the French space before the colon), Chinese
# and Japanese models use the full-width colon.
ANSWER_PREFIXES: tuple[str, ...] = (
    "final answer",
    "answer",
    "réponse finale",
    "réponse",
    "endgültige antwort",
    "antwort",
    "respuesta final",
    "respuesta",
    "risposta finale",
    "risposta",
    "resposta final",
    "resposta",
    "окончательный ответ",
    "ответ",
    "最终答案",
    "答案",
    "答え",
    "解答",
    "回答",
    "정답",
    "jibu",
    "উত্তর",
    "సమాధానం",
    "คำตอบ",
    "câu trả lời",
    "jawaban",
)

# "The answer is" phrasings; the captured text starts right after the phrase.
ANSWER_IS_PHRASES: tuple[str, ...] = (
    r"(?:the\s+)?(?:final|correct|right|best)\s+(?:answer|option|choice)\s+(?:is|would\s+be|should\s+be)",
    r"(?:the\s+)?answer\s+(?:is|would\s+be|should\s+be)",
    r"(?:la\s+)?r[ée]ponse\s+(?:finale\s+)?est",
    r"(?:die\s+)?(?:endg[üu]ltige\s+)?antwort\s+(?:ist|lautet)",
    r"(?:la\s+)?respuesta\s+(?:final\s+)?es",
    r"(?:la\s+)?risposta\s+(?:finale\s+)?[èe]",
    r"(?:a\s+)?resposta\s+(?:final\s+)?[ée]",
    r"ответ\s*(?:—|-|:)?\s*(?:будет|равен|это)?",
    r"答案(?:是|为|為)",
    r"答えは",
    r"jibu\s+(?:sahihi\s+|la\s+mwisho\s+)?ni",
    r"คำตอบ(?:ที่ถูกต้อง|สุดท้าย)?\s*(?:คือ|ได้แก่)",
    r"উত্তর\s*(?:হল|হলো|হচ্ছে|হবে)",
    # Telugu states it without a verb ("సరైన సమాధానం 48"): only a number right after counts.
    r"సమాధానం(?=\s*[-−]?\d)",
)

# Chinese, Japanese and Korean write no space between words: a marker right after such a
# character (`所以答案是 7`) is still a marker, while one glued to a Latin or Cyrillic letter
# is part of another word.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uff00-\uffef\u3000-\u303f"
# Thai writes no space between words either (`ดังนั้นคำตอบคือ 48`).
_NOT_AFTER_WORD = rf"(?<![^\W{_CJK}\u0e00-\u0e7f])"

# The first letters every marker can start with: a one-character look-ahead that rejects
# almost every position before the alternatives are tried (a 4x cheaper scan).
_PREFIX_FIRST = "".join(sorted({p[0] for p in ANSWER_PREFIXES}))
_ANSWER_IS_FIRST = "tfcrbaldeо答jคউస"

_PREFIX_RE = re.compile(
    rf"(?=[{_PREFIX_FIRST}])(?:^|(?<=[\s*#>_(\[{_CJK}]))(?:"
    + "|".join(re.escape(p).replace(r"\ ", r"\s+") for p in ANSWER_PREFIXES)
    + r")\s*(?:\*\*|__)?\s*[:：]",
    re.IGNORECASE | re.MULTILINE,
)
_ANSWER_IS_RE = re.compile(
    rf"(?=[{_ANSWER_IS_FIRST}])"
    + _NOT_AFTER_WORD
    + r"(?:"
    + "|".join(ANSWER_IS_PHRASES)
    + r")\s*[:：]?",
    re.IGNORECASE,
)


def answer_line_segments(text: str) -> list[tuple[str, int]]:
    """Text following each `Answer:`-style prefix (localized too), in order of appearance.

    The segment is the rest of the line; when that is empty (the answer is on the next line,
    as in `**Answer:**\\n42`) it is the next non-empty line.

    Args:
        text: The text to search.

    Returns:
        (segment, offset) pairs; offset is where the segment starts in `text`. Only the
        last `MAX_MARKERS` prefixes count, and a segment is at most `MAX_SEGMENT` long.
    """
    if ":" not in text and "：" not in text:
        return []  # every prefix ends in a colon: no scan for a reply without one
    return [_rest_of_line(text, m.end()) for m in last_matches(_PREFIX_RE, text)]


def answer_is_segments(text: str) -> list[tuple[str, int]]:
    """Text following each "the answer is"-style phrase, in order of appearance.

    Args:
        text: The text to search.

    Returns:
        (segment, offset) pairs; the segment runs to the end of the line (bounded as in
        `answer_line_segments`).
    """
    return [_rest_of_line(text, m.end()) for m in last_matches(_ANSWER_IS_RE, text)]


def last_matches(
    pattern: re.Pattern[str], text: str, limit: int = MAX_MARKERS
) -> list[re.Match[str]]:
    """The last `limit` non-overlapping matches of `pattern` in `text`, in order."""
    tail: deque[re.Match[str]] = deque(maxlen=limit)
    tail.extend(pattern.finditer(text))
    return list(tail)


def _rest_of_line(text: str, pos: int) -> tuple[str, int]:
    # Everything is read inside one window after the marker, so a marker costs at most
    # MAX_SEGMENT characters however long its line (or the run of blank lines after it).
    window = text[pos : pos + MAX_SEGMENT]
    end = window.find("\n")
    seg = window if end < 0 else window[:end]
    if strip_markdown(seg).strip():
        return seg, pos
    # Nothing after the marker on its line: the answer is on the next non-empty line.
    while end >= 0:
        start = end + 1
        end = window.find("\n", start)
        seg = window[start:] if end < 0 else window[start:end]
        if seg.strip():
            return seg, pos + start
    return "", pos


_MD_RE = re.compile(r"\*\*|__|(?<!\w)[*_](?!\s)|(?<!\s)[*_](?!\w)|`")


def strip_markdown(text: str) -> str:
    """Remove bold/italic/code markup (`**x**`, `_x_`, `` `x` ``), keeping the text."""
    return _MD_RE.sub("", text)


_TOKEN_RE = re.compile(r"[^\s$]+")

# One left-to-right scan finds box openers and braces together. `\\` is consumed first so
# that the brace after an escaped backslash still counts, but a `\` right before `\boxed`
# is skipped alone so the box is still seen; `\{` and `\}` are literal braces.
_BOX_SCAN_RE = re.compile(
    r"(\\(?:boxed|fbox|framebox)\s*)(\{)?|\\(?=\\(?:boxed|fbox|framebox))|\\\\|\\[{}]|([{}])"
)

# A box's content is cut to this many characters. Nothing longer is a final answer, and
# without the cut `\boxed{\boxed{...}}` copied every nested level: 20k levels (140 KB)
# took 1.4 GB.
MAX_BOX_CONTENT = 4 * MAX_SEGMENT


def find_boxed(text: str) -> list[tuple[str, int]]:
    """Contents of the last `MAX_MARKERS` `\\boxed{...}` / `\\fbox{...}` in `text`.

    Nested braces are included in a box's content, and the brace-less form `\\boxed 5` that
    some models emit is accepted. Linear in time and memory whatever the nesting: braces
    are matched in one scan, only the boxes still open are remembered (a depth each), only
    the last `MAX_MARKERS` boxes are kept, and a content is cut to `MAX_BOX_CONTENT`
    characters (the last stated answer wins, and a longer one is no answer).

    Args:
        text: The text to search.

    Returns:
        (content, offset) pairs in order of appearance (offset: where the content starts
        in `text`); unbalanced boxes are skipped.
    """
    if "\\" not in text:
        return []
    depth = 0
    # Boxes whose brace is still open: (brace depth, content start), innermost last. Two
    # int arrays, not a list of tuples: a nest of 100k open boxes stays a few bytes each.
    open_depths: array[int] = array("q")
    open_starts: array[int] = array("q")
    # The last boxes by start offset, as (start, end) spans; boxes close innermost first,
    # so a small heap keeps the latest-starting ones.
    kept: list[tuple[int, int]] = []

    def keep(start: int, end: int) -> None:
        if len(kept) < MAX_MARKERS:
            heapq.heappush(kept, (start, end))
        elif start > kept[0][0]:
            heapq.heapreplace(kept, (start, end))

    for m in _BOX_SCAN_RE.finditer(text):
        opener, box_brace, brace = m.group(1, 2, 3)
        if opener is not None:
            if box_brace is not None:
                depth += 1
                open_depths.append(depth)
                open_starts.append(m.end())
            elif opener[-1] in " \t":
                # "\boxed 5": the argument is the next token.
                tok = _TOKEN_RE.match(text, m.end())
                if tok:
                    keep(tok.start(), tok.end())
        elif brace == "{":
            depth += 1
        elif brace == "}" and depth:
            if open_depths and open_depths[-1] == depth:
                open_depths.pop()
                keep(open_starts.pop(), m.start())
            depth -= 1
    return [(text[i : min(j, i + MAX_BOX_CONTENT)], i) for i, j in sorted(kept)]


def last_boxed(text: str) -> tuple[str, int] | None:
    """The last box in `text` (see `find_boxed`), or None."""
    boxes = find_boxed(text)
    return boxes[-1] if boxes else None


class ForwardSearch:
    """Repeated `pattern.search(text, pos)` with non-decreasing `pos`, in linear total time.

    Scanners that look, from each of many start positions, for the next closing delimiter
    (`$`, `\\)`, `</think>`) would rescan the same tail again and again when it is absent:
    quadratic. The last answer is remembered: it stays valid for any later `pos` up to the
    match, and a failure stays a failure for every later `pos`.
    """

    def __init__(self, pattern: re.Pattern[str], text: str) -> None:
        self._pattern = pattern
        self._text = text
        self._from = -1
        self._hit: re.Match[str] | None = None
        self._exhausted = False

    def search(self, pos: int) -> re.Match[str] | None:
        """The first match starting at or after `pos` (pos never decreases between calls)."""
        if self._exhausted:
            return None
        if self._hit is not None and self._from <= pos <= self._hit.start():
            return self._hit
        self._from = pos
        self._hit = self._pattern.search(self._text, pos)
        if self._hit is None:
            self._exhausted = True
        return self._hit


# `\$` is a dollar sign inside math (`$\$32,\!348$`), never a delimiter.
_SPAN_OPEN_RE = re.compile(r"(?<!\\)\$|\\[(\[]")
# (closing delimiter, length of the opening one) per kind of span.
_SPAN_KINDS: dict[str, tuple[str, int]] = {
    "$$": ("$$", 2),
    "$": ("$", 1),
    "\\(": ("\\)", 2),
    "\\[": ("\\]", 2),
}


def math_spans(text: str) -> list[tuple[str, int]]:
    """Inner text and start offset of each `$$...$$`, `$...$`, `\\(...\\)`, `\\[...\\]` span.

    Same spans as the regex `\\$\\$(.+?)\\$\\$|\\$(.+?)\\$|\\\\\\((.+?)\\\\\\)|\\\\\\[(.+?)\\\\\\]` (DOTALL)
    scanned left to right, but linear: that regex rescans to the end of the text from every
    unclosed opener.
    """
    closers = {
        close: ForwardSearch(re.compile(r"(?<!\\)" + re.escape(close)), text)
        for close, _ in _SPAN_KINDS.values()
    }
    out: list[tuple[str, int]] = []
    pos = 0
    while True:
        m = _SPAN_OPEN_RE.search(text, pos)
        if m is None:
            return out
        p = m.start()
        kinds = ("$$", "$") if text.startswith("$$", p) else (m.group(0),)
        for kind in kinds:
            close, width = _SPAN_KINDS[kind]
            # `.+?` needs one character, so the closer is searched one past the content start.
            hit = closers[close].search(p + width + 1)
            if hit is not None:
                out.append((text[p + width : hit.start()], p))
                pos = hit.end()
                break
        else:
            pos = p + 1


# A base model asked in a few-shot format does not stop after its answer: it writes the
# next `Question:` of the pattern, often with that question's answer. The header is looked
# for only after the first answer marker (or after a short reply: the prompt itself ended
# in `Answer:`), so a chat model that restates the question first keeps its text.
_RUN_ON_RE = re.compile(
    r"\n[ \t]*(?:\*\*)?(?:question|q|problem|problème|frage|pregunta|domanda|pergunta|"
    r"вопрос|问题|問題|질문)(?:\s*\d+)?(?:\*\*)?\s*[:：.]",
    re.IGNORECASE,
)
_FIRST_MARKER_RE = re.compile(r"####|\\boxed|\\fbox")


def cut_run_on(text: str) -> tuple[str, bool]:
    """Cut a completion where it runs on into the next few-shot `Question:`.

    Args:
        text: The answer part of a response.

    Returns:
        (text, cut): the text before the continuation, and whether anything was cut.
    """
    # Most replies have no such header: one scan finds that out. Markers are looked for
    # only before the last header, so the work stays a few linear scans.
    if "\n" not in text or _RUN_ON_RE.search(text) is None:  # every header follows a newline
        return text, False
    headers = last_matches(_RUN_ON_RE, text, limit=1)
    head_limit = headers[-1].start()
    starts = [
        m.start()
        for m in (
            _FIRST_MARKER_RE.search(text, 0, head_limit),
            _PREFIX_RE.search(text, 0, head_limit),
            _ANSWER_IS_RE.search(text, 0, head_limit),
        )
        if m is not None
    ]
    # A first line that is only a short answer (` B`, ` 42.`) ends the completion too.
    head_at = len(text) - len(text.lstrip())
    head_end = text.find("\n", head_at)
    head = text[head_at : head_end if head_end >= 0 else len(text)].rstrip()
    if head and len(head) <= 20 and not head.endswith((":", "：")):
        starts.append(head_at + len(head))
    if not starts:
        return text, False
    m = _RUN_ON_RE.search(text, min(starts))
    if m is None or not text[: m.start()].strip():
        return text, False
    return text[: m.start()], True


# What may sit between two boxes that together state one answer: `$x = \boxed{2}$ and
# $x = \boxed{-3}$`, `\boxed{3}, \boxed{4}`, `\boxed{B} or \boxed{D}`.
_BOX_JOIN_RE = re.compile(
    r"[\s$,;]*(?:(?:and|or|\\text\s*\{\s*(?:and|or)\s*\}|\\q?quad)[\s$,;]*)?"
    r"(?:\\?[a-zA-Z]+(?:_\{?\w+\}?)?\s*=\s*)?[\s$]*"
)
_MAX_JOIN = 40


def last_box_group(text: str) -> list[tuple[str, int]]:
    """The last box of `text` with the boxes joined to it, in order.

    Boxes count as one statement when only connectors stand between them (`and`, `or`, a
    comma, `x =`, `$`), so one box per root reads as the list of roots, and `\\boxed{3} or
    \\boxed{4}` as an answer that commits to two values (wrong against a single gold).

    Args:
        text: The text to search.

    Returns:
        (content, offset) pairs (see `find_boxed`); empty when `text` has no box.
    """
    boxes = [b for b in find_boxed(text)[-MAX_MARKERS:] if b[0].strip()]
    if not boxes:
        return []
    group = [boxes[-1]]
    for prev in reversed(boxes[:-1]):
        prev_end = prev[1] + len(prev[0]) + 1
        head = group[0][1]
        if head - prev_end > _MAX_JOIN + 16:
            break
        between = text[prev_end:head]
        box_at = max(between.rfind("\\boxed"), between.rfind("\\fbox"))
        if box_at < 0 or box_at > _MAX_JOIN:
            break
        joiner = between[:box_at]
        if _BOX_JOIN_RE.fullmatch(joiner) is None:
            break
        group.insert(0, prev)
    return group
