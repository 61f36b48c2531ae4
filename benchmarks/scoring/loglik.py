"""Scoring by log-probabilities, as lm-evaluation-harness 0.4 defines it (pure functions).

Multiple choice: each option is scored as the continuation of the question; `acc` is 1 when
the option with the highest log-likelihood is the gold one, `acc_norm` when the highest
log-likelihood per character of the option is (lm-eval's `acc_norm` divides by `len(choice)`,
in characters), `acc_bytes` per UTF-8 byte.

Perplexity over a corpus (lm-eval's `loglikelihood_rolling` metrics, weighted over documents):
`word_perplexity = exp(-Σ ll / Σ words)`, `byte_perplexity = exp(-Σ ll / Σ bytes)`,
`bits_per_byte = -Σ ll / Σ bytes / ln 2`, with words counted as lm-eval counts them
(`len(re.split(r"\\s+", doc))`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

_WS = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class MultipleChoice:
    """One multiple-choice item in log-likelihood form.

    Attributes:
        context: The text every option continues (ends before the delimiter).
        choices: The options as scored (without the delimiter).
        gold: The index of the right option.
        labels: How each option is named in results (`A`, `B`, ...).
        delimiter: Put between the context and each option (lm-eval's `target_delimiter`).
    """

    context: str
    choices: tuple[str, ...]
    gold: int
    labels: tuple[str, ...]
    delimiter: str = " "


@dataclass(frozen=True, slots=True)
class RollingText:
    """One document scored whole (perplexity, bits per byte)."""

    text: str


def argmax(values: Sequence[float]) -> int:
    """The index of the largest value; the first one on ties (as numpy's argmax)."""
    return max(range(len(values)), key=lambda i: (values[i], -i))


def mcq_metrics(lls: Sequence[float], choices: Sequence[str], gold: int) -> dict[str, float]:
    """`acc`, `acc_norm` and `acc_bytes` of one item from its options' log-likelihoods."""
    if not lls or len(lls) != len(choices):
        raise ValueError("one log-likelihood per option is needed")
    per_char = [ll / max(1, len(c)) for ll, c in zip(lls, choices, strict=True)]
    per_byte = [ll / max(1, len(c.encode())) for ll, c in zip(lls, choices, strict=True)]
    return {"acc": float(argmax(lls) == gold), "acc_norm": float(argmax(per_char) == gold),
            "acc_bytes": float(argmax(per_byte) == gold)}


def count_words(text: str) -> int:
    """Words as lm-eval counts them for `word_perplexity`."""
    return len(_WS.split(text))


def perplexity_metrics(loglik: float, words: float, n_bytes: float) -> dict[str, float]:
    """Corpus perplexities from the summed log-likelihood, word count and byte count."""
    if words <= 0 or n_bytes <= 0:
        raise ValueError("perplexity needs a non-empty corpus")
    return {"word_perplexity": math.exp(-loglik / words),
            "byte_perplexity": math.exp(-loglik / n_bytes),
            "bits_per_byte": -loglik / n_bytes / math.log(2)}
