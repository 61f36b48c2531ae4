"""HealthBench (Arora et al., 2025): 5,000 health conversations, each graded against
physician-written rubric criteria by an LLM judge.

Source: openai/simple-evals HealthBench JSONL
(`2025-05-07-06-14-12_oss_eval.jsonl`; the hard and consensus subsets have the same schema
and load with `params: {file: ...}`), rows::

    {"prompt": [{"role", "content"}, ...], "rubrics": [{"criterion", "points", "tags"}],
     "example_tags": [...], "prompt_id": str, ...}

nel reads `healthbench/<file>` in that schema. The conversation is sent as chat messages
(for completions endpoints, as `role: content` text ending in `assistant:`).

REQUIRES a `type: judge` metric (kind `healthbench`): every criterion is graded met / not
met in its own judge call; the score is points met / positive points, clipped to [0, 1]
(negative criteria that are met subtract). Category = the `theme:` tag of the example.
"""

from __future__ import annotations

import json
from typing import Any

from benchmarks._dataset_env import DatasetEnvironment
from benchmarks._types import SeedResult, VerifyResult
from benchmarks.datasets import load_file, resolve_file
from benchmarks.errors import NelError
from benchmarks.sources import OPENAI_BLOB, Source, SourceFile

DEFAULT_FILE = "2025-05-07-06-14-12_oss_eval.jsonl"
COMPLETION_TEMPLATE = "{conversation}\n\nassistant:"


def _check(row: dict[str, Any], lineno: int) -> None:
    if not isinstance(row.get("prompt"), list) or not isinstance(row.get("rubrics"), list):
        raise NelError(f"healthbench: row {lineno} lacks `prompt` (messages) or `rubrics`")
    for r in row["rubrics"]:
        if "criterion" not in r or "points" not in r:
            raise NelError(f"healthbench: row {lineno} has a rubric without criterion/points")


def theme(example_tags: list[str]) -> str | None:
    """The `theme:` tag's value (emergency_referrals, hedging, ...), if any."""
    for t in example_tags or []:
        if t.startswith("theme:"):
            return t.split(":", 1)[1]
    return None


# Where the data comes from (`nel data`, `nel list`).
SOURCE = Source(
    "healthbench",
    (SourceFile("2025-05-07-06-14-12_oss_eval.jsonl", None,
                f"{OPENAI_BLOB}/healthbench/2025-05-07-06-14-12_oss_eval.jsonl"),),
    5000, "openai/simple-evals HealthBench (Arora et al., 2025)", None, None, "MIT",
    judge=True, notes="hard / consensus subsets load with params.file",
)


class HealthBench(DatasetEnvironment):
    """HealthBench; needs a judge (`requires_judge`); reward = normalised rubric points."""

    name = "healthbench"
    scorer_family = "judge-rubric"  # the type `nel list` shows
    source = SOURCE
    version = "1"
    judge_kind = "healthbench"
    requires_judge = True

    def __init__(self, *, protocol: str = "chat", num_fewshot: int | None = None,
                 file: str = DEFAULT_FILE, prompt_set: str | None = None) -> None:
        super().__init__(protocol=protocol, num_fewshot=num_fewshot, prompt_set=prompt_set)
        rows = load_file(resolve_file("healthbench", file))
        for i, r in enumerate(rows, 1):
            _check(r, i)
        self.rows = rows
        self._finish_init()

    def fingerprint(self) -> str:
        return f"{super().fingerprint()}:{COMPLETION_TEMPLATE}:judge={self.judge_kind}"

    def build_seed(self, row: dict[str, Any], idx: int) -> SeedResult:
        convo = [{"role": m["role"], "content": m["content"]} for m in row["prompt"]]
        tags = list(row.get("example_tags") or [])
        meta = {"idx": idx, "category": theme(tags), "prompt_id": row.get("prompt_id"),
                "example_tags": tags, "conversation": convo}
        last_user = next((m["content"] for m in reversed(convo) if m["role"] == "user"), "")
        expected = json.dumps(row["rubrics"], ensure_ascii=False)
        if self.protocol == "chat":
            return SeedResult(last_user, expected, meta, messages=convo)
        if self.nemo_prompts:  # NeMo Evaluator completes the conversation's last message
            return SeedResult(convo[-1]["content"] if convo else "", expected, meta)
        text = "\n\n".join(f"{m['role']}: {m['content']}" for m in convo)
        return SeedResult(COMPLETION_TEMPLATE.format(conversation=text), expected, meta)

    def gold_response(self, seed: SeedResult) -> str:
        return "I cannot give a gold answer: HealthBench is graded by rubric."

    async def verify(self, response: str, expected: str, **metadata: Any) -> VerifyResult:
        text = (response or "").strip()
        return VerifyResult(0.0, text or None, {"method": "judge_pending" if text else "none",
                                                "source": "content"})
