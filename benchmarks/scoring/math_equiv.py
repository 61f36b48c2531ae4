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

Steps 1, 2, 4 and 6 live in `math_extract`, `math_normalize`, `math_structure` and
`math_sympy`; this module compares (steps 3-5) and scores.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from benchmarks._types import VerifyResult
from benchmarks.scoring.extract import find_boxed
from benchmarks.scoring.math_extract import MAX_MATH_ANSWER, extract_math_answer
from benchmarks.scoring.math_forms import base_digits_match, equation_rhs
from benchmarks.scoring.math_normalize import _is_decimal, normalize_math
from benchmarks.scoring.math_structure import _Node, _structure
from benchmarks.scoring.math_sympy import _sympy_with_limit
from benchmarks.scoring.numeric import numbers_close, parse_number
from benchmarks.scoring.reasoning import extract_with_fallback

__all__ = [
    "MathComparison",
    "compare_math",
    "math_equiv",
    "math_match",
]


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
