"""A base class for benchmarks backed by an in-memory list of rows."""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from benchmarks._types import EvalEnvironment, SeedResult
from benchmarks.errors import NelError
from benchmarks.prompt_sets import DEFAULT_PROMPT_SET, NEMO_BUILTINS, PromptSet, check_prompt_set

Protocol = Literal["chat", "completions"]


def lettered_options(options: list[str], sep: str = ")") -> str:
    """Multiple-choice options one per line: `A) first`, `B) second`, ... (up to J and beyond)."""
    return "\n".join(f"{chr(ord('A') + i)}{sep} {o}" for i, o in enumerate(options))


class DatasetEnvironment(EvalEnvironment):
    """Rows loaded once; `seed` builds the prompt for row `idx` in the chosen protocol.

    Subclasses set `name`/`version`, load `self.rows` in `__init__` (then call
    `self._finish_init()`), and implement `build_seed(row, idx)`.
    """

    rows: list[dict[str, Any]]
    protocol: Protocol = "chat"
    num_fewshot: int = 0
    prompt_set: PromptSet = DEFAULT_PROMPT_SET

    def __init__(self, *, protocol: str = "chat", num_fewshot: int | None = None,
                 prompt_set: str | None = None) -> None:
        if protocol in ("chat_completions", "chat"):
            self.protocol = "chat"
        elif protocol in ("completions", "completion"):
            self.protocol = "completions"
        else:
            raise NelError(
                f"{self.name}: unknown protocol {protocol!r} (use chat or completions)"
            )
        if num_fewshot is not None:
            self.num_fewshot = int(num_fewshot)
        if prompt_set is not None:
            self.prompt_set = check_prompt_set(prompt_set, f"{self.name}: prompt_set")
        if self.nemo_prompts:
            # NeMo Evaluator's built-ins take no few-shot count (its `fewshot:` never reaches
            # them); the config layer says so when one was given.
            self.num_fewshot = 0

    @property
    def nemo_prompts(self) -> bool:
        """Whether this benchmark sends NeMo Evaluator 0.3.0's request (`prompt_set: nemo`
        on a built-in both tools ship)."""
        return self.prompt_set == "nemo" and self.name in NEMO_BUILTINS

    def _finish_init(self) -> None:
        h = hashlib.sha256()
        for r in self.rows:
            h.update(repr(sorted(r.items())).encode())
        self._data_hash = h.hexdigest()[:16]

    def __len__(self) -> int:
        return len(self.rows)

    def fingerprint(self) -> str:
        base = f"{super().fingerprint()}:{self.protocol}:fewshot={self.num_fewshot}"
        # Only NeMo Evaluator's prompts are named: stores written with nel's prompts before
        # prompt sets existed stay fresh under `prompt_set: nel`.
        return f"{base}:prompts=nemo" if self.nemo_prompts else base

    async def seed(self, idx: int) -> SeedResult:
        if not 0 <= idx < len(self.rows):
            raise IndexError(f"{self.name}: index {idx} out of range 0..{len(self.rows) - 1}")
        return self.build_seed(self.rows[idx], idx)

    def option_texts(self, metadata: dict[str, Any], expected: str, column: str,
                     answer_column: str = "answer") -> list[str] | None:
        """The option texts of the item `metadata["idx"]` points at (its `column`), so a
        multiple-choice answer may name an option by its text; None when the metadata does
        not point at this item (another dataset, a remote caller: its gold differs)."""
        idx = metadata.get("idx")
        if not isinstance(idx, int) or not 0 <= idx < len(self.rows):
            return None
        row = self.rows[idx]
        if str(row[answer_column]).strip() != str(expected).strip():
            return None
        return [str(o) for o in row[column]]

    def build_seed(self, row: dict[str, Any], idx: int) -> SeedResult:
        """Turn one data row into a SeedResult."""
        raise NotImplementedError
