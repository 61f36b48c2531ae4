"""MMLU-Pro (Wang et al., 2024): 12,032 test questions in 14 categories, up to 10 options.

Source: Hugging Face `TIGER-Lab/MMLU-Pro` (test split; rows question_id, question, options,
answer, answer_index, cot_content, category, src); nel reads it as `mmlu_pro/test.jsonl`.
The authors evaluate 5-shot with chain-of-thought exemplars from the 70-row validation
split (`mmlu_pro/validation.jsonl`, same schema, `cot_content` filled); that file is needed
only with `num_fewshot`. About 1% of the items have fewer than 10 options, so the letters
are per item (`A`..`J` at most).
"""

from __future__ import annotations

from typing import Any

from benchmarks._dataset_env import DatasetEnvironment, lettered_options
from benchmarks._types import SeedResult, VerifyResult
from benchmarks.datasets import HubFile, data_root, find_local, load_file, resolve_file
from benchmarks.errors import DataMissingError
from benchmarks.loglik_items import LoglikChoices
from benchmarks.sources import Source, SourceFile

HUB_TEST = HubFile("TIGER-Lab/MMLU-Pro", "data/test-00000-of-00001.parquet")
LETTERS = "ABCDEFGHIJ"

CHAT_TEMPLATE = (
    "Here is a multiple choice question about {category}. Work through it step by step, "
    "then end with the sentence \"The answer is (X).\" where X is the letter of the "
    "correct option.\n\nQuestion: {question}\nOptions:\n{options}"
)
COMPLETION_HEADER = (
    "The following are multiple choice questions (with answers) about {category}. Think "
    "step by step and then finish your answer with \"the answer is (X)\" where X is the "
    "correct letter choice.\n\n"
)
# NeMo Evaluator 0.3.0's prompt (`nemo_evaluator/benchmarks/mmlu_pro.py`), the default
# `prompt_set: nemo`, on both endpoints: ten option lines A) to J) always (the data's own
# options, "N/A" fillers included, padded with empty ones), zero-shot.
NEMO_TEMPLATE = (
    "Answer the following multiple choice question. The last line of your response "
    "should be in the following format: 'Answer: $LETTER' where LETTER is one of "
    + "/".join(LETTERS) + ".\n\n{question}\n\n{options}"
)
# The authors' exemplars start their reasoning with this phrase; we cue it the same way.
COT_CUE = "Answer: Let's think step by step."


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    # Some upstream rows pad their options with "N/A"; those are not choices (NeMo
    # Evaluator's prompt shows them all: `raw_options`).
    opts = [o for o in row["options"] if str(o).strip() != "N/A"]
    return {**row, "options": opts, "raw_options": list(row["options"])}


def _nemo_options(raw: list[str]) -> str:
    padded = [*raw, *[""] * (len(LETTERS) - len(raw))]
    return "\n".join(f"{letter}) {text}" for letter, text in zip(LETTERS, padded, strict=False))


def _load_validation() -> list[dict[str, Any]]:
    local = find_local("mmlu_pro", "validation.jsonl")
    if local is None:
        where = (data_root() or "$NEL_DATA_DIR")
        raise DataMissingError(
            f"mmlu_pro: num_fewshot needs the 70 CoT exemplars of the validation split; put "
            f"TIGER-Lab/MMLU-Pro's validation split as JSONL at {where}/mmlu_pro/validation.jsonl "
            "(or run `nel data import mmlu_pro PATH`)"
        )
    return [_clean(r) for r in load_file(local)]


# Where the data comes from (`nel data`, `nel list`).
SOURCE = Source(
    "mmlu_pro",
    (
        SourceFile("test.jsonl",
                   "de3e252c059914c90d06ceebad992cf4721de926a3d32ce2d4e00c24a972dd79"),
        SourceFile("validation.jsonl", required=False),
    ),
    12032, "TIGER-Lab/MMLU-Pro (test split as JSONL: question_id, question, options, "
    "answer, answer_index, cot_content, category, src)",
    "TIGER-Lab/MMLU-Pro", "main", "MIT",
    notes="sha256 is of the JSONL rendering of the test split kept in shared/datasets; "
    "validation.jsonl (70 CoT exemplars) is needed only for few-shot",
)


class MMLUPro(LoglikChoices, DatasetEnvironment):
    """MMLU-Pro test set; category is the MMLU-Pro category, `src` its origin."""

    name = "mmlu_pro"
    scorer_family = "multiple-choice"  # the type `nel list` shows
    source = SOURCE
    version = "1"

    def __init__(self, *, protocol: str = "chat", num_fewshot: int | None = None,
                 categories: list[str] | None = None, prompt_set: str | None = None) -> None:
        super().__init__(protocol=protocol, num_fewshot=num_fewshot, prompt_set=prompt_set)
        rows = [_clean(r) for r in load_file(resolve_file("mmlu_pro", "test.jsonl", HUB_TEST))]
        rows.sort(key=lambda r: int(r["question_id"]))
        if categories:
            wanted = set(categories)
            rows = [r for r in rows if r["category"] in wanted]
        self.rows = rows
        self._shots: dict[str, list[dict[str, Any]]] = {}
        if self.num_fewshot:
            for r in _load_validation():
                self._shots.setdefault(r["category"], []).append(r)
        self._finish_init()

    def fingerprint(self) -> str:
        if self.nemo_prompts:
            return f"{super().fingerprint()}:{NEMO_TEMPLATE}"
        return f"{super().fingerprint()}:{CHAT_TEMPLATE}:{COMPLETION_HEADER}:{COT_CUE}"

    def loglik_header(self, row: dict[str, Any]) -> str:
        """lm-eval's MMLU-Pro description: the category."""
        return f"The following are questions (with answers) about {row['category']}.\n\n"

    def build_seed(self, row: dict[str, Any], idx: int) -> SeedResult:
        cat = row["category"]
        meta = {"idx": idx, "category": cat, "src": row.get("src"),
                "question_id": row.get("question_id"), "n_options": len(row["options"])}
        shots = self._shots.get(cat, [])[: self.num_fewshot]
        gold = str(row["answer"]).strip()
        if self.nemo_prompts:
            meta["n_options"] = len(LETTERS)  # the prompt offers A to J
            prompt = NEMO_TEMPLATE.format(question=row["question"],
                                          options=_nemo_options(row["raw_options"]))
            return SeedResult(prompt, gold, meta)
        if self.protocol == "chat":
            prompt = CHAT_TEMPLATE.format(category=cat, question=row["question"],
                                          options=lettered_options(row["options"], "."))
            messages = None
            if shots:
                messages = []
                for s in shots:
                    messages.append({"role": "user", "content": CHAT_TEMPLATE.format(
                        category=cat, question=s["question"], options=lettered_options(s["options"], "."))})
                    messages.append({"role": "assistant", "content": _shot_answer(s)})
                messages.append({"role": "user", "content": prompt})
            return SeedResult(prompt, gold, meta, messages)
        body = COMPLETION_HEADER.format(category=cat)
        for s in shots:
            body += (f"Question: {s['question']}\nOptions:\n{lettered_options(s['options'], '.')}\n"
                     f"{_shot_answer(s, cue=True)}\n\n")
        body += f"Question: {row['question']}\nOptions:\n{lettered_options(row['options'], '.')}\n{COT_CUE}"
        return SeedResult(body, gold, meta)

    def gold_response(self, seed: SeedResult) -> str:
        return f"Checking each option in turn.\nThe answer is ({seed.expected_answer})."

    async def verify(self, response: str, expected: str, **metadata: Any) -> VerifyResult:
        from benchmarks.scoring import multichoice_regex

        n = int(metadata.get("n_options") or 10)
        return multichoice_regex(response, expected, letters=LETTERS[:n],
                                 reasoning=metadata.get("reasoning"),
                                 options=self.option_texts(metadata, expected, "options"))


def _shot_answer(shot: dict[str, Any], *, cue: bool = False) -> str:
    cot = str(shot.get("cot_content") or "").strip()
    # The exemplars' reasoning already begins with the cue; keep exactly one copy.
    if cot.startswith("A: "):
        cot = cot[3:]
    if cot.startswith("Let's think step by step."):
        cot = cot[len("Let's think step by step."):].strip()
    text = f"{COT_CUE} {cot}" if cot else f"{COT_CUE} The answer is ({shot['answer']})."
    return text if cue else text.removeprefix("Answer: ")
