"""The structure of a normalised answer: tuples, intervals, sets, comma lists, `\\pm`, unions and
matrices parsed into nodes whose elements are compared one by one (step 4 of `math_equiv`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from benchmarks.scoring.math_normalize import _CLOSE, _OPEN, _split_top, normalize_math


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
