"""Short free-text answers: normalisation, exact match, `Answer:` lines, TriviaQA aliases."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks._types import VerifyResult
from benchmarks.scoring.alias_forms import compound_head, corrected_answer, lemma
from benchmarks.scoring.extract import Extraction, answer_is_segments, strip_markdown
from benchmarks.scoring.reasoning import extract_with_fallback

__all__ = ["answer_is_sentence", "answer_line", "exact_match", "normalize_text", "triviaqa_match"]

_ARTICLES_RE = re.compile(r"\b(?:a|an|the)\b")
_WS_RE = re.compile(r"\s+")


def _is_punct(ch: str) -> bool:
    return unicodedata.category(ch).startswith(("P", "S")) and ch not in "+%$"


def normalize_text(text: str) -> str:
    """SQuAD-style answer normalisation.

    Lowercases, removes markdown, LaTeX text wrappers, punctuation and the English articles,
    and collapses whitespace, so that `**The Eiffel Tower.**` equals `eiffel tower`.

    Args:
        text: Any answer text.

    Returns:
        The normalised text ('' for blank input).
    """
    s = strip_markdown(text)
    s = re.sub(r"\\(?:text|textbf|mathrm|mbox)\s*\{([^{}]*)\}", r"\1", s)
    s = unicodedata.normalize("NFKC", s).lower()
    # Keep decimal points and thousands commas inside numbers ("3.5" must not become "35").
    s = re.sub(r"(?<=\d),(?=\d{3}\b)", "", s)
    s = "".join(
        " " if _is_punct(ch) and not (ch == "." and _between_digits(s, i)) else ch
        for i, ch in enumerate(s)
    )
    s = _ARTICLES_RE.sub(" ", s)
    return _WS_RE.sub(" ", s).strip()


def _between_digits(s: str, i: int) -> bool:
    return 0 < i < len(s) - 1 and s[i - 1].isdigit() and s[i + 1].isdigit()


def _full_text(text: str) -> Extraction | None:
    return Extraction(text.strip(), "full_text", 0) if text.strip() else None


def exact_match(
    response: str | None,
    expected: str,
    *,
    reasoning: str | None = None,
    normalize: bool = True,
    use_reasoning: bool = True,
    **_opts: Any,
) -> VerifyResult:
    """Score the whole answer text against the gold (after normalisation by default).

    Args:
        response: The model's reply (`<think>` blocks are removed first).
        expected: The gold answer.
        reasoning: Separate reasoning text, used only when the reply is empty.
        normalize: Compare `normalize_text` forms (True) or stripped raw strings (False).
        use_reasoning: Set False to never take the answer from the reasoning.

    Returns:
        reward 1.0 on equality, else 0.0 (an empty reply is always 0).
    """
    ext, source, _, _ = extract_with_fallback(
        response, reasoning, _full_text, use_reasoning=use_reasoning
    )
    norm = normalize_text if normalize else str.strip
    gold = norm(expected)
    pred = norm(ext.answer) if ext.answer is not None else None
    details = {
        "method": ext.method,
        "source": source,
        "normalized_pred": pred,
        "normalized_gold": gold,
    }
    ok = bool(pred) and pred == gold
    return VerifyResult(1.0 if ok else 0.0, ext.answer, details)


def _answer_after(prefix: str) -> Callable[[str], Extraction | None]:
    pat = re.compile(
        r"(?:\*\*|__)?" + re.escape(prefix.rstrip(":：").strip()) + r"\s*(?:\*\*|__)?\s*[:：]"
        if prefix.rstrip().endswith((":", "："))
        else re.escape(prefix),
        re.IGNORECASE,
    )

    def extract(text: str) -> Extraction | None:
        hits = list(pat.finditer(text))
        if not hits:
            return None
        pos = hits[-1].end()
        end = text.find("\n", pos)
        seg = text[pos:] if end < 0 else text[pos:end]
        if not strip_markdown(seg).strip():
            # "Answer:" alone on its line: the answer is the next non-empty line.
            rest = [ln for ln in text[pos:].splitlines() if strip_markdown(ln).strip()]
            seg = rest[0] if rest else ""
        seg = strip_markdown(seg).strip()
        return Extraction(seg, "answer_line", pos) if seg else None

    return extract


def answer_line(
    response: str | None,
    expected: str,
    *,
    reasoning: str | None = None,
    prefix: str = "Answer:",
    use_reasoning: bool = True,
    **_opts: Any,
) -> VerifyResult:
    """Score the text after the last `Answer:` (or another prefix) against the gold.

    Comparison is on `normalize_text` forms (case, whitespace, punctuation, articles).

    Args:
        response: The model's reply.
        expected: The gold answer.
        reasoning: Separate reasoning text, searched only when the reply has no prefix.
        prefix: The marker that introduces the answer (case-insensitive; markdown bold
            around it is allowed).
        use_reasoning: Set False to never take the answer from the reasoning.

    Returns:
        reward 1.0 on equality, else 0.0; method `none` when the prefix never appears.
    """
    ext, source, _, _ = extract_with_fallback(
        response, reasoning, _answer_after(prefix), use_reasoning=use_reasoning
    )
    gold = normalize_text(expected)
    pred = normalize_text(ext.answer) if ext.answer is not None else None
    details = {
        "method": ext.method,
        "source": source,
        "prefix": prefix,
        "normalized_pred": pred,
        "normalized_gold": gold,
    }
    ok = bool(pred) and pred == gold
    return VerifyResult(1.0 if ok else 0.0, ext.answer, details)


def answer_is_sentence(text: str) -> Extraction | None:
    """The rest of the sentence after the last "the answer is" (`answer_is`), or None."""
    for seg, off in reversed(answer_is_segments(text)):
        sentence = re.split(r"(?<=[^\d\s])[.!?。](?:\s|$)", seg, maxsplit=1)[0]
        sentence = strip_markdown(sentence).strip().rstrip(".").strip()
        if sentence:
            return Extraction(sentence, "answer_is", off)
    return None


# A line that only opens the conversation ("Great question!", "Sure, here's the answer:").
_FILLER_RE = re.compile(
    r"^(?:(?:sure|great|good|okay|ok|hmm+|well|certainly|of\s+course|absolutely|interesting|"
    r"let\s+me|let's|here'?s|here\s+is|that'?s\s+a|what\s+a|nice|fun)\b.*|.*[:!?])$",
    re.IGNORECASE,
)


def _first_answer_line(text: str) -> Extraction | None:
    """The first line that is not an opening pleasantry (`first_line`)."""
    lines = [
        (ln, i) for i, ln in _line_starts(text) if strip_markdown(ln).strip()
    ][:32]
    if not lines:
        return None
    for ln, i in lines[:-1]:
        if not _FILLER_RE.match(strip_markdown(ln).strip()):
            return Extraction(strip_markdown(ln).strip(), "first_line", i)
    ln, i = lines[-1] if len(lines) > 1 else lines[0]
    return Extraction(strip_markdown(ln).strip(), "first_line", i)


def _line_starts(text: str) -> list[tuple[int, str]]:
    out = []
    pos = 0
    for ln in text[:20_000].split("\n"):
        out.append((pos, ln))
        pos += len(ln) + 1
    return out


# "Either Skylab or Salyut 1", "Sydney or Canberra": an answer offering alternatives.
_HEDGE_TEXT_RE = re.compile(r"\b(?:or|either|and/or)\b", re.IGNORECASE)


def _contains_tokens(haystack: str, needle: str) -> bool:
    """Whether `needle` occurs in `haystack` on token boundaries (both normalised)."""
    return bool(needle) and f" {needle} " in f" {haystack} "


def triviaqa_match(
    response: str | None,
    aliases: Sequence[str] | str,
    *,
    reasoning: str | None = None,
    prefix: str = "Answer:",
    allow_contains: bool = True,
    use_reasoning: bool = True,
    **_opts: Any,
) -> VerifyResult:
    """Score a short factual answer against a list of acceptable aliases (TriviaQA).

    The answer is the text after the last `prefix` if there is one, else the sentence after
    "the answer is", else the first line of the reply that is not an opening pleasantry
    ("Great question!"); a correction in the prose after it ("Answer: Honda. Hmm, actually,
    ... Toyota, not Honda.") replaces it (`self_correction`). An answer offering
    alternatives ("Sydney or Canberra") is `hedged` and never credited by containment.
    Other forms of an alias match too (`alias_forms`): plurals, open and closed compounds
    and `-ish` colours (`match` = `plural_or_colour`, `compact` or `compound`). It matches when its normalised form equals an alias's, or (with
    `allow_contains`) contains an alias as whole tokens: "It was Paris, France" matches
    "Paris".

    Args:
        response: The model's reply.
        aliases: Acceptable answers (a single string is one alias).
        reasoning: Separate reasoning text, used only when the reply is empty.
        prefix: Marker of an explicit answer line.
        allow_contains: Accept an alias contained in a longer answer.
        use_reasoning: Set False to never take the answer from the reasoning.

    Returns:
        reward 1.0 on a match; details record `match` (`exact`, `contains` or None) and the
        alias that matched.
    """
    alias_list = [aliases] if isinstance(aliases, str) else list(aliases)
    after_prefix = _answer_after(prefix)

    def extract(text: str) -> Extraction | None:
        ext = after_prefix(text) or answer_is_sentence(text) or _first_answer_line(text)
        if ext and ext.start >= 0:
            # A correction in the prose after the answer is the last committed answer.
            fixed = corrected_answer(text, ext.start + 1)
            if fixed:
                return Extraction(fixed[0], "self_correction", fixed[1])
        return ext

    notes: dict[str, Any] = {}
    ext, source, _, _ = extract_with_fallback(
        response, reasoning, extract, use_reasoning=use_reasoning, details=notes
    )
    pred = normalize_text(ext.answer) if ext.answer is not None else ""
    golds = [g for g in (normalize_text(a) for a in alias_list) if g]
    match: str | None = None
    matched: str | None = None
    if pred:
        for g in golds:
            if pred == g:
                match, matched = "exact", g
                break
        if match is None and allow_contains:
            # Prefer the longest alias so the record names the most specific one.
            for g in sorted(golds, key=len, reverse=True):
                if _contains_tokens(pred, g):
                    match, matched = "contains", g
                    break
        if match == "contains" and matched is not None:
            # Containment credits an answer that names the alias among others: an answer
            # offering alternatives ("Either Skylab or Salyut 1") commits to none of them.
            said = ext.answer or ""
            if _HEDGE_TEXT_RE.search(said) and not _HEDGE_TEXT_RE.search(matched):
                match, matched = "hedged", None
        if match is None:
            match, matched = _form_match(pred, golds, allow_contains)
    details = {
        "method": ext.method,
        "source": source,
        "normalized_pred": pred or None,
        "normalized_gold": golds,
        "match": match,
        "matched_alias": matched,
        **notes,
    }
    return VerifyResult(1.0 if match in _CREDITED else 0.0, ext.answer, details)


_CREDITED = frozenset({"exact", "contains", "plural_or_colour", "compact", "compound"})


def _form_match(pred: str, golds: list[str], allow_contains: bool) -> tuple[str | None, str | None]:
    """A match between another form of the answer and of an alias (see `alias_forms`):
    `plural_or_colour` (`hornets`, `bluish green`), `compact` (`blue grass` = `bluegrass`)
    or `compound` (`hawkmoth` for `moth`). Alternatives (`wasp or hornet`) never match."""
    if _HEDGE_TEXT_RE.search(pred):
        return None, None
    said = lemma(pred)
    compact = pred.replace(" ", "")
    for g in sorted(golds, key=len, reverse=True):
        form = lemma(g)
        if said == form or (allow_contains and _contains_tokens(said, form)):
            return "plural_or_colour", g
        if compact == g.replace(" ", ""):
            return "compact", g
        if allow_contains and compound_head(pred, form):
            return "compound", g
    return None, None
