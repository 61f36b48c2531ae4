"""DROP-style answer overlap: bag-of-tokens F1 with multi-span alignment.

Conventions follow the DROP paper's evaluation (Dua et al., 2019), re-implemented here:

* an answer is a list of spans; each span is normalised (lowercase, punctuation and
  articles removed, numbers canonical so `1,000` == `1000` and `2.0` == `2`) and turned
  into a *set* of tokens;
* predicted spans are aligned one-to-one to gold spans to maximise total F1 (Hungarian
  algorithm); spans left unaligned score 0, so extra or missing spans cost recall or
  precision;
* when a gold span contains numbers, an aligned predicted span must share at least one of
  them, else that pair's F1 is 0 ("the 1990s" vs "the 1980s" is wrong, not 50% right);
* the answer's F1 is the mean over max(#gold, #pred) slots; EM needs identical span sets.

With several acceptable gold answers the best one counts.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from typing import Any

from benchmarks._types import VerifyResult
from benchmarks.scoring.extract import MAX_SEGMENT, Extraction, strip_markdown
from benchmarks.scoring.reasoning import extract_with_fallback
from benchmarks.scoring.text import answer_is_sentence

__all__ = ["drop_em", "drop_f1", "f1_score", "fuzzy_match", "normalize_span"]

_PUNCT = set(string.punctuation) | {"‘", "’", "“", "”", "–", "—"}
_ARTICLES = {"a", "an", "the"}


def _number(token: str) -> float | None:
    try:
        return float(token.replace(",", ""))
    except ValueError:
        return None


def _canon_number(value: float) -> str:
    return str(int(value)) if value.is_integer() and abs(value) < 1e18 else repr(value)


def _tokens(span: str) -> list[str]:
    out: list[str] = []
    for raw in re.split(r"[\s\-–—]+", span.lower()):
        num = _number(raw.strip(".")) if raw.strip(".") else None
        if num is not None and raw.strip(".") not in {"nan", "inf", "infinity"}:
            out.append(_canon_number(num))
            continue
        tok = "".join(ch for ch in raw if ch not in _PUNCT)
        if tok and tok not in _ARTICLES:
            out.append(tok)
    return out


def normalize_span(span: str) -> str:
    """DROP normalisation of one span (`"The 1,000 men."` -> `"1000 men"`)."""
    return " ".join(_tokens(span))


def _as_spans(answer: str | Sequence[str]) -> list[str]:
    return [answer] if isinstance(answer, str) else list(answer)


def _span_f1(pred: set[str], gold: set[str]) -> float:
    common = len(pred & gold)
    if not common:
        return 0.0
    precision = common / len(pred)
    recall = common / len(gold)
    return 2 * precision * recall / (precision + recall)


def _is_num(tok: str) -> bool:
    return _number(tok) is not None


def _numbers_agree(pred: set[str], gold: set[str]) -> bool:
    gold_nums = {t for t in gold if _is_num(t)}
    return not gold_nums or bool(gold_nums & {t for t in pred if _is_num(t)})


def f1_score(prediction: str | Sequence[str], gold: str | Sequence[str]) -> float:
    """DROP F1 of a (multi-span) prediction against one (multi-span) gold answer.

    Args:
        prediction: A span or list of spans.
        gold: A span or list of spans.

    Returns:
        F1 in [0, 1].
    """
    pred_bags = [set(_tokens(s)) for s in _as_spans(prediction)]
    gold_bags = [set(_tokens(s)) for s in _as_spans(gold)]
    pred_bags = [b for b in pred_bags if b] or [set()]
    gold_bags = [b for b in gold_bags if b] or [set()]
    if gold_bags == [set()] or pred_bags == [set()]:
        # Both empty counts as a match (DROP's convention for empty golds).
        return 1.0 if gold_bags == pred_bags else 0.0
    scores = [
        [_span_f1(p, g) if _numbers_agree(p, g) else 0.0 for p in pred_bags] for g in gold_bags
    ]
    if len(gold_bags) == 1 and len(pred_bags) == 1:
        return scores[0][0]
    import numpy as np
    from scipy.optimize import linear_sum_assignment  # lazy: scipy is slow to import

    matrix = np.asarray(scores)
    rows, cols = linear_sum_assignment(matrix, maximize=True)
    total = float(matrix[rows, cols].sum())
    return total / max(len(gold_bags), len(pred_bags))


def _em(prediction: str | Sequence[str], gold: str | Sequence[str]) -> float:
    pred = sorted(normalize_span(s) for s in _as_spans(prediction))
    ref = sorted(normalize_span(s) for s in _as_spans(gold))
    return 1.0 if set(pred) == set(ref) and len(pred) == len(ref) else 0.0


def drop_f1(
    prediction_spans: str | Sequence[str], gold_spans_list: Sequence[str | Sequence[str]]
) -> float:
    """Best DROP F1 over alternative gold answers.

    Args:
        prediction_spans: The predicted span(s).
        gold_spans_list: Alternative gold answers, each a span or list of spans.

    Returns:
        The maximum F1 (0.0 when there is no gold).
    """
    return max((f1_score(prediction_spans, g) for g in gold_spans_list), default=0.0)


def drop_em(
    prediction_spans: str | Sequence[str], gold_spans_list: Sequence[str | Sequence[str]]
) -> float:
    """Best DROP exact match over alternative gold answers (same normalised span set)."""
    return max((_em(prediction_spans, g) for g in gold_spans_list), default=0.0)


_BOLD_RE = re.compile(r"\*\*([^*\n]{1,80})\*\*")


def _answer_text(text: str) -> Extraction | None:
    """The answer span of a reply: its `Answer:` line, the sentence after "the answer is",
    its last bolded phrase, a short last line after the explanation, else all of it."""
    hits = list(re.finditer(r"(?:\*\*)?answer\s*(?:\*\*)?\s*[:：]", text, re.IGNORECASE))
    if hits:
        seg = text[hits[-1].end() :].strip().split("\n", 1)[0]
        seg = strip_markdown(seg).strip()
        if seg:
            return Extraction(seg, "answer_line", hits[-1].end())
    said = answer_is_sentence(text)
    if said:
        return said
    bolds = list(_BOLD_RE.finditer(text[-MAX_SEGMENT:]))
    if bolds:
        start = max(len(text) - MAX_SEGMENT, 0) + bolds[-1].start(1)
        return Extraction(bolds[-1].group(1).strip(), "bold_answer", start)
    plain = strip_markdown(text).strip()
    lines = [ln.strip() for ln in plain[-MAX_SEGMENT:].splitlines() if ln.strip()]
    if len(lines) > 1 and len(lines[-1].split()) <= 8:
        return Extraction(lines[-1].rstrip("."), "last_line", len(plain) - len(lines[-1]))
    return Extraction(plain, "full_text", 0) if plain else None


def fuzzy_match(
    response: str | None,
    expected: str | Sequence[str],
    *,
    reasoning: str | None = None,
    span_sep: str | None = None,
    use_reasoning: bool = True,
    **_opts: Any,
) -> VerifyResult:
    """Score a reply by DROP F1 against the gold (reward = F1, not 0/1).

    Args:
        response: The model's reply; the answer is after the last `Answer:` if present,
            else after "the answer is", else its last bolded phrase, else a short last
            line, else the whole reply.
        expected: The gold answer: a string, or a list of alternative gold answers (each a
            string or a list of spans).
        reasoning: Separate reasoning text, used only when the reply is empty.
        span_sep: Split the predicted answer into spans on this separator (e.g. `;` or
            `,` for multi-span questions); None keeps it as one span.
        use_reasoning: Set False to never take the answer from the reasoning.

    Returns:
        reward = best F1; details hold `f1`, `em` and the normalised spans.
    """
    golds: list[str | Sequence[str]] = [expected] if isinstance(expected, str) else list(expected)
    notes: dict[str, Any] = {}
    ext, source, _, _ = extract_with_fallback(
        response, reasoning, _answer_text, use_reasoning=use_reasoning, details=notes
    )
    details: dict[str, Any] = {
        "method": ext.method, "source": source, "f1": 0.0, "em": 0.0, **notes
    }
    if ext.answer is None:
        details["normalized_pred"] = None
        return VerifyResult(0.0, None, details)
    spans = [s for s in ext.answer.split(span_sep)] if span_sep else [ext.answer]
    f1 = drop_f1(spans, golds)
    details.update(
        f1=f1,
        em=drop_em(spans, golds),
        normalized_pred=[normalize_span(s) for s in spans],
        normalized_gold=[[normalize_span(s) for s in _as_spans(g)] for g in golds],
    )
    return VerifyResult(f1, ext.answer, details)
