"""Mathematical answer equivalence (MATH, MATH-500, AIME, ...).

Pipeline, cheapest first, so that most items never touch sympy:

1. extract the final answer (`\\boxed{}` with nested braces, `\\fbox{}`, "final answer is
   $...$", an `Answer:` line, the last `$...$`, the last number);
2. normalise the LaTeX (`\\dfrac`, `\\frac12`, `\\left`, degrees, `\\%`, `\\$`, units in
   `\\text{}`, thin spaces, thousands separators, `x = 3`, trailing periods);
3. equal strings -> equal;
4. structure: tuples and intervals (ordered, brackets must agree), sets, comma lists,
   `\\pm` and unions (unordered), matrices (by shape), each element compared recursively;
5. plain numbers (`0.5`, `\\frac{1}{2}`, `3/4`) compared exactly as rationals;
6. sympy (`parse_latex`): numeric closeness for constants, random-point evaluation and
   symbolic expansion for expressions, under a hard per-item time limit. In the main thread
   the limit is a `SIGALRM` timer; anywhere else (worker threads, executors of an asyncio
   loop) the comparison runs in a helper process that is killed on overrun. A timeout
   counts as "not equal" and is reported.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import random
import re
import selectors
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from benchmarks._types import VerifyResult
from benchmarks.scoring.extract import (
    MAX_SEGMENT,
    Extraction,
    answer_is_segments,
    find_boxed,
    last_box_group,
    last_matches,
    math_spans,
)
from benchmarks.scoring.math_forms import base_digits_match, equation_rhs
from benchmarks.scoring.numeric import _NUM_RE, format_number, numbers_close, parse_number
from benchmarks.scoring.reasoning import extract_with_fallback

__all__ = [
    "MathComparison",
    "compare_math",
    "extract_math_answer",
    "math_equiv",
    "math_match",
    "normalize_math",
]

# ---------------------------------------------------------------------------------------
# Extraction
# ---------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------
# Normalisation
# ---------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------
# Structure
# ---------------------------------------------------------------------------------------

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


def _encloses(s: str) -> bool:
    """Whether the first character's bracket closes at the very end of `s`."""
    depth = 0
    for i, c in enumerate(s):
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
            if depth == 0:
                return i == len(s) - 1
    return False


@dataclass(frozen=True, slots=True)
class _Node:
    kind: str  # atom | ordered | unordered | matrix
    text: str = ""
    brackets: str = ""
    items: tuple[Any, ...] = ()


def _expand_pm(s: str) -> list[str] | None:
    parts = _split_top(s, "\\pm")
    if len(parts) == 2:
        a, b = parts
        return [f"{a}+({b})" if a else b, f"{a}-({b})" if a else f"-({b})"]
    parts = _split_top(s, "\\mp")
    if len(parts) == 2:
        a, b = parts
        return [f"{a}-({b})" if a else f"-({b})", f"{a}+({b})" if a else b]
    return None


def _protect(s: str) -> str:
    return s.replace("\\{", "\x01").replace("\\}", "\x02")


def _structure(s: str) -> _Node:
    return _parse_node(_protect(s))


def _restore(s: str) -> str:
    return s.replace("\x01", "\\{").replace("\x02", "\\}")


def _parse_node(s: str) -> _Node:
    union = _split_top(s, "\\cup")
    if len(union) > 1:
        return _Node("unordered", brackets="cup", items=tuple(_parse_node(p) for p in union))
    m = re.fullmatch(r"\\begin\{([pbv]?matrix)\}(.*)\\end\{\1\}", s)
    if m:
        rows = [r for r in m.group(2).split("\\\\") if r]
        cells = tuple(tuple(_parse_node(c) for c in r.split("&")) for r in rows)
        return _Node("matrix", items=cells)
    if s[:1] == "\x01" and _encloses(s):
        inner = s[1:-1]
        return _Node("unordered", brackets="set", items=_elements(inner))
    if s[:1] in "([" and s[-1:] in ")]" and _encloses(s):
        parts = _split_top(s[1:-1], ",")
        if len(parts) > 1:
            return _Node(
                "ordered", brackets=s[0] + s[-1], items=tuple(_parse_node(p) for p in parts)
            )
    parts = _split_top(s, ",")
    if len(parts) > 1 or _expand_pm(s):
        return _Node("unordered", brackets="list", items=_elements(s))
    return _Node("atom", text=_restore(s))


def _elements(s: str) -> tuple[_Node, ...]:
    out: list[_Node] = []
    for part in _split_top(s, ","):
        if not part:
            continue
        expanded = _expand_pm(part)
        if expanded:
            out.extend(_Node("atom", text=_restore(normalize_math(_restore(e)))) for e in expanded)
        else:
            out.append(_parse_node(_protect(normalize_math(_restore(part)))))
    return tuple(out)


# ---------------------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MathComparison:
    """The outcome of comparing two math answers.

    Attributes:
        equal: The verdict (a timeout counts as False).
        how: Which step decided (`string`, `numeric`, `structure`, `sympy`,
            `sympy_numeric`, `timeout`, `too_complex`, `unparsed`, `different`).
        timed_out: Whether a sympy comparison hit its time limit.
        pred_normalized: Normal form of the prediction.
        gold_normalized: Normal form of the gold.
    """

    equal: bool
    how: str
    timed_out: bool
    pred_normalized: str
    gold_normalized: str


class _Budget:
    """Shared deadline across the element comparisons of one item."""

    def __init__(self, timeout: float) -> None:
        self.deadline = time.monotonic() + timeout
        self.timed_out = False
        self.hows: set[str] = set()

    def left(self) -> float:
        return self.deadline - time.monotonic()


_TEXTY_RE = re.compile(r"^(?:[A-Za-z][a-z]+|[A-Z]|\d+_\{?\d+\}?)$")
_TOO_BIG_RE = re.compile(r"\^\{?-?\d{4,}|\^\{[^{}]*\^\{?\d{2,}|\d{60,}|!\s*!|\d{4,}!")


_DECIMAL_RE = re.compile(r"-?\d*\.\d+")


def _is_decimal(s: str) -> bool:
    """Whether `s` is a decimal literal (`4.67`): an approximation unless exactly equal."""
    return _DECIMAL_RE.fullmatch(s) is not None


def _atoms_equal(a: str, b: str, budget: _Budget) -> bool:
    a, b = normalize_math(a), normalize_math(b)
    if a == b:
        budget.hows.add("string")
        return True
    if not a or not b:
        return False
    if _TEXTY_RE.match(a) or _TEXTY_RE.match(b):
        # Words, choice letters and base-n numerals only compare as strings: sympy would
        # read "east" as e*a*s*t (equal to "eats").
        if a.lower() == b.lower():
            budget.hows.add("string")
            return True
        return False
    na, nb = parse_number(a), parse_number(b)
    if na is not None and nb is not None:
        budget.hows.add("numeric")
        if _is_decimal(a) and not _is_decimal(b):
            # A predicted `0.3333333` is an approximation of `\frac{1}{3}`, not the answer
            # (an exact answer to a decimal gold is still compared within tolerance).
            return na == nb
        return numbers_close(na, nb)
    if len(a) > 400 or len(b) > 400 or _TOO_BIG_RE.search(a) or _TOO_BIG_RE.search(b):
        budget.hows.add("too_complex")
        return False
    left = budget.left()
    if left <= 0:
        budget.timed_out = True
        return False
    verdict = _sympy_with_limit(a, b, left)
    if verdict is None:
        budget.timed_out = True
        return False
    equal, how = verdict
    budget.hows.add(how)
    return equal


def _as_vector(node: _Node) -> _Node:
    """A one-column or one-row matrix as the tuple it writes (`pmatrix` vs `(1, 2, 3)`)."""
    if node.kind != "matrix" or not node.items:
        return node
    if all(len(r) == 1 for r in node.items):
        cells = tuple(r[0] for r in node.items)
    elif len(node.items) == 1:
        cells = tuple(node.items[0])
    else:
        return node
    return _Node("ordered", brackets="()", items=cells) if len(cells) > 1 else node


def _nodes_equal(x: _Node, y: _Node, budget: _Budget) -> bool:
    if x.kind != y.kind and "matrix" in (x.kind, y.kind):
        x, y = _as_vector(x), _as_vector(y)
    if x.kind != y.kind:
        return False
    if x.kind == "atom":
        return _atoms_equal(x.text, y.text, budget)
    if x.kind == "matrix":
        if [len(r) for r in x.items] != [len(r) for r in y.items]:
            return False
        return all(
            _nodes_equal(a, b, budget)
            for ra, rb in zip(x.items, y.items, strict=True)
            for a, b in zip(ra, rb, strict=True)
        )
    if x.brackets != y.brackets and {x.brackets, y.brackets} != {"set", "list"}:
        return False
    if len(x.items) != len(y.items):
        return False
    if x.kind == "ordered":
        return all(_nodes_equal(a, b, budget) for a, b in zip(x.items, y.items, strict=True))
    # Unordered: match each element to a distinct partner.
    unused = list(y.items)
    for a in x.items:
        for k, b in enumerate(unused):
            if _nodes_equal(a, b, budget):
                del unused[k]
                break
        else:
            return False
    return True


def compare_math(pred: str, gold: str, *, timeout: float = 5.0) -> MathComparison:
    """Compare two math answers and say how the verdict was reached.

    Args:
        pred: The predicted answer (raw LaTeX, already extracted).
        gold: The gold answer (raw LaTeX).
        timeout: Time limit in seconds for the sympy part of this comparison.

    Returns:
        A `MathComparison`.
    """
    a, b = normalize_math(pred), normalize_math(gold)
    if not a or not b:
        return MathComparison(False, "empty", False, a, b)
    if a == b:
        return MathComparison(True, "string", False, a, b)
    if "_" in b and base_digits_match(a, b):
        return MathComparison(True, "base_digits", False, a, b)
    rhs = equation_rhs(a) if "=" in a and "=" not in b else None
    if rhs is not None:
        inner = compare_math(rhs, gold, timeout=timeout)
        return MathComparison(inner.equal, f"equation_rhs:{inner.how}", inner.timed_out, a, b)
    if max(len(a), len(b)) > MAX_MATH_ANSWER:
        return MathComparison(False, "too_long", False, a, b)
    budget = _Budget(timeout)
    x, y = _structure(a), _structure(b)
    equal = _nodes_equal(x, y, budget)
    if x.kind != "atom" or y.kind != "atom":
        how = "structure"
    elif budget.timed_out:
        how = "timeout"
    else:
        how = next(iter(budget.hows), "different") if len(budget.hows) == 1 else "different"
        if len(budget.hows) > 1:
            how = "+".join(sorted(budget.hows))
    return MathComparison(equal, how, budget.timed_out, a, b)


def math_equiv(pred: str, gold: str, *, timeout: float = 5.0) -> bool:
    """Whether two math answers are equivalent.

    Args:
        pred: The predicted answer (raw LaTeX, already extracted).
        gold: The gold answer (raw LaTeX).
        timeout: Time limit in seconds for the sympy part (a timeout means not equal).

    Returns:
        True when equivalent.
    """
    return compare_math(pred, gold, timeout=timeout).equal


def math_match(
    response: str | None,
    expected: str,
    *,
    reasoning: str | None = None,
    timeout: float = 5.0,
    use_reasoning: bool = True,
    **_opts: Any,
) -> VerifyResult:
    """Score a math solution by the equivalence of its final answer to the gold.

    Args:
        response: The model's reply (may contain `<think>` blocks).
        expected: The gold answer (raw LaTeX, or a full solution with a `\\boxed{}`).
        reasoning: Separate reasoning text; searched only if the reply has no answer.
        timeout: Time limit in seconds for the sympy part.
        use_reasoning: Set False to never take the answer from the reasoning.

    Returns:
        reward 1.0 when equivalent; details hold `method`, `source`, the normal forms,
        `comparison` (the deciding step) and `timed_out`.
    """
    gold = expected
    if "\\boxed" in gold or "\\fbox" in gold:
        box = find_boxed(gold)
        if box:
            gold = box[-1][0]
    ext, source, _, _ = extract_with_fallback(
        response, reasoning, extract_math_answer, use_reasoning=use_reasoning
    )
    details: dict[str, Any] = {
        "method": ext.method,
        "source": source,
        "normalized_pred": None,
        "normalized_gold": normalize_math(gold),
        "comparison": None,
        "timed_out": False,
    }
    if ext.answer is None:
        return VerifyResult(0.0, None, details)
    cmp = compare_math(ext.answer, gold, timeout=timeout)
    details.update(normalized_pred=cmp.pred_normalized, comparison=cmp.how, timed_out=cmp.timed_out)
    return VerifyResult(1.0 if cmp.equal else 0.0, ext.answer, details)


# ---------------------------------------------------------------------------------------
# sympy, with a hard time limit
# ---------------------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def _to_sympy(s: str) -> Any:
    """Parse a normalised answer into a sympy object (raises on failure)."""
    import sympy
    from sympy.parsing.latex import parse_latex

    try:
        expr = parse_latex(s)
    except Exception:
        from sympy.parsing.sympy_parser import (
            convert_xor,
            implicit_multiplication_application,
            parse_expr,
            standard_transformations,
        )

        plain = re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", r"((\1)/(\2))", s)
        plain = re.sub(r"\\sqrt\{([^{}]*)\}", r"sqrt(\1)", plain)
        plain = plain.replace("\\pi", "pi").replace("\\cdot", "*").replace("\\times", "*")
        plain = plain.replace("{", "(").replace("}", ")").replace("\\", "")
        expr = parse_expr(
            plain,
            transformations=(
                *standard_transformations,
                implicit_multiplication_application,
                convert_xor,
            ),
        )
    # parse_latex reads i, e and \pi as plain symbols; answers mean the constants.
    subs = {sympy.Symbol("i"): sympy.I, sympy.Symbol("e"): sympy.E, sympy.Symbol("pi"): sympy.pi}
    if isinstance(expr, sympy.Basic):
        # parse_latex builds unevaluated trees (`Mul(2, pi, evaluate=False)`), which
        # `N()` leaves symbolic; `doit()` evaluates them.
        expr = expr.subs(subs).doit()
    return expr


def _close(x: Any, y: Any) -> bool:
    try:
        cx, cy = complex(x), complex(y)
    except (TypeError, ValueError):
        return False
    if cx != cx or cy != cy:  # NaN
        return False
    return abs(cx - cy) <= 1e-6 * max(1.0, abs(cy))


def _at_random_points(
    exprs: tuple[Any, ...], symbols: set[Any], n: int = 6
) -> list[tuple[complex, ...]]:
    """Values of `exprs` at `n` seeded random rational points; points where any of them is
    undefined are skipped."""
    import sympy

    rng = random.Random(0)
    ordered = sorted(symbols, key=str)
    out: list[tuple[complex, ...]] = []
    bad = (sympy.zoo, sympy.nan, sympy.oo, -sympy.oo)
    for _ in range(n):
        point = {s: sympy.Rational(rng.randint(-97, 97), rng.randint(7, 31)) for s in ordered}
        try:
            values = [sympy.N(e.subs(point), 20) for e in exprs]
            if all(v.is_number and not v.has(*bad) for v in values):
                out.append(tuple(complex(v) for v in values))
        except Exception:
            continue
    return out


def _sympy_equal(a: str, b: str) -> tuple[bool, str]:
    """Compare a normalised prediction `a` with a normalised gold `b` using sympy.

    May be slow: call under a time limit."""
    import sympy

    try:
        x, y = _to_sympy(a), _to_sympy(b)
    except Exception:
        return False, "unparsed"
    if isinstance(x, sympy.Equality) and isinstance(y, sympy.Equality):
        # Equations are equal up to a non-zero constant factor: 2x+2y=2 is x+y=1. Check
        # that (lhs - rhs) ratios agree at a few random points.
        dx, dy = x.lhs - x.rhs, y.lhs - y.rhs
        points = _at_random_points((dx / dy,), dx.free_symbols | dy.free_symbols)
        ratios = [r for (r,) in points if r != 0]
        if len(ratios) < 3:
            return False, "sympy_numeric"
        return all(_close(r, ratios[0]) for r in ratios), "sympy_numeric"
    if isinstance(x, sympy.Equality) or isinstance(y, sympy.Equality):
        return False, "sympy"
    if not isinstance(x, sympy.Expr) or not isinstance(y, sympy.Expr):
        return False, "unparsed"
    free = sorted(x.free_symbols | y.free_symbols, key=str)
    if not free and _is_decimal(a) and not _is_decimal(b):
        # A predicted decimal against an exact gold (`6366.2` vs `\frac{20000}{\pi}`): equal
        # only when the decimal is the exact value, never because it is close.
        diff = sympy.N(y, 50) - sympy.Rational(a)
        return bool(abs(complex(diff)) < 1e-40), "sympy_exact"
    if not free:
        return _close(sympy.N(x, 30), sympy.N(y, 30)), "sympy_numeric"
    # Random-point test first: cheap, and a non-identity almost surely differs at one of a
    # few rational points (expanding first can take seconds on big powers).
    points = _at_random_points((x, y), set(free))
    if any(not _close(vx, vy) for vx, vy in points):
        return False, "sympy_numeric"
    if len(points) >= 3:
        return True, "sympy_numeric"
    try:
        return bool(sympy.simplify(x - y) == 0), "sympy"
    except Exception:
        return False, "sympy"


class _Overrun(BaseException):
    """Raised by the SIGALRM handler. A BaseException so sympy's `except Exception` blocks
    cannot swallow it."""


_alarm_active = False


def _on_alarm(signum: int, frame: Any) -> None:
    if _alarm_active:
        raise _Overrun


@lru_cache(maxsize=1)
def _load_sympy() -> None:
    """Import sympy and build its LaTeX parser once, outside any item's time limit.

    Both take seconds on a loaded machine; inside the alarm they made the first sympy
    comparison of a process time out (scored as not equal) whatever the answers were.
    """
    with contextlib.suppress(Exception):  # a broken parser shows up, per item, later
        _sympy_equal("1", "1")


def _with_alarm(a: str, b: str, timeout: float) -> tuple[bool, str] | None:
    global _alarm_active
    _load_sympy()  # the worker process does the same before it reports "ready"
    old_handler = signal.signal(signal.SIGALRM, _on_alarm)
    old_delay, _ = signal.setitimer(signal.ITIMER_REAL, max(timeout, 0.001))
    started = time.monotonic()
    _alarm_active = True
    try:
        return _sympy_equal(a, b)
    except _Overrun:
        return None
    finally:
        _alarm_active = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        if old_delay > 0:
            # Someone else's timer was pending (pytest-timeout, ...): re-arm what is left.
            signal.setitimer(
                signal.ITIMER_REAL, max(old_delay - (time.monotonic() - started), 0.001)
            )


class _Worker:
    """A helper process that runs sympy comparisons and can be killed on overrun."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.scoring._sympy_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            start_new_session=True,
        )
        # Importing sympy takes a second or two; that is not the item's time.
        if self._readline(proc, 120.0) != "ready":
            self._kill(proc)
            raise RuntimeError("sympy worker process failed to start")
        return proc

    @staticmethod
    def _readline(proc: subprocess.Popen[str], timeout: float) -> str | None:
        assert proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout):
                return None
        line = proc.stdout.readline()
        return line.strip() if line else None

    @staticmethod
    def _kill(proc: subprocess.Popen[str]) -> None:
        try:
            proc.kill()
            proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass

    def compare(self, a: str, b: str, timeout: float) -> tuple[bool, str] | None:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._proc = self._start()
            proc = self._proc
            assert proc.stdin is not None
            try:
                proc.stdin.write(json.dumps([a, b]) + "\n")
                proc.stdin.flush()
                line = self._readline(proc, timeout)
            except OSError:
                line = None  # the helper died (e.g. out of memory): restart it next time
            if line is None:
                self._kill(proc)
                self._proc = None
                return None
            equal, how = json.loads(line)
            return bool(equal), str(how)

    def close(self) -> None:
        with self._lock:
            if self._proc is not None:
                self._kill(self._proc)
                self._proc = None


_worker = _Worker()
atexit.register(_worker.close)


def _sympy_with_limit(a: str, b: str, timeout: float) -> tuple[bool, str] | None:
    """Run `_sympy_equal` under a hard time limit; None means it ran out of time."""
    if (
        hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and os.environ.get("NEL_MATH_ISOLATION") != "process"
    ):
        return _with_alarm(a, b, timeout)
    return _worker.compare(a, b, timeout)
