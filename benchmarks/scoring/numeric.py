"""Numeric answers (GSM8K, MGSM, ...): extraction, parsing and tolerant comparison.

Extraction priority, highest first (within a rule the *last* occurrence wins, because the
final stated answer is the answer):

1. `hash_marker`  `#### 42` (GSM8K's own format)
2. `answer_line`  `Answer: 42`, `**Answer:** $1,234.50`, `Réponse : 42`, `答案：42`
3. `boxed`        `\\boxed{42}`
4. `answer_is`    `The answer is 42.`, `La réponse est 42`
5. `bold_answer`  `**$42**` (a bolded number with at most two words after it)
6. `last_number`  the last number anywhere

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
    MAX_MARKERS,
    MAX_SEGMENT,
    Extraction,
    answer_is_segments,
    answer_line_segments,
    find_boxed,
    last_matches,
    strip_markdown,
)
from benchmarks.scoring.reasoning import extract_with_fallback

__all__ = [
    "extract_number",
    "format_number",
    "numbers_close",
    "numeric_match",
    "parse_gold_number",
    "parse_number",
]

# One number. The sign is only a sign when it is not a binary minus (`5-3` is 5 and 3).
# Thousands groups must be exactly three digits, so `1,234` is one number and `1,2` two;
# non-breaking spaces count as separators (French models write `70 000`), plain spaces do
# not (`2 100-page books` is two numbers).
_NUM_RE = re.compile(
    r"""
    (?:(?<![\w)\]}])(?P<sign>[-−])\s?)?
    (?P<cur>[$€£¥₹]\s?)?
    (?<!\w)(?<!\d\.)(?!(?<=\d,)\d{3}(?!\d))
    (?P<int>\d{1,3}(?:(?P<sep>[,\u00a0\u202f])\d{3})(?:(?P=sep)\d{3})*(?!\d)|\d+|(?=\.\d))
    (?P<dec>\.\d+)?
    (?:/(?P<den>\d+)(?![\d.]))?
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


def _value(m: re.Match[str]) -> Fraction | None:
    raw_int = m.group("int") or "0"
    sep = m.group("sep")
    if sep:
        raw_int = raw_int.replace(sep, "")
    try:
        val = Fraction(_ascii_digits(raw_int + (m.group("dec") or "")))
        den = m.group("den")
        if den is not None:
            d = Fraction(_ascii_digits(den))
            if d == 0:
                return None
            val /= d
    except (ValueError, ZeroDivisionError):
        return None
    return -val if m.group("sign") else val


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
    if a == b:
        return True
    return math.isclose(float(a), float(b), rel_tol=rel_tol, abs_tol=0.0)


def _from_segment(seg: str, method: str, offset: int, *, first: bool = True) -> Extraction | None:
    """The number a marker points at: in its first sentence, after the last `=`."""
    seg = _delatex(strip_markdown(seg[:MAX_SEGMENT]))
    seg = re.split(r"(?<=[^\d\s])[.!?。](?:\s|$)|[.!?。](?=\s+[A-Z])|\n", seg, maxsplit=1)[0]
    cut = max(seg.rfind("="), seg.rfind("≈"))
    base = 0
    if cut >= 0 and _numbers(seg[cut + 1 :]):
        base = cut + 1
    nums = _numbers(seg[base:])
    if not nums:
        return None
    value, m = nums[0] if first else nums[-1]
    return Extraction(format_number(value), method, offset + base + m.start())


_HASH_RE = re.compile(r"####\s*([^\n]*)")
_BOLD_NUM_RE = re.compile(
    r"\*\*\s*((?:[-−]\s?)?[$€£]?\s?[\d.,/]*\d%?(?:\s+[^\W\d_]+){0,2})\s*[.!]?\s*\*\*"
)


def extract_number(text: str) -> Extraction | None:
    """Find the final numeric answer in a response.

    Args:
        text: The answer part of a response (reasoning already split off).

    Returns:
        The answer as canonical number text (`1234.5`, `0.75`, `-3`) with the rule that
        found it, or None when the text holds no number.
    """
    if not text:
        return None
    for m in reversed(last_matches(_HASH_RE, text)):
        ext = _from_segment(m.group(1), "hash_marker", m.start(1))
        if ext:
            return ext
    for seg, off in reversed(answer_line_segments(text)):
        ext = _from_segment(seg, "answer_line", off)
        if ext:
            return ext
    for content, off in reversed(find_boxed(text)[-MAX_MARKERS:]):
        ext = _from_segment(content, "boxed", off)
        if ext:
            return ext
    for seg, off in reversed(answer_is_segments(text)):
        ext = _from_segment(seg, "answer_is", off)
        if ext:
            return ext
    for m in reversed(last_matches(_BOLD_NUM_RE, text)):
        ext = _from_segment(m.group(1), "bold_answer", m.start(1))
        if ext:
            return ext
    # Only the last number counts: valuing every number of a long reply (a Fraction each)
    # is what made this step slow, so walk back from the end.
    for m in reversed(list(_NUM_RE.finditer(_delatex(text)))):
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
    **_opts: Any,
) -> VerifyResult:
    """Score a numeric answer (GSM8K / MGSM style).

    Args:
        response: The model's reply (may contain `<think>` blocks).
        expected: The gold number (`72`, `#### 72`, `1,000`).
        reasoning: Separate reasoning text; searched only if the reply has no number.
        rel_tol: Relative tolerance of the comparison.
        use_reasoning: Set False to never take the answer from the reasoning.

    Returns:
        reward 1.0 when the extracted number equals the gold within `rel_tol`, else 0.0;
        details hold `method`, `source`, `normalized_pred` and `normalized_gold`.
    """
    gold = parse_gold_number(expected)
    ext, source, _, _ = extract_with_fallback(
        response, reasoning, extract_number, use_reasoning=use_reasoning
    )
    details: dict[str, Any] = {
        "method": ext.method,
        "source": source,
        "normalized_pred": None,
        "normalized_gold": format_number(gold),
    }
    if not ext or ext.answer is None:
        return VerifyResult(0.0, None, details)
    pred = parse_number(ext.answer)
    details["normalized_pred"] = ext.answer
    ok = pred is not None and numbers_close(pred, gold, rel_tol)
    return VerifyResult(1.0 if ok else 0.0, ext.answer, details)
