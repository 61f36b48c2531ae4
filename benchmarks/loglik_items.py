"""Multiple-choice benchmarks in log-likelihood form (`solver: {type: loglikelihood}`).

`LoglikChoices` is mixed into a `DatasetEnvironment` whose rows carry a question, a list of
options and a gold letter (mmlu, mmlu_pro, gpqa). Two styles, as lm-evaluation-harness has
them:

- `texts` (lm-eval's `mmlu_continuation`, cloze style): the context is
  `"<header>Question: <q>\\nAnswer:"` and each option's text is scored after it; `acc_norm`
  (per-character normalisation) matters here, options differing in length.
- `letters` (lm-eval's `mmlu`): the options are listed in the context
  (`"<q>\\nA. ...\\nB. ...\\nAnswer:"`) and the letters `A`, `B`, ... are scored.
"""

from __future__ import annotations

from typing import Any

from benchmarks.errors import NelError
from benchmarks.scoring.loglik import MultipleChoice

STYLES = ("texts", "letters")
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


class LoglikChoices:
    """Items as `MultipleChoice` for log-likelihood scoring (mix into a DatasetEnvironment)."""

    rows: list[dict[str, Any]]
    name: str
    #: The row column holding the option texts.
    loglik_options_column = "options"

    def loglik_header(self, row: dict[str, Any]) -> str:
        """Text put before the question (lm-eval's `description`); none by default."""
        return ""

    def loglik_item(self, idx: int, style: str = "texts") -> MultipleChoice:
        """Item `idx` (its dataset index) in log-likelihood form.

        Raises:
            NelError: an unknown style.
        """
        if style not in STYLES:
            raise NelError(f"{self.name}: unknown log-likelihood style {style!r} "
                           f"(use {' or '.join(STYLES)})")
        row = self.rows[idx]
        options = [str(o).strip() for o in row[self.loglik_options_column]]
        labels = tuple(_LETTERS[: len(options)])
        gold = labels.index(str(row["answer"]).strip())
        question = str(row["question"]).strip()
        header = self.loglik_header(row)
        if style == "letters":
            listed = "\n".join(f"{label}. {o}" for label, o in zip(labels, options, strict=True))
            return MultipleChoice(f"{header}{question}\n{listed}\nAnswer:", labels, gold, labels)
        return MultipleChoice(f"{header}Question: {question}\nAnswer:", tuple(options), gold,
                              labels)
