"""Answer forms of MATH that plain equivalence misses: a base-`b` numeral written without
its subscript, and an equation whose left side is the expression the question asked for.

Both take normal forms (`normalize_math`) and are tried only after those differ, so every
verdict they give is named in `MathComparison.how` (`base_digits`, `equation_rhs:<how>`).
"""

from __future__ import annotations

import re

__all__ = ["base_digits_match", "equation_rhs"]

# `40_9`, `1212_3`, `A3_{16}` after normalisation (`_{9}` becomes `_9`).
_BASE_GOLD_RE = re.compile(r"^([0-9A-Za-z]+)_\{?(\d{1,2})\}?$")
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def base_digits_match(pred: str, gold: str) -> bool:
    """Whether `pred` writes the digits of a base-`b` gold (`40` for `40_9`).

    The question asked for the numeral in base `b`; its digits without the subscript are
    that numeral, as long as every digit exists in base `b`. The same value written in
    base ten (`36` for `40_9`) is a different numeral, and not credited.
    """
    m = _BASE_GOLD_RE.match(gold)
    if m is None or pred.lower() != m.group(1).lower():
        return False
    base = int(m.group(2))
    return 2 <= base <= 36 and all(_DIGITS.index(c) < base for c in pred.lower() if c in _DIGITS)


# A function application or a subscripted name: `f(-2)`, `h(0)`, `a_{3}`.
# Tried only at the start of a name, so a long run of letters is scanned once.
_CALL_RE = re.compile(r"(?<![A-Za-z\\])\\?[A-Za-z]+(?:_\{?\w+\}?)?\([^()=]*\)")
_LATEX_CMD_RE = re.compile(r"\\(?:frac|dfrac|tfrac|sqrt|pi|cdot|times|left|right)")


def equation_rhs(pred: str) -> str | None:
    """The right side of `pred` when it reads `<expression asked for> = <value>`.

    `f(-2)+f(-1)+f(0)=\\frac{14}{3}` and `a+b+c=9` state the value of the expression the
    question asked for: the answer is the right side. An equation with numbers on its
    left (`2x+1=7`) is one to solve, not a value, and is left alone, as is a right side
    with a variable in it (`y=2x+3` is a line).
    """
    if pred.count("=") != 1 or any(op in pred for op in ("\\leq", "\\geq", "<", ">")):
        return None
    lhs, rhs = pred.split("=")
    if not lhs or not rhs:
        return None
    bare = _CALL_RE.sub("", lhs)
    if re.search(r"\d", bare) or not re.search(r"[+\-*/^]|\\cdot|\\times", lhs):
        return None  # numbers outside calls: an equation; no operator: a plain `x=` (done)
    if re.search(r"[A-Za-z]", _LATEX_CMD_RE.sub("", rhs)):
        return None
    return rhs
