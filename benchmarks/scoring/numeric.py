"""Numeric answers (GSM8K, MGSM, ...): extraction, parsing and tolerant comparison.

Extraction priority, highest first (within a rule the *last* occurrence wins, because the
final stated answer is the answer):

1. `hash_marker`  `#### 42` (GSM8K's own format)
2. `answer_line`  `Answer: 42`, `**Answer:** $1,234.50`, `Réponse : 42`, `答案：42`
3. `boxed`        `\\boxed{42}`
4. `answer_is`    `The answer is 42.`, `La réponse est 42`
5. `bold_answer`  `**$42**` (a bolded number with at most two words after it)
6. `last_number`  the last number anywhere

Rules 1-4 are markers of a final answer, and among them the one stated *last* wins, so a
model that corrects itself after `#### 180` (`... so the correct answer is 540`) is read
at its word. A marker that commits to two different numbers (`either 64 or 56`,
`\\boxed{40} or \\boxed{45}`) is `hedged`: wrong, whatever the gold.

With the item's `language`, numbers are read the way that language writes them
(`70.000` in German and `70 000` in French or Russian are seventy thousand; `2,5` is two
and a half); `7万` (Chinese and Japanese) is 70,000 in every language.

Numbers keep their thousands separators together (`1,234` is one number, never `1` and
`234`), accept `$`, `%`, `-`, decimals and simple fractions, and are compared exactly as
rationals with a relative tolerance.
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from fractions import Fraction
from typing import Any

from benchmarks._types import VerifyResult
from benchmarks.scoring.extract import (
    MAX_SEGMENT,
    Extraction,
    answer_is_segments,
    answer_line_segments,
    last_box_group,
    last_matches,
    strip_markdown,
)
from benchmarks.scoring.reasoning import extract_with_fallback

__all__ = [
    "extract_number",
    "format_number",
    "localize_numbers",
    "numbers_close",
    "numeric_match",
    "parse_gold_number",
    "parse_number",
]

# One number. The sign is only a sign when it is not a binary minus (`5-3` is 5 and 3).
# Thousands groups must be exactly three digits, so `1,234` is one number and `1,2` two;
# non-breaking spaces count as separators (French models write `70 000`), plain spaces do
# not (`2 100-page books` is two numbers).
#
# A number may follow a letter of a script written without spaces between words or before
# numbers (Chinese, Japanese, Korean, Thai, and the Indic scripts: `年薪是9360美元`), never a
# Latin, Greek or Cyrillic one (`x2`, `report2023` are names). A scale word after it
# (`1.45 million`, `3,2 millions`, `4,5 миллиона`, `2 ล้าน`) multiplies it.
_SCALES: dict[str, int] = {
    **dict.fromkeys(("thousand", "tausend", "mille", "mil", "тысяч", "тысячи", "тысяча"),
                    10**3),
    **dict.fromkeys(("lakh", "লক্ষ", "লাখ", "లక్ష", "లక్షలు", "แสน"), 10**5),
    **dict.fromkeys(("million", "millions", "millionen", "millón", "millones", "миллион",
                     "миллиона", "миллионов", "milioni", "ล้าน"), 10**6),
    **dict.fromkeys(("crore", "কোটি", "కోటి", "కోట్లు"), 10**7),
    **dict.fromkeys(("billion", "billions", "milliarde", "milliarden", "milliard", "milliards",
                     "миллиард", "миллиарда", "миллиардов", "bilioni"), 10**9),
}
_SCALE_ALT = "|".join(sorted(_SCALES, key=len, reverse=True))
_NOT_AFTER_LETTER = r"(?<![^\W\u0900-\u0dff\u0e00-\u0e7f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uff00-\uffef])(?<!\d)"
_NUM_RE = re.compile(
    r"""
    (?:(?<![\w)\]}])(?P<sign>[-−])\s?)?
    (?P<cur>[$€£¥₹]\s?)?
    """ + _NOT_AFTER_LETTER + r"""(?<!\d\.)(?!(?<=\d,)\d{3}(?!\d))
    (?P<int>\d{1,3}(?:(?P<sep>[,\u00a0\u202f])\d{3})(?:(?P=sep)\d{3})*(?!\d)|\d+|(?=\.\d))
    (?P<dec>\.\d+)?
    (?:(?P<wan>[万萬億亿])(?P<wrest>\d{1,4}(?!\d))?)?
    (?:/(?P<den>\d+)(?![\d.]))?
    (?:[ \u00a0]?(?P<scale>(?i:""" + _SCALE_ALT + r"""))(?![a-zA-Z\u00c0-\u024f\u0400-\u04ff]))?
    (?P<pct>\s?(?:%|percent\b))?
    """,
    re.VERBOSE,
)

_LATEX_SUBS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\\[dt]?frac\s*\{\s*(-?[\d.,]+)\s*\}\s*\{\s*([\d.,]+)\s*\}"), r"\1/\2"),
    (re.compile(r"\\[dt]?frac\s*(\d)\s*(\d)"), r"\1/\2"),
    (re.compile(r"\{,\}"), ","),
    (re.compile(r"\\[!,;: ]"), ""),
    (re.compile(r"\\\$"), "$"),
    (re.compile(r"\\%"), "%"),
    (re.compile(r"\^\s*\{?\\circ\}?"), ""),
    (re.compile(r"\\(?:text|textbf|mathrm|mathbf|mbox)\s*\{([^{}]*)\}"), r" \1 "),
    (re.compile(r"\\(?:left|right)\b"), ""),
    (re.compile(r"\\(?:times|cdot)"), " × "),
)


def _delatex(text: str) -> str:
    # Every pattern needs a backslash, a brace or a caret: plain text (most replies) skips
    # the ten substitutions, which dominated the scorer's cost on the hot path.
    if "\\" not in text and "{" not in text and "^" not in text:
        return text
    for pat, repl in _LATEX_SUBS:
        text = pat.sub(repl, text)
    return text


def _ascii_digits(s: str) -> str:
    # Bengali, Thai, full-width... digits: `\d` matches them, Fraction() does not.
    if s.isascii():
        return s
    return "".join(str(unicodedata.decimal(c)) if c.isdigit() else c for c in s)


def _decimal(whole: str, dec: str) -> Fraction:
    """`whole` + `dec` (ASCII digits; `dec` empty or `.` and digits) as an exact Fraction.

    The same value as `Fraction(whole + dec)`, from integers: parsing the string (a regex
    match in `fractions`) was a large share of the scorer's time per reply.
    """
    if dec:
        return Fraction(int(whole + dec[1:]), 10 ** (len(dec) - 1))
    return Fraction(int(whole))


def _value(m: re.Match[str]) -> Fraction | None:
    raw_int = m.group("int") or "0"
    sep = m.group("sep")
    if sep:
        raw_int = raw_int.replace(sep, "")
    try:
        val = _decimal(_ascii_digits(raw_int), _ascii_digits(m.group("dec") or ""))
        wan = m.group("wan")
        if wan:
            unit = 10**4 if wan in "万萬" else 10**8
            val = val * unit + int(_ascii_digits(m.group("wrest") or "0"))
        den = m.group("den")
        if den is not None:
            d = int(_ascii_digits(den))
            if d == 0:
                return None
            val /= d
        scale = m.group("scale")
        if scale:
            val *= _SCALES[scale.lower()]
    except (ValueError, ZeroDivisionError):
        return None
    return -val if m.group("sign") else val


# Languages whose numbers use a decimal comma, and the thousands mark each uses. The MGSM
# prompts themselves write `80.000` (German) and `80 000` (French, Spanish, Russian).
# Spanish writes both: `276.000` (the usual form) and `276 000` (the RAE's recommendation).
_DOT_THOUSANDS = frozenset({"de", "id", "it", "pt", "nl", "tr", "da"})
_SPACE_THOUSANDS = frozenset({"fr", "es", "ru", "pl", "cs", "uk", "sv", "nb", "fi"})
_DOT_OR_SPACE_THOUSANDS = frozenset({"es"})
_DOT_GROUPS_RE = re.compile(r"(?<![\d.,])\d{1,3}(?:\.\d{3})+(?![\d.]|,\d)")
_SPACE_GROUPS_RE = re.compile(r"(?<![\d.,])\d{1,3}(?:[ \u00a0\u202f]\d{3})+(?![\d])")
_DECIMAL_COMMA_RE = re.compile(r"(?<=\d),(?=\d)")


def localize_numbers(text: str, language: str | None) -> str:
    """Rewrite `language`'s number format into the one `_NUM_RE` reads, keeping offsets.

    German `70.000` becomes `70,000`, French `70 000` becomes `70\u00a0000`, and a decimal
    comma (`2,5`) a decimal point. Every change is one character for one, so offsets into
    the result are offsets into `text`.

    Args:
        text: Any text.
        language: An ISO 639-1 code (`de`, `fr`, ...) or None (English conventions).

    Returns:
        The rewritten text (`text` itself for other languages).
    """
    lang = (language or "").lower()[:2]
    if lang in _DOT_THOUSANDS:
        text = _DECIMAL_COMMA_RE.sub(".", _DOT_GROUPS_RE.sub(
            lambda m: m.group(0).replace(".", "\x00"), text))
        return text.replace("\x00", ",")
    if lang in _SPACE_THOUSANDS:
        if lang in _DOT_OR_SPACE_THOUSANDS:
            # `276.000` is a thousands group; `1.75` (three digits never) stays a decimal.
            text = _DOT_GROUPS_RE.sub(lambda m: m.group(0).replace(".", "\u00a0"), text)
        text = _SPACE_GROUPS_RE.sub(lambda m: re.sub(r"\s", "\u00a0", m.group(0)), text)
        # `12,5` is a decimal, `1,500` stays ambiguous and keeps its English reading.
        return re.sub(r"(?<=\d),(?=\d{1,2}(?!\d)|\d{4,})", ".", text)
    return text


def _numbers(text: str) -> list[tuple[Fraction, re.Match[str]]]:
    out = []
    for m in _NUM_RE.finditer(text):
        if not (m.group("int") or m.group("dec")):
            continue
        v = _value(m)
        if v is not None:
            out.append((v, m))
    return out


def parse_number(text: str) -> Fraction | None:
    """Parse a string that is exactly one number (`$1,234.50`, `-3`, `3/4`, `50%`, `42.00`).

    LaTeX wrappers (`\\frac{3}{4}`, `\\$`, `\\%`, `10,\\!080`) are understood; surrounding
    whitespace and a trailing period are ignored.

    Args:
        text: The candidate number.

    Returns:
        The exact value (a percentage keeps its number: `50%` is 50), or None.
    """
    s = _delatex(strip_markdown(text)).strip().rstrip(".").strip()
    m = _NUM_RE.fullmatch(s)
    if not m or not (m.group("int") or m.group("dec")):
        return None
    return _value(m)


@functools.lru_cache(maxsize=4096)
def _parse_canonical(text: str) -> Fraction | None:
    """`parse_number` of an extracted answer: a few canonical texts (`42`, `0.75`) recur in
    every repeat of a run, and a Fraction is immutable, so one parse serves them all."""
    return parse_number(text)


def format_number(value: Fraction) -> str:
    """Canonical text of a number: `42`, `0.75`, `-1234.5`, or 12 significant digits."""
    if value.denominator == 1:
        return str(value.numerator)
    d = value.denominator
    while d % 2 == 0:
        d //= 2
    while d % 5 == 0:
        d //= 5
    if d == 1:
        # A terminating decimal: print it exactly.
        places = 0
        scaled = value
        while scaled.denominator != 1:
            scaled *= 10
            places += 1
        sign = "-" if scaled < 0 else ""
        digits = str(abs(scaled.numerator)).rjust(places + 1, "0")
        return f"{sign}{digits[:-places]}.{digits[-places:]}"
    return format(float(value), ".12g")


def numbers_close(a: Fraction | float, b: Fraction | float, rel_tol: float = 1e-6) -> bool:
    """Whether two numbers agree within `rel_tol` (relative; exact for zero)."""
    if type(a) is Fraction and type(b) is Fraction:
        # Fractions are kept in lowest terms: equal exactly when their terms are. Fraction's
        # own `==` and `float()` go through ABC instance checks (a scorer's hot path).
        if a.numerator == b.numerator and a.denominator == b.denominator:
            return True
        return math.isclose(a.numerator / a.denominator, b.numerator / b.denominator,
                            rel_tol=rel_tol, abs_tol=0.0)
    if a == b:
        return True
    return math.isclose(float(a), float(b), rel_tol=rel_tol, abs_tol=0.0)


# "either 64 or 56", "12 or maybe 13", "70 ou 56": two numbers offered as alternatives.
_HEDGE_WORDS = (r"(?:or|oder|ou|o|или|либо|au|或|或者|还是|または|か|หรือ|অথবা|কিংবা|বা|లేదా|లేక)")
_HEDGE_RE = re.compile(
    r"(?P<a>\d(?:[\d.,]*\d)?)(?:\s*[^\W\d_]+){0,2}\s*,?\s*(?<![A-Za-z\u00c0-\u024f\u0400-\u04ff])"
    + _HEDGE_WORDS
    + r"(?![^\W\d_])\s*(?:maybe|perhaps|possibly|probably|even|else|vielleicht|peut-être)?\s*"
    r"[$€£]?(?P<b>\d(?:[\d.,]*\d)?)",
    re.IGNORECASE,
)
# A leading adverbial clause ("In 4 weeks, ...", "After 3 years, ...") holds a number of
# the question, not the answer.
_LEAD_CLAUSE_RE = re.compile(
    r"^\s*(?:in|after|for|over|within|on|by|at|during|en|dans|après|pour|nach|für|"
    r"через|за|tras|durante)\s(?:[^,\n]{0,60},|\s*\d[\d.,]*\s+[^\W\d_]+)\s*",
    re.IGNORECASE,
)
_SEG_BOLD_RE = re.compile(r"\*\*([^*\n]{1,60})\*\*")


_HEDGE_WORD_RE = re.compile(_HEDGE_WORDS, re.IGNORECASE)


def _hedged(seg: str) -> bool:
    """Whether a marker's segment offers two different numbers as alternatives."""
    # The alternatives sit in the segment's first sentence; the word test skips the regex
    # (and its backtracking over long digit runs) for almost every reply.
    seg = seg[:300]
    if not _HEDGE_WORD_RE.search(seg):
        return False
    for m in _HEDGE_RE.finditer(seg):
        a, b = parse_number(m.group("a")), parse_number(m.group("b"))
        if a is not None and b is not None and a != b:
            return True
    return False


_SEG_LEAD_RE = re.compile(r"^\s*(?:\*\*|__)")
_SENTENCE_END_RE = re.compile(r"(?<=[^\d\s*])[.!?。](?:\s|$)|[.!?。](?=\s+[A-Z])|\n")


# `118 000` right after an answer marker is one number in any language (`2 100-page books`
# in running prose is two, which is why plain spaces do not join digits elsewhere).
_SEG_SPACE_GROUPS_RE = re.compile(r"(?<![\d.,])\d{1,3}(?: \d{3})+(?![\d\-‐]|[.,]\d)")


def _from_segment(seg: str, method: str, offset: int, *, first: bool = True) -> Extraction | None:
    """The number a marker points at: in its first sentence, after the last `=`; a bolded
    number of the sentence beats the others, and a leading clause's number never counts."""
    # The marker may leave the closing `**` of `**Answer:**` at the segment's start.
    raw = _SEG_LEAD_RE.sub("", seg[:MAX_SEGMENT])
    if " " in raw:
        lead = _SEG_SPACE_GROUPS_RE.search(raw, 0, 40)
        if lead and not raw[: lead.start()].strip(" $€£*:=("):
            # Only a group that opens the segment: later ones are the reasoning's numbers.
            raw = raw[: lead.start()] + lead.group(0).replace(" ", "\u00a0") + raw[lead.end():]
    raw = _SENTENCE_END_RE.split(raw, maxsplit=1)[0]
    bold = [b for b in _SEG_BOLD_RE.finditer(raw) if _numbers(_delatex(b.group(1)))]
    seg = _delatex(strip_markdown(raw))
    if _hedged(seg):
        return Extraction(seg.strip(), "hedged", offset)
    if bold:
        value, m = _numbers(_delatex(bold[-1].group(1)))[0]
        return Extraction(format_number(value), method, offset + bold[-1].start(1) + m.start())
    cut = max(seg.rfind("="), seg.rfind("≈"))
    base = 0
    if cut >= 0 and _numbers(seg[cut + 1 :]):
        base = cut + 1
    else:
        lead = _LEAD_CLAUSE_RE.match(seg)
        if lead and _numbers(seg[lead.end() :]):
            base = lead.end()
    nums = _numbers(seg[base:])
    if not nums:
        return None
    value, m = nums[0] if first else nums[-1]
    return Extraction(format_number(value), method, offset + base + m.start())


_HASH_RE = re.compile(r"####\s*([^\n]*)")
_BOLD_NUM_RE = re.compile(
    r"\*\*\s*((?:[-−]\s?)?[$€£]?\s?[\d.,/]*\d%?(?:\s+[^\W\d_]+){0,2})\s*[.!]?\s*\*\*"
)


# What may stand between "the answer is" and its number for it to override an earlier
# marker: markup, a currency sign, or one adverb ("is actually 540").
_RESTATED_RE = re.compile(
    r"[\s*_$:=(\\{]*(?:(?:actually|really|indeed|therefore|then|now|exactly|just|still|"
    r"in\s+fact|boxed)\b[\s*_$:=(\\{]*)?[$€£]?\s*[-−]?",
    re.IGNORECASE,
)


def _box_group_number(text: str) -> Extraction | None:
    """The number of the last group of boxes; several different ones are a hedge."""
    group = last_box_group(text)
    found = [e for c, o in group if (e := _from_segment(c, "boxed", o))]
    if not found:
        return None
    if any(e.method == "hedged" for e in found) or len({e.answer for e in found}) > 1:
        start = group[0][1]
        return Extraction(" | ".join(c for c, _ in group), "hedged", start)
    return found[-1]


# A reply that ends in GSM8K's own `#### N` (N plain ASCII digits, only whitespace after).
_CLOSING_HASH_RE = re.compile(r"####\s*([0-9]{1,300})\s*\Z")


def _closing_hash(text: str) -> Extraction | None:
    """The answer of a reply whose only `####` closes it with a plain integer, or None.

    The full search below gives the same answer for such a reply, at ~10x the cost: every
    other rule's number starts at or before that integer (nothing but whitespace follows
    it, and no segment starts inside it), a tie goes to the hash marker found first, and
    the segment `N` is neither hedged nor cut. A second `####` (`#### 5 #### 42` reads 5,
    `#####` shifts the match) and anything but digits (`-3`, `1,234`, `3/4`, `42%`, `x`)
    take the full search.
    """
    i = text.find("####")
    if i < 0 or text.find("####", i + 1) >= 0:
        return None
    m = _CLOSING_HASH_RE.match(text, i)
    if m is None:
        return None
    return Extraction(str(int(m.group(1))), "hash_marker", m.start(1))


def extract_number(text: str, language: str | None = None) -> Extraction | None:
    """Find the final numeric answer in a response.

    Args:
        text: The answer part of a response (reasoning already split off).
        language: The ISO 639-1 code of the language the reply is written in, when known:
            numbers are then read in its format (see `localize_numbers`).

    Returns:
        The answer as canonical number text (`1234.5`, `0.75`, `-3`) with the rule that
        found it (`hedged` when the final statement offers two different numbers), or None
        when the text holds no number.
    """
    if not text:
        return None
    text = localize_numbers(text, language)
    quick = _closing_hash(text)
    if quick is not None:
        return quick
    # The last marker of each kind that points at a number; the latest of them wins.
    finals: list[Extraction] = []
    for m in reversed(last_matches(_HASH_RE, text) if "####" in text else ()):
        ext = _from_segment(m.group(1), "hash_marker", m.start(1))
        if ext:
            finals.append(ext)
            break
    for seg, off in reversed(answer_line_segments(text)):
        ext = _from_segment(seg, "answer_line", off)
        if ext:
            finals.append(ext)
            break
    ext = _box_group_number(text)
    if ext:
        finals.append(ext)
    for seg, off in reversed(answer_is_segments(text)):
        ext = _from_segment(seg, "answer_is", off)
        if ext and finals and not _RESTATED_RE.fullmatch(text[off : max(off, ext.start)]):
            # After an explicit marker, "the answer is" only overrides it when the number
            # follows at once ("so the correct answer is 540"), not in a later remark
            # ("the answer is reasonable since 9 eggs...").
            continue
        if ext:
            finals.append(ext)
            break
    if finals:
        return max(finals, key=lambda e: e.start)
    for m in reversed(last_matches(_BOLD_NUM_RE, text)):
        ext = _from_segment(m.group(1), "bold_answer", m.start(1))
        if ext:
            return ext
    # Only the last number counts: valuing every number of a long reply (a Fraction each)
    # is what made this step slow, so walk back from the end. Only the last MAX_MARKERS
    # matches are held: a list of every match cost 136 bytes per character of `1,1,1,...`.
    for m in reversed(last_matches(_NUM_RE, _delatex(text))):
        if m.group("int") or m.group("dec"):
            value = _value(m)
            if value is not None:
                return Extraction(format_number(value), "last_number", m.start())
    return None


@functools.lru_cache(maxsize=65536)
def parse_gold_number(expected: str) -> Fraction:
    """The numeric value of a gold answer (`72`, `#### 72`, `1,000`, a full GSM8K solution).

    Args:
        expected: The gold answer text.

    Returns:
        Its exact value.

    Raises:
        ValueError: if the gold holds no number (a dataset bug; loud beats silently 0).
    """
    text = expected
    if "####" in text:
        text = text.rsplit("####", 1)[1]
    value = parse_number(text)
    if value is None:
        ext = extract_number(text)
        value = parse_number(ext.answer) if ext and ext.answer else None
    if value is None:
        raise ValueError(f"gold answer has no number: {expected!r}")
    return value


def numeric_match(
    response: str | None,
    expected: str,
    *,
    reasoning: str | None = None,
    rel_tol: float = 1e-6,
    use_reasoning: bool = True,
    language: str | None = None,
    **_opts: Any,
) -> VerifyResult:
    """Score a numeric answer (GSM8K / MGSM style).

    Args:
        response: The model's reply (may contain `<think>` blocks).
        expected: The gold number (`72`, `#### 72`, `1,000`).
        reasoning: Separate reasoning text; searched only if the reply has no number.
        rel_tol: Relative tolerance of the comparison.
        use_reasoning: Set False to never take the answer from the reasoning.
        language: The reply's language (ISO 639-1), for its number format (MGSM).

    Returns:
        reward 1.0 when the extracted number equals the gold within `rel_tol`, else 0.0;
        details hold `method`, `source`, `normalized_pred`, `normalized_gold` and the
        decisions of `extract_with_fallback`.
    """
    gold = parse_gold_number(expected)
    notes: dict[str, Any] = {}
    ext, source, _, _ = extract_with_fallback(
        response,
        reasoning,
        lambda t: extract_number(t, language),
        use_reasoning=use_reasoning,
        details=notes,
    )
    details: dict[str, Any] = {
        "method": ext.method,
        "source": source,
        "normalized_pred": None,
        "normalized_gold": format_number(gold),
        **notes,
    }
    if language:
        details["language"] = language
    if not ext or ext.answer is None or ext.method == "hedged":
        return VerifyResult(0.0, ext.answer, details)
    pred = _parse_canonical(ext.answer)
    details["normalized_pred"] = ext.answer
    ok = pred is not None and numbers_close(pred, gold, rel_tol)
    return VerifyResult(1.0 if ok else 0.0, ext.answer, details)
