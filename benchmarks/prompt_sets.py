"""Prompt sets: whose prompts a built-in benchmark sends.

`nemo` (the default) sends, for every built-in that NeMo Evaluator 0.3.0 also ships, the
request 0.3.0 sends for the same item: its prompt text (the same text on a completions
endpoint as in the chat message), one user message, no system prompt and no few-shot turns
(0.3.0's BYOB-based built-ins drop `--system-prompt`, `solver.system_prompt` and
`fewshot:`). A run compared with a NeMo Evaluator baseline compares the same evaluation.

`nel` sends nel's own prompts: the paper's completion prompts, few-shot turns, and the
system prompt of the config or the command line.

The set is part of each environment's fingerprint, so switching it reruns the shards whose
requests change.
"""

from __future__ import annotations

from typing import Literal

from benchmarks.errors import NelError

PromptSet = Literal["nemo", "nel"]
PROMPT_SETS: tuple[str, ...] = ("nemo", "nel")
DEFAULT_PROMPT_SET: PromptSet = "nemo"

#: Built-ins NeMo Evaluator 0.3.0 ships under the same name (its `nemo_evaluator.benchmarks`),
#: all written with its BYOB `@benchmark` decorator: under the `nemo` set they send its request.
#: Not `drop`: 0.3.0 stuffs three passages drawn from DROP's 77k-row train split into every
#: prompt, a split nel does not load, so nel's drop keeps its own prompt (docs: differences).
NEMO_BUILTINS: frozenset[str] = frozenset({
    "gpqa", "gsm8k", "healthbench", "humaneval", "math500", "mgsm", "mmlu", "mmlu_pro",
    "simpleqa", "triviaqa", "xstest",
})


def check_prompt_set(value: str, where: str = "prompt_set") -> PromptSet:
    """`value` as a prompt set, or a one-line NelError naming the accepted ones."""
    if value not in PROMPT_SETS:
        raise NelError(f"{where}: unknown prompt set {value!r} (use {' or '.join(PROMPT_SETS)})")
    return value  # type: ignore[return-value]


def follows_nemo(benchmark: str, prompt_set: str, *, module: str | None = None) -> bool:
    """Whether `benchmark` sends NeMo Evaluator's request: a built-in of both tools (not one
    a BYOB `module` redefines) under the `nemo` prompt set. Such a request carries no system
    prompt and no few-shot turns, as in 0.3.0."""
    return prompt_set == "nemo" and module is None and benchmark in NEMO_BUILTINS
