"""LaTeX answers normalised for comparison: `\\dfrac`, `\\frac12`, `\\left`, degrees, `\\%`, `\\$`,
units in `\\text{}`, thin spaces, thousands separators, `x = 3`, inequalities as intervals
(step 2 of `math_equiv`'s pipeline)."""

from __future__ import annotations

import re
from functools import lru_cache

from benchmarks.scoring.extract import (
    find_boxed,
)
from benchmarks.scoring.math_extract import _APPROX_RE, MAX_MATH_ANSWER
from benchmarks.scoring.numeric import format_number, parse_number

_UNIT_WORDS = (
    r"units?|square\s+units|sq\s*units|cm|centimeters?|mm|km|meters?|inch(?:es)?|feet|foot|"
    r"ft|yards?|miles?|degrees?|radians?|dollars?|cents?|hours?|minutes?|seconds?|days?|"
    r"weeks?|years?|mph|pounds?|ounces?|grams?|kg|liters?|gallons?|people|students|ways"
)
_TEXT_CMD_RE = re.compile(
    r"\\(?:text|textbf|textit|mbox|mathrm|mathbf|operatorname)\s*\{([^{}]*)\}"
)


def _read_arg(s: str, i: int) -> tuple[str, int]:
    """Read one LaTeX argument at `s[i:]`: a braced group, a command, or one character."""
    while i < len(s) and s[i] == " ":
        i += 1
    if i >= len(s):
        return "", i
    if s[i] == "{":
        depth = 0
        for j in range(i, len(s)):
            if s[j] == "{" and (j == 0 or s[j - 1] != "\\"):
                depth += 1
            elif s[j] == "}" and s[j - 1] != "\\":
                depth -= 1
                if depth == 0:
                    return s[i + 1 : j], j + 1
        return s[i + 1 :], len(s)
    if s[i] == "\\":
        m = re.match(r"\\[a-zA-Z]+|\\.", s[i:])
        assert m is not None
        return m.group(0), i + m.end()
    return s[i], i + 1


def _brace_args(s: str) -> str:
    """Give `\\frac` and `\\sqrt` braced arguments: `\\frac12` -> `\\frac{1}{2}`."""
    out: list[str] = []
    i = 0
    while i < len(s):
        if s.startswith("\\frac", i) and not s[i + 5 : i + 6].isalpha():
            a, j = _read_arg(s, i + 5)
            b, k = _read_arg(s, j)
            out.append("\\frac{" + _brace_args(a) + "}{" + _brace_args(b) + "}")
            i = k
        elif s.startswith("\\sqrt", i) and not s[i + 5 : i + 6].isalpha():
            j = i + 5
            index = ""
            if s[j : j + 1] == "[":
                close = s.find("]", j)
                if close > 0:
                    index, j = s[j : close + 1], close + 1
            a, k = _read_arg(s, j)
            out.append("\\sqrt" + index + "{" + _brace_args(a) + "}")
            i = k
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def _strip_text_commands(s: str) -> str:
    """Unwrap `\\text{...}`; when it follows other content it is a unit, so drop it."""
    if not _TEXT_CMD_RE.search(s):
        return s
    without = _TEXT_CMD_RE.sub("", s)
    if re.search(r"[\w}]", without):
        # `15\mbox{ cm}^2`, `5.4 \text{ cents}`: a unit after a value, with its exponent.
        s = re.sub(r"\\(?:text|textbf|textit|mbox|mathrm)\s*\{\s*(?:or|and)\s*\}", ",", s)
        s = re.sub(
            r"\\(?:text|textbf|textit|mbox|mathrm)\s*\{\s*[A-Za-z][A-Za-z .]*\}(?:\^\{?\d\}?)?",
            "",
            s,
        )
    return _TEXT_CMD_RE.sub(r"\1", s)


_UNICODE_MATH = {"π": "\\pi ", "×": "\\times ", "·": "\\cdot ", "≤": "\\leq ",
                 "≥": "\\geq ", "∞": "\\infty ", "−": "-", "\\langle": "(", "\\rangle": ")"}
_UNICODE_MATH_RE = re.compile("|".join(re.escape(k) for k in _UNICODE_MATH))
_SQRT_SIGN_RE = re.compile(r"√\s*(\d+|[a-zA-Z]|\\pi|\{[^{}]*\}|\([^()]*\))")


def _plain_math(s: str) -> str:
    """Plain-text math as LaTeX: `π/2` -> `\\pi/2`, `2√2` -> `2\\sqrt{2}`; and an exact
    value followed by its approximation (`\\frac{14}{3} \\approx 4.67`) -> the exact one."""
    approx = _APPROX_RE.search(s)
    if approx and s[: approx.start()].strip():
        s = s[: approx.start()]
    if "√" in s:
        s = _SQRT_SIGN_RE.sub(lambda m: "\\sqrt{" + m.group(1).strip("{}()") + "}", s)
    return _UNICODE_MATH_RE.sub(lambda m: _UNICODE_MATH[m.group(0)], s)


_VAR = r"(?:[a-zA-Z]|\\[a-zA-Z]+)(?:_\{?\w+\}?)?"
_VAR_TUPLE_EQ_RE = re.compile(rf"^\(({_VAR}(?:,{_VAR})+)\)=(\(.*\))$")
_VAR_VALUE_RE = re.compile(rf"^({_VAR})=([^=]+)$")


def _named_values(s: str) -> str:
    """`(p,q,r)=(6,31,-1)` -> `(6,31,-1)`; `a=1,b=2` -> `(1,2)`; `x=2,x=-3` -> `2,-3`."""
    m = _VAR_TUPLE_EQ_RE.match(s)
    if m:
        return m.group(2)
    if s.count("=") < 2:
        return s
    parts = _split_top(s, ",")
    pairs = [_VAR_VALUE_RE.match(p) for p in parts]
    if not all(pairs):
        return s
    names = [p.group(1) for p in pairs if p]
    values = ",".join(p.group(2) for p in pairs if p)
    return values if len(set(names)) == 1 else f"({values})"


_BOUND = r"(-?[^<>=\\]+|-?\\infty|-?\\frac\{[^{}]*\}\{[^{}]*\}|-?\\sqrt\{[^{}]*\})"
_LT = r"(<|\\leq|\\lt)"
_GT = r"(>|\\geq|\\gt)"
# (`\\leq x` keeps the space that separates a command from a letter.)
_CHAIN_RE = re.compile(rf"^{_BOUND}{_LT} ?{_VAR}{_LT}{_BOUND}$")
_UPPER_RE = re.compile(rf"^{_VAR}{_LT}{_BOUND}$")
_LOWER_RE = re.compile(rf"^{_VAR}{_GT}{_BOUND}$")


def _inequality_as_interval(s: str) -> str:
    """`3<\\lambda\\leq4` -> `(3,4]`, `x<2` -> `(-\\infty,2)`, `x\\geq5` -> `[5,\\infty)`."""
    if "<" not in s and ">" not in s and "\\l" not in s and "\\g" not in s:
        return s
    m = _CHAIN_RE.match(s)
    if m:
        lo, op1, op2, hi = m.group(1), m.group(2), m.group(3), m.group(4)
        return ("[" if op1 == "\\leq" else "(") + f"{lo},{hi}" + ("]" if op2 == "\\leq" else ")")
    m = _UPPER_RE.match(s)
    if m:
        return f"(-\\infty,{m.group(2)}" + ("]" if m.group(1) == "\\leq" else ")")
    m = _LOWER_RE.match(s)
    if m:
        return ("[" if m.group(1) == "\\geq" else "(") + f"{m.group(2)},\\infty)"
    return s


_THOUSANDS_RE = re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_SIMPLE_VAR_EQ_RE = re.compile(r"^[a-zA-Z](?:_\{?\w+\}?)?(?:\([a-zA-Z]\))?=(?!.*=)(.+)$")
_MIXED_RE = re.compile(r"^(-?)(\d+)\\frac\{(\d+)\}\{(\d+)\}$")


@lru_cache(maxsize=8192)
def normalize_math(answer: str) -> str:
    """Canonical string form of a LaTeX answer.

    Two answers with the same normal form are equal; different forms may still be
    equivalent (that is what `compare_math` checks next).

    Args:
        answer: Raw LaTeX (`\\dfrac12`, `10,\\!080`, `90^\\circ`, `\\$18.90`, `x = 3`).

    Returns:
        The normalised form (`\\frac{1}{2}`, `10080`, `90`, `18.9`, `3`); an answer longer
        than `MAX_MATH_ANSWER` only loses its whitespace.
    """
    s = answer.strip()
    if not s:
        return ""
    if len(s) > MAX_MATH_ANSWER:
        return "".join(s.split())
    boxed = find_boxed(s)
    if boxed and s.startswith(("\\boxed", "\\fbox")):
        s = boxed[-1][0]
    s = s.replace("\n", " ").replace("**", "").strip().strip("$").strip()
    s = _plain_math(s)
    if (s.startswith("\\(") and s.endswith("\\)")) or (s.startswith("\\[") and s.endswith("\\]")):
        s = s[2:-2]
    s = re.sub(r"(?<!\\)\\[!,;:> ]|\\q?quad\b|~", " ", s)
    s = re.sub(r"\\(?:displaystyle|textstyle|limits)\b", "", s)
    s = re.sub(r"\\[dt]frac(?![a-zA-Z])", r"\\frac", s)
    s = re.sub(r"\\(?:left|right|bigl|bigr|Bigl|Bigr|big|Big)\s*(?:\\?([()\[\]{}|])|\.)", r"\1", s)
    s = s.replace("\\{", "\x01").replace("\\}", "\x02")  # keep set braces through edits
    s = re.sub(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|°|\\degree", "", s)
    s = re.sub(r"\\?%|\\text\{\s*\\%\s*\}", "", s)
    s = s.replace("\\$", "").replace("$", "")
    s = re.sub(r"\\(?:varnothing|emptyset)\b", r"\\emptyset", s)
    s = re.sub(r"\\(?:le|leqslant)\b", r"\\leq", s)
    s = re.sub(r"\\(?:ge|geqslant)\b", r"\\geq", s)
    s = _strip_text_commands(s)
    s = re.sub(rf"(?<=[\d}}])\s*(?:{_UNIT_WORDS})(?:\^\{{?\d\}}?)?\s*$", "", s, flags=re.IGNORECASE)
    s = _brace_args(s)
    # Remove spaces, except the one separating a command from a following letter
    # (`\cot x` must not become the unknown command `\cotx`).
    s = re.sub(r"(\\[a-zA-Z]+)\s+(?=[a-zA-Z])", "\\1\x03", s)
    s = re.sub(r"\s+", "", s).replace("\x03", " ")
    s = re.sub(r"([_^])\{(\w)\}", r"\1\2", s)
    s = s.rstrip(".").rstrip("\\").rstrip(".")
    s = re.sub(r"^[a-zA-Z]\\in", "", s)
    s = _named_values(s)
    m = _SIMPLE_VAR_EQ_RE.match(s)
    if m:
        s = m.group(1)
    s = _inequality_as_interval(s)
    if _THOUSANDS_RE.match(s):
        s = s.replace(",", "")
    m = re.fullmatch(r"(-?)(\d+)/(\d+)", s)
    if m:
        s = f"{m.group(1)}\\frac{{{m.group(2)}}}{{{m.group(3)}}}"
    m = _MIXED_RE.match(s)
    if m and int(m.group(3)) < int(m.group(4)):
        # `137\frac{1}{2}` in a final answer is a mixed number, 137 1/2.
        whole, num, den = int(m.group(2)), int(m.group(3)), int(m.group(4))
        s = f"{m.group(1)}\\frac{{{whole * den + num}}}{{{den}}}"
    if re.fullmatch(r"-?(?:\d+\.?\d*|\.\d+)", s):
        value = parse_number(s)
        if value is not None:
            s = format_number(value)
    m = re.fullmatch(r"\(([A-Z])\)|([A-Z])[.)]", s)
    if m:
        s = m.group(1) or m.group(2)
    return s.replace("\x01", "\\{").replace("\x02", "\\}")


_OPEN = "([{\x01"
_CLOSE = ")]}\x02"


def _split_top(s: str, sep: str) -> list[str]:
    """Split `s` on `sep` where it is outside every bracket."""
    parts: list[str] = []
    depth = 0
    start = 0
    i = 0
    while i < len(s):
        c = s[i]
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif depth == 0 and s.startswith(sep, i):
            parts.append(s[start:i])
            i += len(sep)
            start = i
            continue
        i += 1
    parts.append(s[start:])
    return parts


_DECIMAL_RE = re.compile(r"-?\d*\.\d+")


def _is_decimal(s: str) -> bool:
    """Whether `s` is a decimal literal (`4.67`): an approximation unless exactly equal."""
    return _DECIMAL_RE.fullmatch(s) is not None
