"""Choosing an option by its value or text: `Answer: 5/12 of the tank` is the option `5 over
12`, `Final answer: $64.20` the option `64.20`, and a concluding "Therefore, x = 7." the
option `7`. Only committed statements are read this way; a value met in the working (a
reply cut off mid-sentence, or one that ends "none of the options is correct") is not.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from fractions import Fraction

__all__ = ["concluding_claim", "no_option_fits", "option_by_value", "sentence_finished"]

_OVER_RE = re.compile(r"(\d)\s+(?:over|out\s+of)\s+(\d)", re.IGNORECASE)
# An option that is one number with at most a few unit words: `64.20`, `$1,250`, `5 over
# 12`, `\frac{5}{12}`, `45 bottles`, `2.5 m/s`. Anything else (`2 and 3`) has no value.
_OPTION_NUMBER_RE = re.compile(
    r"\s*(?P<num>[$€£]?\s*[-−]?[\d.,]*\d(?:/\d+)?\s?%?)\s*(?P<unit>[^\W\d_][^\d\n]{0,30})?\s*\.?\s*"
)


def _option_value(option: str) -> Fraction | None:
    from benchmarks.scoring.numeric import _delatex, parse_number

    m = _OPTION_NUMBER_RE.fullmatch(_OVER_RE.sub(r"\1/\2", _delatex(option)))
    return parse_number(m.group("num")) if m else None


def option_by_value(said: str, options: Sequence[str] | None, letters: str) -> str | None:
    """The letter of the one option whose numeric value the committed answer `said` states
    (`5/12 of the tank`, `$64.20`, `\\frac{5}{12}`, `24 edges`), or None."""
    if not options:
        return None
    # The number reader loads on first use: most MCQ answers are letters, and a run of
    # them should not pay for compiling its regexes.
    from benchmarks.scoring.numeric import _from_segment, numbers_close, parse_number

    ext = _from_segment(_OVER_RE.sub(r"\1/\2", said), "option_value", 0)
    if ext is None or ext.method == "hedged" or ext.answer is None:
        return None
    value = parse_number(ext.answer)
    if value is None:
        return None
    hits = {letter for letter, option in zip(letters, options, strict=False)
            if (v := _option_value(str(option))) is not None and numbers_close(v, value)}
    return hits.pop() if len(hits) == 1 else None


_CONCLUDE_RE = re.compile(
    r"^(?:so|thus|hence|therefore|consequently|in\s+conclusion)\b[,:]?\s+(?P<claim>.{1,200})$",
    re.IGNORECASE,
)
_CLAIM_SPLIT_RE = re.compile(r"=|\b(?:is|are|was|equals|comes\s+to)\b", re.IGNORECASE)


def concluding_claim(last_line: str) -> str | None:
    """What a concluding last line ("Therefore, x = 7.", "Hence the tax owed is 1250
    dollars.") says the answer is: the text after its last `=` or `is`, or None."""
    m = _CONCLUDE_RE.match(last_line.strip())
    if m is None:
        return None
    parts = _CLAIM_SPLIT_RE.split(m.group("claim"))
    if len(parts) < 2:
        return None
    value = parts[-1].strip().rstrip(".!").strip()
    return value or None


_NONE_FITS_RE = re.compile(
    r"\bnone\s+of\s+(?:the\s+)?(?:given\s+)?(?:options|choices|answers|answer\s+choices)\b"
    r"|\bno\s+(?:option|choice)\s+(?:is|fits|matches)\b",
    re.IGNORECASE,
)


def no_option_fits(text: str) -> bool:
    """Whether the reply's last lines say none of the options is right."""
    return bool(_NONE_FITS_RE.search(text[-400:]))


def sentence_finished(line: str) -> bool:
    """Whether a line ends as a finished statement (a reply cut off mid-sentence does not)."""
    return line.rstrip().rstrip("*_`$)\"'”’").endswith((".", "!", "。", "?"))
