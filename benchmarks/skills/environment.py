"""`skills://NAME`: a NeMo Skills benchmark from its prepared data, graded as Skills grades it.

The rows are Skills' prepared `DIR/<name>/<split>.jsonl` (benchmarks.skills.layout); the
request is the benchmark's prompt config filled from the row (benchmarks.skills.prompts);
the verdict follows Skills' grader for the benchmark's eval type (benchmarks.skills.graders):
`math`, `multichoice`, or `evalplus` (HumanEval-style code, run with its tests in the
benchmark's sandbox, as nel's humaneval runs). The engine runs it like any built-in: shards,
resume, bundles, compare and gate.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks._dataset_env import DatasetEnvironment
from benchmarks._types import SeedResult, VerifyResult
from benchmarks.errors import NelError
from benchmarks.skills import graders
from benchmarks.skills.layout import benchmark_of, defaults_for, require_data, skills_dir
from benchmarks.skills.prompts import PromptConfig, load_prompt_config

#: The eval types nel grades, Skills' names.
EVAL_TYPES: tuple[str, ...] = ("math", "multichoice", "evalplus")
# What NeMo Evaluator 0.3.0 sends without a prompt template: the first of these fields.
_RAW_FIELDS = ("problem", "question", "prompt", "input", "text")
# Row fields carried into the results for per-category breakdowns, in order of preference.
_LETTERS = "ABCDEFGHIJ"
_CATEGORY_FIELDS = ("subset_for_metrics", "subject", "category", "domain", "type")


class SkillsEnvironment(DatasetEnvironment):
    """One Skills benchmark's prepared split.

    Args:
        uri: `skills://<name>`.
        data_dir: Skills' data directory (default: NEL_SKILLS_DIR, else $NEL_DATA_DIR/skills).
        split: The prepared split (default: the benchmark's EVAL_SPLIT, else `test`).
        prompt_config: A Skills prompt config name (default: the benchmark's); `none` sends
            the row's problem text alone, as NeMo Evaluator 0.3.0 does.
        prompt_template: A format string over the row's fields instead of a prompt config.
        eval_type: `math`, `multichoice` or `evalplus` (default: the benchmark's).
        timeout: Seconds for a symbolic math comparison.
        exec_timeout: Seconds one code answer's program may run.
    """

    scorer_family = "nemo-skills"
    version = "1"

    def __init__(self, uri: str, *, data_dir: str | None = None, split: str | None = None,
                 prompt_config: str | None = None, prompt_template: str | None = None,
                 eval_type: str | None = None, timeout: float = 10.0, exec_timeout: float = 30.0,
                 protocol: str = "chat", num_fewshot: int | None = None,
                 prompt_set: str | None = None) -> None:
        self.name = uri
        super().__init__(protocol=protocol, num_fewshot=None, prompt_set=prompt_set)
        if num_fewshot:
            raise NelError(f"{uri}: num_fewshot is not supported (Skills' prompt configs run "
                           "zero-shot unless their examples are asked for)")
        bench = benchmark_of(uri)
        root = skills_dir(data_dir)
        dflt = defaults_for(bench, root)
        self.eval_type = eval_type or (dflt.eval_type if dflt else "")
        if self.eval_type not in EVAL_TYPES:
            raise NelError(f"{uri}: nel grades Skills' {', '.join(EVAL_TYPES)} eval types, not "
                           f"{self.eval_type or 'an unknown one'!r}; set `params: {{eval_type: ...}}`")
        path = require_data(uri, data_dir, split)
        self.rows = _read_jsonl(path, uri)
        self.data_path = path
        self.timeout, self.exec_timeout = float(timeout), float(exec_timeout)
        self.template = self._template(prompt_config, prompt_template,
                                       dflt.prompt_config if dflt else None, root)
        self._finish_init()

    @property
    def needs_sandbox(self) -> bool:  # type: ignore[override]
        """Code answers run in the benchmark's sandbox."""
        return self.eval_type == "evalplus"

    def _template(self, config: str | None, template: str | None, default: str | None,
                  root: Path) -> PromptConfig | None:
        if template is not None:
            return PromptConfig("prompt_template", "params", template)
        name = config or default
        if name is None or name == "none":
            return None
        return load_prompt_config(name, root, self.name)

    def fingerprint(self) -> str:
        tpl = self.template
        prompt = f"{tpl.system}\x00{tpl.user}" if tpl else "raw"
        return (f"{super().fingerprint()}:{self.eval_type}:{prompt}:t={self.timeout}:"
                f"x={self.exec_timeout}")

    def build_seed(self, row: dict[str, Any], idx: int) -> SeedResult:
        meta: dict[str, Any] = {"idx": idx, "eval_type": self.eval_type}
        cat = next((row[k] for k in _CATEGORY_FIELDS if isinstance(row.get(k), str)), None)
        if cat is not None:
            meta["category"] = cat
        if self.eval_type == "evalplus":
            meta.update(task_id=row.get("task_id"), entry_point=row.get("entry_point"))
        if self.eval_type == "multichoice":  # Skills writes each option as a letter field
            meta["n_options"] = max(2, sum(1 for k in _LETTERS if k in row))
        if self.template is None:
            text = next((str(row[k]) for k in _RAW_FIELDS if k in row), None)
            if text is None:
                raise NelError(f"{self.name}: row {idx} of {self.data_path} has none of the "
                               f"fields {', '.join(_RAW_FIELDS)}")
            return SeedResult(text, _gold(row, self.eval_type), meta)
        user, system = self.template.render(row, self.name)
        return SeedResult(user, _gold(row, self.eval_type), meta, system=system)

    def gold_response(self, seed: SeedResult) -> str:
        """An answer in the form Skills' prompt config asks for (the reference server's)."""
        if self.eval_type == "multichoice":
            return f"Weighing each option.\nAnswer: {seed.expected_answer}"
        if self.eval_type == "math":
            return f"Working it through.\nThe answer is $\\boxed{{{seed.expected_answer}}}$."
        row = self.rows[int(seed.metadata["idx"])]
        return f"```python\n{row['prompt']}{row['canonical_solution']}```"

    async def verify(self, response: str, expected: str, *, sandbox: Any = None,
                     reasoning: str | None = None, **metadata: Any) -> VerifyResult:
        if self.eval_type == "evalplus":
            return await self._verify_code(response, metadata, sandbox)
        text, source = response or "", "content"
        if self.eval_type == "multichoice":
            letter, method = graders.mcq_letter(text)
            if letter is None and reasoning:  # the answer only in the reasoning
                (letter, method), source = graders.mcq_letter(reasoning), "reasoning"
            ok = letter is not None and letter == expected
            return VerifyResult(1.0 if ok else 0.0, letter,
                                {"method": method, "source": source, "grader": "skills_multichoice"})
        pred = graders.extract_boxed(text)
        if pred is None and reasoning:
            pred, source = graders.extract_boxed(reasoning), "reasoning"
        ok = graders.math_equal(expected, pred, timeout=self.timeout)
        return VerifyResult(1.0 if ok else 0.0, pred,
                            {"method": "boxed" if pred is not None else "none", "source": source,
                             "grader": "skills_math"})

    async def _verify_code(self, response: str, metadata: dict[str, Any],
                           sandbox: Any) -> VerifyResult:
        from benchmarks.skills.code_run import run_completion

        if sandbox is None:
            raise NelError(f"{self.name} runs model code and needs a sandbox: add "
                           "`sandbox: {type: local}` (or docker) to the benchmark")
        row = self.rows[int(metadata["idx"])]
        return await run_completion(response or "", row, sandbox, timeout=self.exec_timeout)


def _gold(row: dict[str, Any], eval_type: str) -> str:
    if eval_type == "evalplus":
        return str(row.get("entry_point") or "")
    return str(row.get("expected_answer", ""))


def _read_jsonl(path: Path, label: str) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise NelError(f"{label}: {path}:{n} is not JSON ({exc.msg}); re-run "
                               "`ns prepare_data`") from None
            if not isinstance(row, dict):
                raise NelError(f"{label}: {path}:{n} is not a JSON object")
            rows.append(row)
    if not rows:
        raise NelError(f"{label}: {path} has no rows; re-run `ns prepare_data`")
    return rows


def skills_uri_factory(uri: str) -> Any:
    """The factory of a `skills://<name>` benchmark (its data is read when it is made)."""
    def make(**params: Any) -> SkillsEnvironment:
        params.pop("num_examples", None)  # the engine's max_problems selects the items
        return SkillsEnvironment(uri, **params)

    bench = benchmark_of(uri)
    dflt = defaults_for(bench, skills_dir())
    make.needs_sandbox = bool(dflt and dflt.eval_type == "evalplus")  # type: ignore[attr-defined]
    make.benchmark_name = uri  # type: ignore[attr-defined]
    return make
