"""The `rubric` judge kind: NeMo Evaluator 0.3.0's generic LLM-as-judge, as it grades a
`type: judge` metric (simpleqa, and any benchmark without a grader of its own).

The judge gets one user message, a rubric asking for a 1-to-`max_score` score as JSON
(`{"score": <n>, "reasoning": ...}`) about the instruction, the response and, when the item
has one, the reference answer; with it a system message asking for strict JSON. The reply's
score is read as 0.3.0 reads it: the whole reply as a JSON object with `score`, else the
first `"score": <n>` in the text, else the first `<n>/<m>`. The reward is the score over
`max_score`, capped at 1.

Where this differs from 0.3.0, on purpose (docs/explanation/differences.md):

- a reply with no readable score raises `JudgeParseError` (a judge error, null reward), where
  0.3.0 scores it 0 and the mean silently drops;
- the metric's `rubric` / `rubric_file`, `system_prompt`, `max_score`, `reference_free`,
  `swap_check` and `temperature` are used; 0.3.0 accepts them and grades with its defaults.

No HTTP here: `nel_assets.engine.evaluation.judging` sends the requests.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from benchmarks._types import SeedResult
from benchmarks.judges import JudgeParseError, JudgeRequest

# NeMo Evaluator 0.3.0's wording, kept verbatim so the judge sees the same request in both
# tools (a baseline graded by 0.3.0 stays comparable).
RUBRIC_TEMPLATE = """You are an expert evaluator. Score the following response on a scale of 1-5.

{instruction}

Response to evaluate:
{response}

{reference_section}

Provide your score as a JSON object: {{"score": <1-5>, "reasoning": "<brief explanation>"}}"""

REFERENCE_TEMPLATE = """Reference answer:
{expected}

Compare the response against the reference answer."""

RUBRIC_SYSTEM_PROMPT = "You are a strict evaluation judge. Always respond with valid JSON."
#: The judge call's generation settings in 0.3.0 (its judge client's; the metric's
#: `temperature` replaces the first).
RUBRIC_TEMPERATURE = 0.0
RUBRIC_MAX_TOKENS = 2048
DEFAULT_MAX_SCORE = 5.0

_SCORE_KEY_RE = re.compile(r'"score"\s*:\s*(\d+(?:\.\d+)?)')
_FRACTION_RE = re.compile(r"\b(\d+)\s*/\s*\d+\b")
_FIELDS = {"instruction": "", "response": "", "reference_section": "", "expected": ""}


def check_rubric(template: str) -> None:
    """Raise ValueError naming the problem when `template` cannot be filled (an unknown
    `{placeholder}`, or a lone brace: write `{{` and `}}` for literal braces)."""
    try:
        template.format(**_FIELDS)
    except (KeyError, IndexError) as exc:
        raise ValueError(f"the rubric has an unknown placeholder {{{exc.args[0]}}} (use "
                         f"{', '.join('{' + k + '}' for k in _FIELDS)}; write {{{{ and }}}} "
                         "for literal braces)") from None
    except ValueError as exc:
        raise ValueError(f"the rubric is not a valid template ({exc}; write {{{{ and }}}} "
                         "for literal braces)") from None


def rubric_prompt(template: str, instruction: str, response: str, expected: str | None) -> str:
    """The user message: `template` filled as 0.3.0 fills it (the reference section only
    when there is a reference answer)."""
    section = REFERENCE_TEMPLATE.format(expected=expected) if expected else ""
    return template.format(instruction=instruction, response=response,
                           reference_section=section, expected=expected or "")


def _score(raw: Any, max_score: float, reasoning: str) -> dict[str, Any]:
    score = min(float(raw), max_score)
    return {"score": score, "normalized": min(score / max_score, 1.0), "reasoning": reasoning}


def parse_rubric_score(reply: str, max_score: float = DEFAULT_MAX_SCORE) -> dict[str, Any]:
    """`{score, normalized, reasoning}` from a judge reply, read in 0.3.0's order.

    Raises:
        JudgeParseError: the reply has no score in any of the three forms (0.3.0 says 0).
    """
    try:
        data = json.loads(reply)
    except ValueError:
        data = None
    if isinstance(data, dict) and "score" in data:
        raw = data["score"]
        if isinstance(raw, int | float) and not isinstance(raw, bool):
            return _score(raw, max_score, str(data.get("reasoning", "")))
        if not isinstance(raw, str):  # null, a list, ...: 0.3.0 fails the sample too
            raise JudgeParseError(f"the reply's \"score\" is not a number: {raw!r}")
        try:
            return _score(float(raw), max_score, str(data.get("reasoning", "")))
        except ValueError:
            pass  # "4/5" and the like: the text patterns below, as in 0.3.0
    for pattern in (_SCORE_KEY_RE, _FRACTION_RE):
        match = pattern.search(reply)
        if match:
            return _score(float(match.group(1)), max_score, reply)
    raise JudgeParseError(f"no score in the reply: {reply[:200]!r}")


@dataclass(frozen=True)
class RubricJudge:
    """One judge metric graded on a rubric: its options fixed when the metric is read."""

    template: str = RUBRIC_TEMPLATE
    max_score: float = DEFAULT_MAX_SCORE
    system_prompt: str = RUBRIC_SYSTEM_PROMPT
    reference_free: bool = False
    swap_check: bool = False
    name: str = "rubric"

    def requests(self, seed: SeedResult, response: str) -> list[JudgeRequest]:
        """The rubric prompt (and, with `swap_check`, the one with response and reference
        swapped, as 0.3.0's `judge_score` would build it)."""
        expected = None if self.reference_free else (seed.expected_answer or None)
        out = [JudgeRequest("score", rubric_prompt(self.template, seed.prompt, response, expected))]
        if self.swap_check and expected:
            out.append(JudgeRequest("swap", rubric_prompt(self.template, seed.prompt, expected, response)))
        return out

    def parse(self, request: JudgeRequest, reply: str) -> dict[str, Any]:
        """The score in one reply."""
        return parse_rubric_score(reply, self.max_score)

    def score(self, seed: SeedResult, grades: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        """Reward = the normalized score; details carry the raw score (and the swap check)."""
        main = grades["score"]
        details: dict[str, Any] = {"score": main["score"], "normalized": main["normalized"],
                                   "max_score": self.max_score}
        if "swap" in grades:
            details["swap_score"] = grades["swap"]["score"]
            details["position_bias"] = abs(main["normalized"] - grades["swap"]["normalized"])
        return float(main["normalized"]), details
