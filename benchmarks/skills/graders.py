"""NeMo Skills' grading rules, written for nel from reading Skills' source (never copied).

Each rule names the Skills file it follows (NVIDIA-NeMo/Skills at 8b18f39, Oct 2025):

- math: `nemo_skills/evaluation/math_grader.py` — the answer is the content of the LAST
  `\\boxed{...}` (braces matched; no `\\boxed` means no answer), compared by `math_equal`:
  a gold option letter compared as a letter, then `%` and a trailing `.` dropped, then a
  literal comparison of the normalised forms, then symbolic equivalence.
- multichoice: `nemo_skills/evaluation/evaluator/mcq.py` (`eval_mcq`) — the boxed answer
  (its last standalone letter A-J when it is longer than one character), else the last
  `Answer: X` line (case-insensitive, markdown `**`/`_` allowed); correct when the letter
  equals the gold one exactly.
- code: `nemo_skills/evaluation/evaluator/code.py` (`preprocess_code`) — the text after a
  closed `</think>` (an unclosed `<think>` is no answer), the first ```` ```python ```` block
  (else the first ```` ``` ```` block), which evalplus appends to the problem's prompt.

Where Skills calls `math_verify` / `latex2sympy2_extended` (not installed here), nel uses its
own LaTeX normaliser and sympy equivalence (`benchmarks.scoring`), with a timeout. Every scan
here is linear in the length of the answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_BOXED = "\\boxed"
# A percentage gold or answer: `12.5%` / `12.5\%` -> `12.5` (math_grader._additional_normalization).
_PERCENT = re.compile(r"(\d+\.?\d*)(?:\\%|%)")
# Answers compared literally, never symbolically: words and commas, or digits and spaces.
_LITERAL = re.compile(r"[a-zA-Z ,]+|[0-9 ]+")
_LETTER = re.compile(r"\b[A-J]\b")
# mcq.py's fallback: the last "Answer: X" (markdown bold/italic markers allowed around it).
_ANSWER_LINE = re.compile(r"(?i)[\*\_]{0,2}Answer[\*\_]{0,2}\s*:[\s\*\_]{0,2}\s*([A-Z])(?![a-zA-Z0-9])")
_MCQ_LETTERS = "ABCDEFGHIJ"


def extract_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` in `text`, or None (math_grader.extract_answer).

    As in Skills, the scan starts at the last `\\boxed` and takes the span up to the brace
    that closes the first one opened; a `\\boxed` not directly followed by `{` (`\\boxed 5`)
    or left unclosed gives no answer.
    """
    idx = text.rfind(_BOXED)
    if idx < 0:
        return None
    depth = 0
    for i in range(idx, len(text)):
        ch = text[i]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                span = text[idx:i + 1]
                head = _BOXED + "{"
                return span[len(head):-1] if span.startswith(head) else None
    return None


def _percent_and_period(expr: str) -> str:
    """math_grader's extra normalisation: a bare percentage loses its sign, and a trailing
    sentence period or backslash goes."""
    m = _PERCENT.fullmatch(expr)
    if m:
        expr = m.group(1)
    return expr.rstrip(".\\")


def _as_letter(pred: str) -> str | None:
    """The option letter a predicted answer names, as math_verify's string extraction reads
    it: the answer alone, maybe in parentheses or `\\text{}`."""
    s = pred.strip()
    if s.startswith("\\text{") and s.endswith("}"):
        s = s[len("\\text{"):-1].strip()
    s = s.strip("()").strip()
    return s if len(s) == 1 and s in _MCQ_LETTERS else None


def math_equal(gold: object, pred: str | None, *, timeout: float = 10.0) -> bool:
    """Whether `pred` (an extracted answer) equals `gold` under Skills' `math_equal`.

    Args:
        gold: The prepared row's `expected_answer` (a number or a string).
        pred: The extracted answer; None (nothing extracted) is never equal.
        timeout: Seconds for the symbolic comparison (a timeout means not equal).
    """
    if pred is None:
        return False
    from benchmarks.scoring import math_equiv, normalize_math

    gt, pr = str(gold), str(pred)
    if gt.strip() in _MCQ_LETTERS and len(gt.strip()) == 1 and _as_letter(pr) == gt.strip():
        return True
    gt, pr = _percent_and_period(gt), _percent_and_period(pr)
    norm_gt, norm_pr = normalize_math(gt), normalize_math(pr)
    same = norm_gt.replace(" ", "") == norm_pr.replace(" ", "")
    if same or (_LITERAL.fullmatch(norm_gt) and _LITERAL.fullmatch(norm_pr)):
        return same
    return math_equiv(pr, gt, timeout=timeout)


def _last_match(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    """The last match of `pattern` in `text`, in one linear pass (Skills writes it as a
    negative look-ahead, which rescans the rest of the text at every candidate)."""
    found = None
    for found in pattern.finditer(text):  # noqa: B007 - the loop keeps the last match
        pass
    return found


def mcq_letter(text: str) -> tuple[str | None, str]:
    """The option letter of a multiple-choice answer as Skills' `eval_mcq` extracts it, and
    how (`boxed`, `answer_line` or `none`)."""
    parsed = extract_boxed(text)
    if parsed is not None:
        if len(parsed) != 1:
            last = _last_match(_LETTER, parsed)  # the last standalone A-J in the box
            if last is not None:
                parsed = last.group(0)
        return parsed, "boxed"
    found = _last_match(_ANSWER_LINE, text)
    if found is not None:
        return found.group(1), "answer_line"
    return None, "none"


@dataclass(frozen=True, slots=True)
class CodeCompletion:
    """What Skills' `preprocess_code` makes of a generation: the completion and the rule."""

    completion: str
    method: str  # fence_python, fence, plain, unfinished_think


def code_completion(generation: str) -> CodeCompletion:
    """The code evalplus appends to the problem's prompt (Skills' `preprocess_code`)."""
    text = generation.strip().replace("\r", "")
    if "<think>" in text:
        end = text.find("</think>")
        if end < 0:
            return CodeCompletion("", "unfinished_think")
        text = text[end + len("</think>"):].strip()
    for tag, method in (("```python", "fence_python"), ("```", "fence")):
        start = text.find(tag)
        if start < 0:
            continue
        text = text[start + len(tag):].strip()
        close = text.find("```")
        if close >= 0:
            text = text[:close].strip()
        return CodeCompletion(text, method)
    return CodeCompletion(text.strip() if text.startswith(" ") else text, "plain")
