"""Perplexity of a local text: word and byte perplexity and bits per byte (lm-eval's
`loglikelihood_rolling` metrics, as its `wikitext` task reports them).

The text is a UTF-8 file cut into documents at blank lines; each document is one item,
scored whole by the served model's prompt log-probabilities (`solver: {type:
loglikelihood}` on a completions endpoint that echoes them: llama.cpp's server, vLLM,
SGLang). `path:` names the file; by default a few paragraphs written for nel
(`data/perplexity_sample.txt`).

An item's reward is `2 ** -bits_per_byte` of its document: the geometric-mean probability
per byte, in (0, 1], higher is better, so comparisons and gates read it as any score. The
corpus metrics (weighted over documents, as lm-eval aggregates them) are in the bundle's
`scoring.perplexity`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from benchmarks._dataset_env import DatasetEnvironment
from benchmarks._types import SeedResult, VerifyResult
from benchmarks.errors import BenchmarkConfigError, NelError
from benchmarks.scoring.loglik import RollingText, count_words

SAMPLE = Path(__file__).with_name("data") / "perplexity_sample.txt"
_BLANK = re.compile(r"\n\s*\n")


def documents(text: str) -> list[str]:
    """`text` cut at blank lines into non-empty documents (each stripped)."""
    return [d.strip() for d in _BLANK.split(text) if d.strip()]


class Perplexity(DatasetEnvironment):
    """Documents of a local text file, scored by their log-likelihood."""

    name = "perplexity"
    scorer_family = "log-likelihood"  # the type `nel list` shows
    version = "1"
    #: The solver this benchmark runs with (checked before any request).
    needs_solver = "loglikelihood"

    def __init__(self, *, protocol: str = "completions", num_fewshot: int | None = None,
                 prompt_set: str | None = None, path: str | None = None) -> None:
        super().__init__(protocol=protocol, num_fewshot=num_fewshot, prompt_set=prompt_set)
        if self.num_fewshot:
            raise BenchmarkConfigError("perplexity: num_fewshot has no meaning here; remove it")
        file = Path(path).expanduser() if path else SAMPLE
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise BenchmarkConfigError(f"perplexity: cannot read path {str(file)!r} "
                                       f"({type(exc).__name__}): give a UTF-8 text file") from None
        docs = documents(text)
        if not docs:
            raise BenchmarkConfigError(f"perplexity: {file} holds no text")
        self.path = str(file)
        self.rows = [{"text": d} for d in docs]
        self._finish_init()

    def build_seed(self, row: dict[str, Any], idx: int) -> SeedResult:
        text = row["text"]
        return SeedResult(text, "", {"idx": idx, "n_bytes": len(text.encode()),
                                     "n_words": count_words(text)})

    def loglik_item(self, idx: int, style: str = "texts") -> RollingText:
        """Document `idx`, scored whole (`style` does not apply)."""
        return RollingText(self.rows[idx]["text"])

    async def verify(self, response: str, expected: str, **metadata: Any) -> VerifyResult:
        raise NelError("perplexity is scored by log-probabilities: use "
                       "`solver: {type: loglikelihood}` on a completions service")
