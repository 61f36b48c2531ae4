"""Multiple-choice answers (MMLU, MMLU-Pro, GPQA, ...): finding the chosen letter.

Extraction priority, highest first (within a rule the *last* occurrence wins):

1. `answer_line`  `Answer: C`, `**Answer:** (C)`, `Answer: $\\boxed{C}$`, `Réponse : C`
2. `boxed`        `\\boxed{C}`, `\\boxed{\\text{(C)}}`
3. `answer_is`    `the answer is (B)`, `The correct answer is C) Paris`, `B is correct`
4. `bold_answer`  `**C**`, `**C) Paris**`
5. `bare_letter`  a reply that is just `C.` / `(C)` / `C) Paris`, or ends with a line that
                  is only a letter
6. `paren_letter` the last `(C)` anywhere

Rules 1-3 state a final answer, and the one stated last wins (`Answer: A ... so B is the
right choice` is B). `I'd go with B` and `I think it's C` count as answer phrases. With
the item's options, an answer given as an option's text (`Answer: Max Weber`) is that
option's letter (`option_text`), and an answer or a concluding last line ("Therefore,
x = 7.") that states an option's value is that option (`option_value`: `13/36 mile` is
`13 over 36`, `$88.33` is `88.33`). A reply that says none of the options fits, or a
one-line reply cut off mid-sentence, chooses none. An answer that commits to two options
(`B or D`, `A, C`, two bold letters, `\\boxed{B} or \\boxed{D}`) is `hedged`: wrong whatever the gold.

The English words "A" and "I" are the classic decoys ("I think...", "A better way..."), so
a letter only counts when it is delimited like an answer: followed by punctuation or the
end of the line, or (for uppercase letters other than "I") by a space inside an explicit
answer phrase, where "The answer is A because" is far likelier than "The answer is A bit".
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from benchmarks._types import VerifyResult
from benchmarks.scoring.extract import (
    NO_EXTRACTION,
    Extraction,
    answer_is_segments,
    answer_line_segments,
    last_box_group,
    strip_markdown,
)
from benchmarks.scoring.mcq_options import (
    concluding_claim,
    no_option_fits,
    option_by_value,
    sentence_finished,
)
from benchmarks.scoring.reasoning import extract_with_fallback
from benchmarks.scoring.text import normalize_text

__all__ = ["letters_for", "mcq_extract", "multichoice_regex"]

_ALL_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"

# What may sit between an answer marker and the letter itself.
_LEAD = (
    r"^[\s*_:：$\[(（{]*"
    r"(?:\\(?:boxed|text|textbf|mathrm|mathbf)\s*\{[\s(]*)?"
    r"(?:(?:option|choice|letter|opci[óo]n)\s*[:：]?\s*)?"
    r"[\s*_(\[（{]*"
)


def letters_for(n_options: int) -> str:
    """The option letters of an `n_options`-way question (`4` -> `ABCD`, `10` -> `A`..`J`)."""
    if not 2 <= n_options <= len(_ALL_LETTERS):
        raise ValueError(f"n_options must be in 2..{len(_ALL_LETTERS)}, got {n_options}")
    return _ALL_LETTERS[:n_options]


class _Patterns:
    """Compiled regexes for one set of option letters."""

    def __init__(self, letters: str) -> None:
        up = "".join(sorted(set(letters.upper())))
        cls = re.escape(up) + re.escape(up.lower())
        self.letters = up
        self.lead = re.compile(_LEAD + rf"(?P<l>[{cls}])(?P<after>[^\n]{{0,3}})", re.IGNORECASE)
        self.inline = re.compile(rf"[(（\[]([{re.escape(up)}])[)）\]]|\*\*([{re.escape(up)}])\*\*")
        self.is_correct = re.compile(
            rf"(?<![\w(])\(?([{re.escape(up)}])\)?\s+(?:is|would\s+be|seems)\s+(?:the\s+)?"
            rf"(?:correct|right|best|answer)\b"
        )
        self.bold = re.compile(
            rf"\*\*\s*[(（]?([{re.escape(up)}])(?:[)）]?[.):：]?\s*\*\*|[)）.:：]\s*[^*\n]{{0,100}}\*\*)"
        )
        self.bare = re.compile(rf"^[(（\[]?([{re.escape(up)}])[)）\]]?(?:[.:：]?$|[.)）:：]\s+\S)")
        self.last_line = re.compile(rf"^[(（\[]?([{re.escape(up)}])[)）\]]?[.:：]?$")
        self.paren = re.compile(rf"(?<![\w])[(（]([{re.escape(up)}])[)）](?![\w])")
        letter = rf"[(（\[]?(?:\*\*)?([{re.escape(up)}])(?:\*\*)?[)）\]]?(?![\w'’])"
        # "I'd go with B", "I would choose B", "My choice: B", "I think it's C".
        self.choose = re.compile(
            r"(?<![\w])(?i:go(?:ing)?\s+with|choose|chose|pick|select|opt\s+for|"
            r"my\s+(?:final\s+)?(?:choice|pick|answer)\s*(?:is|would\s+be|[:：])|"
            r"it'?s|it\s+is|that'?s|must\s+be)\s*(?i:option\s+|choice\s+)?" + letter
        )
        # A second letter offered next to the first: "B or D", "A, C", "B and D", "B/D".
        self.second = re.compile(
            r"[)）\]]?(?:\*\*)?\s*(?:,|/|&|\bor\b|\band\b|\boder\b|\bou\b|\bo\b|или|或)\s*"
            r"(?:option\s+)?" + letter
        )
        self.either = re.compile(
            r"(?<![\w])(?:either|both)\s+(?:option\s+)?" + letter
            + r"\s*(?:,|or|and)\s*(?:option\s+)?" + letter,
            re.IGNORECASE,
        )


@lru_cache(maxsize=64)
def _patterns(letters: str) -> _Patterns:
    return _Patterns(letters)


def _letter_ok(letter: str, after: str, delimited: bool) -> bool:
    """Whether `letter` followed by `after` reads as an answer letter rather than a word."""
    if after and (after[0].isalnum() or after[0] in "'’"):
        return False  # part of a word: "Apple", "I'm"
    if delimited or not after or not after[0].isspace():
        return True
    # Followed by a space. A lowercase letter then is the article or a word ("a bit");
    # "I" then a lowercase word is the pronoun ("I think B").
    rest = after.lstrip()
    if letter.islower():
        return not rest or not rest[0].isalpha()
    if letter == "I":
        return not rest[:1].islower()
    return True


def _lead_letter(seg: str, pats: _Patterns) -> tuple[str, int] | None:
    m = pats.lead.match(seg)
    if not m:
        return None
    letter = m.group("l")
    prefix = seg[: m.start("l")]
    delimited = bool(re.search(r"[(（\[{*]\s*$", prefix))
    if letter.upper() not in pats.letters or not _letter_ok(letter, m.group("after"), delimited):
        return None
    return letter.upper(), m.start("l")


def _hedge(text: str, pos: int, letter: str, pats: _Patterns) -> bool:
    """Whether the letter at `text[pos]` is offered together with another option."""
    m = pats.second.match(text, pos + 1)
    return bool(m and m.group(1) != letter)


def _option_letter(seg: str, options: Sequence[str] | None, letters: str) -> str | None:
    """The letter of the option whose text `seg` gives (`Max Weber`), if exactly one."""
    if not options:
        return None
    said = normalize_text(seg)
    if not said:
        return None
    hits = set()
    for letter, option in zip(letters, options, strict=False):
        opt = normalize_text(str(option))
        # The option's whole text, at the start of the answer ("Auguste Comte, the
        # founder of positivism"); a short option must be all of it ("4", not "4 weeks").
        if opt and (said == opt or (len(opt) > 3 and said.startswith(opt + " "))):
            hits.add(letter)
    return hits.pop() if len(hits) == 1 else None


def _option_named(sentence: str, options: Sequence[str] | None, letters: str) -> str | None:
    """The letter of the one option whose text a short reply names ("The organelle is the
    Golgi apparatus."); None when it names none or several. Options shorter than four
    characters (`4`, `yes`) only count as a whole answer, never inside a sentence."""
    if not options:
        return None
    said = f" {normalize_text(sentence)} "
    hits = {
        letter
        for letter, option in zip(letters, options, strict=False)
        if len(opt := normalize_text(str(option))) >= 4 and f" {opt} " in said
    }
    return hits.pop() if len(hits) == 1 else None


def _from_answer_segment(
    seg: str, pats: _Patterns, options: Sequence[str] | None = None
) -> tuple[str, int, str] | None:
    hit = _lead_letter(seg, pats)
    if hit:
        if _hedge(seg, hit[1], hit[0], pats):
            return hit[0], hit[1], "hedged"
        return hit[0], hit[1], ""
    # "Answer: Paris (C)" or "Answer: the capital, **C**": a clearly marked letter later on.
    m = pats.inline.search(seg)
    if m:
        return (m.group(1) or m.group(2)), m.start(), ""
    m = pats.choose.search(seg)
    if m:
        return m.group(1), m.start(1), ""
    said = strip_markdown(seg).strip().rstrip(".")
    letter = _option_letter(said, options, pats.letters)
    if letter:
        return letter, 0, "option_text"
    letter = option_by_value(said, options, pats.letters)
    if letter:
        return letter, 0, "option_value"
    return None


def mcq_extract(
    text: str | None, letters: str = "ABCD", options: Sequence[str] | None = None
) -> Extraction:
    """Find the option letter a response chose.

    Args:
        text: The answer part of a response (reasoning already split off).
        letters: The valid option letters (`"ABCD"`, or `letters_for(10)` for MMLU-Pro).
        options: The options' texts in letter order, when known: an answer that gives an
            option's text instead of its letter then counts (`option_text`), and one that
            gives its value (`5/12 of the tank` for `5 over 12`) too (`option_value`).

    Returns:
        The uppercase letter with the rule that found it (`hedged` when the answer commits
        to more than one option), or an extraction with answer None and method `none`.
    """
    if not text:
        return NO_EXTRACTION
    pats = _patterns(letters)

    # The final-answer statements; the one made last wins.
    finals: list[Extraction] = []
    for seg, off in reversed(answer_line_segments(text)):
        hit = _from_answer_segment(seg, pats, options)
        if hit:
            finals.append(Extraction(hit[0], hit[2] or "answer_line", off + hit[1]))
            break

    group = last_box_group(text)
    boxed = []
    for content, off in group:
        hit = _lead_letter(content, pats)
        if hit and len(strip_markdown(content).strip()) <= 60:
            boxed.append(Extraction(hit[0], "boxed", off + hit[1]))
    if boxed:
        hedged = len({b.answer for b in boxed}) > 1
        finals.append(Extraction(boxed[-1].answer, "hedged", boxed[-1].start) if hedged else boxed[-1])

    candidates: list[tuple[int, str, str]] = []
    for seg, off in answer_is_segments(text):
        hit = _from_answer_segment(seg, pats, options)
        if hit:
            candidates.append((off + hit[1], hit[0], hit[2]))
    for m in pats.is_correct.finditer(text):
        candidates.append((m.start(1), m.group(1), ""))
    for m in pats.choose.finditer(text):
        candidates.append((m.start(1), m.group(1), "hedged" if _hedge(text, m.end(1) - 1, m.group(1), pats) else ""))
    for m in pats.either.finditer(text):
        if m.group(1) != m.group(2):
            candidates.append((m.start(2), m.group(2), "hedged"))
    if candidates:
        pos, letter, how = max(candidates)
        finals.append(Extraction(letter, how or "answer_is", pos))
    plain = strip_markdown(text).strip()
    lines = [ln.strip() for ln in plain.splitlines() if ln.strip()]
    if options and lines:
        # "Therefore, x = 7." / "Hence the tax owed is 1250 dollars." closing the reply.
        claim = concluding_claim(lines[-1])
        if claim:
            letter = _option_letter(claim, options, pats.letters)
            how = "option_text"
            if not letter:
                letter, how = option_by_value(claim, options, pats.letters), "option_value"
            if letter:
                finals.append(Extraction(letter, how, len(text)))
    if finals:
        return max(finals, key=lambda e: e.start)
    if options and no_option_fits(text):
        # The reply rejects every option: a value it met on the way is not its answer.
        return Extraction(None, "no_option_fits")

    bolds = list(pats.bold.finditer(text))
    if bolds:
        last = bolds[-1]
        line_start = text.rfind("\n", 0, last.start()) + 1
        same_line = {b.group(1) for b in bolds if b.start() >= line_start}
        method = "hedged" if len(same_line) > 1 else "bold_answer"
        return Extraction(last.group(1), method, last.start(1))

    if lines:
        m = pats.bare.match(lines[0]) if len(lines) == 1 else pats.last_line.match(lines[-1])
        if m:
            return Extraction(m.group(1), "bare_letter", -1)

    if options:
        for m in reversed(list(re.finditer(r"\*\*([^*\n]{1,200})\*\*", text))[-8:]):
            letter = _option_letter(m.group(1), options, pats.letters)
            if letter:
                return Extraction(letter, "option_text", m.start(1))
        if len(lines) == 1 and len(lines[0]) <= 200 and sentence_finished(lines[0]):
            # A one-line reply names its option only once it finishes the sentence: one cut
            # off mid-way ("so 56 bottles per crate, and for the two crates we") has not
            # committed to anything.
            letter = _option_letter(lines[0].rstrip("."), options, pats.letters)
            letter = letter or _option_named(lines[0], options, pats.letters)
            if letter:
                return Extraction(letter, "option_text", 0)

    parens = list(pats.paren.finditer(text))
    if parens:
        return Extraction(parens[-1].group(1), "paren_letter", parens[-1].start(1))
    return NO_EXTRACTION


def _gold_letter(expected: str) -> str:
    m = re.match(r"^[\s(\[*]*([A-Za-z])(?![A-Za-z])", expected)
    if not m:
        raise ValueError(f"gold answer is not an option letter: {expected!r}")
    return m.group(1).upper()


def multichoice_regex(
    response: str | None,
    expected: str,
    *,
    reasoning: str | None = None,
    n_options: int | None = None,
    letters: str | None = None,
    use_reasoning: bool = True,
    options: Sequence[str] | None = None,
    **_opts: Any,
) -> VerifyResult:
    """Score a multiple-choice answer by the option letter the response chose.

    Args:
        response: The model's reply (may contain `<think>` blocks).
        expected: The gold letter (`C`, `(C)` or `C) Paris`).
        reasoning: Separate reasoning text; searched only if the reply names no letter.
        n_options: Number of options (letters `A`.. ); default 4.
        letters: The valid letters, overriding `n_options`.
        use_reasoning: Set False to never take the answer from the reasoning.
        options: The options' texts in letter order (lets an answer name an option by its
            text; see `mcq_extract`).

    Returns:
        reward 1.0 when the chosen letter is the gold one, else 0.0 (a `hedged` answer is
        0 whatever its letters).

    Raises:
        ValueError: if the gold is not one of the valid letters.
    """
    valid = (letters or letters_for(n_options or 4)).upper()
    gold = _gold_letter(expected)
    if gold not in valid:
        raise ValueError(f"gold letter {gold!r} is not among the options {valid!r}")
    notes: dict[str, Any] = {}
    ext, source, _, _ = extract_with_fallback(
        response,
        reasoning,
        lambda t: mcq_extract(t, valid, options),
        use_reasoning=use_reasoning,
        details=notes,
    )
    details = {
        "method": ext.method,
        "source": source,
        "normalized_pred": ext.answer,
        "normalized_gold": gold,
        "letters": valid,
        **notes,
    }
    ok = ext.answer is not None and ext.answer == gold and ext.method != "hedged"
    reward = 1.0 if ok else 0.0
    return VerifyResult(reward, ext.answer, details)
