"""Forms of a short answer that name the same thing as an alias (TriviaQA): plurals
(`Hornets` for `Hornet`), closed and open compounds (`Blue grass` for `Bluegrass`, `The
hawkmoth` for `Moth`), colour adjectives in `-ish` (`bluish-green` for `Blue-green`), and
an answer corrected in the prose after it ("Answer: Honda. Hmm, actually, ... Toyota").

Every function here takes text already through `normalize_text` (lowercase, punctuation
and hyphens as spaces) and is linear in its input.
"""

from __future__ import annotations

import re

__all__ = ["compound_head", "corrected_answer", "lemma"]

_COLOURS = frozenset({"red", "blue", "green", "yellow", "grey", "gray", "brown", "pink",
                      "purple", "orange", "black", "white", "violet"})


def _singular(tok: str) -> str:
    """An English plural's singular by the regular rules (`foxes`, `butterflies`, `wasps`)."""
    if len(tok) <= 3 or not tok.isalpha():
        return tok
    if tok.endswith("ies") and len(tok) > 4:
        return tok[:-3] + "y"
    if tok.endswith(("ches", "shes", "xes", "zes", "sses")):
        return tok[:-2]
    if tok.endswith("s") and not tok.endswith(("ss", "us", "is")):
        return tok[:-1]
    return tok


def _base_colour(tok: str) -> str:
    """`bluish` -> `blue`, `reddish` -> `red`, `greenish` -> `green`; other words unchanged."""
    if tok.endswith("ish"):
        stem = tok[:-3]
        for cand in (stem, stem + "e", stem[:-1]):
            if cand in _COLOURS:
                return cand
    return tok


def lemma(text: str) -> str:
    """Each token singular and a colour in its base form (`bluish greens` -> `blue green`)."""
    return " ".join(_base_colour(_singular(t)) for t in text.split())


# Modifiers that make a kind of the head noun when written closed (`housefly` is a fly,
# `seabird` a bird). A closed word that merely ends in an alias (`elephant`, `dragonfly`,
# which is no true fly) is not one: only these modifiers count.
_MODIFIERS = frozenset({
    "house", "horse", "sea", "hawk", "black", "blue", "green", "red", "white", "grey", "gray",
    "brown", "gold", "sand", "water", "snow", "wild", "barn", "song", "shore", "blow", "fruit",
    "night", "stone", "rock", "mud", "field", "tree", "wood", "bush", "sun", "rain", "bumble",
    "honey", "hover", "crane", "hedge", "sheep", "shell", "cuttle", "sword", "reed",
})


def compound_head(text: str, alias: str) -> bool:
    """Whether a token of `text` is a closed compound of a listed modifier and the
    one-word `alias` (`hawkmoth` for `moth`), or its plural."""
    if " " in alias or len(alias) < 3:
        return False
    for tok in text.split():
        tok = _singular(tok)
        if len(tok) > len(alias) and tok.endswith(alias) and tok[: -len(alias)] in _MODIFIERS:
            return True
    return False


# "Answer: Honda. Hmm, actually, the Prius is made by Toyota, not Honda.": a correction cue
# at a sentence start after the answer, and the sentence it opens.
_CORRECTION_RE = re.compile(
    r"(?:^|(?<=[.!?]\s)|(?<=\n))[ \t*_]{0,8}(?:(?:hmm+|oh|um+|no|well|sorry)[^\w\n]{1,4}){0,2}"
    r"(?:actually|wait|correction|on\s+second\s+thought|scratch\s+that|i\s+was\s+wrong)\b"
    r"[\s,:;—–-]*(?P<rest>[^\n]{1,300})",
    re.IGNORECASE | re.MULTILINE,
)
# What the corrected sentence rules out: ", not Honda", "rather than Honda", "instead of Honda".
_NEGATED_RE = re.compile(r"[,;]?\s*\b(?:not|rather\s+than|instead\s+of)\s+[^,.;!?]*", re.IGNORECASE)
_CORRECTION_WINDOW = 2000


def corrected_answer(text: str, start: int) -> tuple[str, int] | None:
    """The sentence that corrects an answer stated at `start`, without what it rules out.

    Returns:
        (sentence, offset) of the first correction after `start` (within a bounded window),
        or None.
    """
    m = _CORRECTION_RE.search(text, max(start, 0), max(start, 0) + _CORRECTION_WINDOW)
    if m is None:
        return None
    sentence = re.split(r"(?<=[^\d\s])[.!?](?:\s|$)", m.group("rest"), maxsplit=1)[0]
    kept = _NEGATED_RE.sub("", sentence).strip(" ,.;")
    return (kept, m.start("rest")) if kept else None
