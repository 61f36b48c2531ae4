"""VLMEvalKit's answer extraction without a judge, for multiple-choice and yes/no items.

Written after VLMEvalKit's `vlmeval/utils/matching_util.py` (`can_infer`) and its yes/no
datasets' `YOrN_Extraction`, so a `vlmevalkit://` benchmark reaches VLMEvalKit's verdicts:

- an option letter counts when it is the only option letter among the reply's words (after
  `.()[],:;!*#{}` become spaces); a reply naming none of them may match one option's text
  instead (`can_infer_text`: exactly one option text inside the reply, for replies at most
  twice as long as the options together); fixed refusal phrases answer `Z`;
- a yes/no reply is `Yes` when its words hold "yes" and not "no", `No` the other way round,
  else `Unknown` (wrong).

One VLMEvalKit revision also required the letter to sit before the reply's last five words,
which rejects a bare "B"; nel follows the long-standing rule (the letter anywhere) instead.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping

from benchmarks._types import VerifyResult

_STRIP = ".()[],:;!*#{}"
_REFUSALS = (
    "Sorry, I can't help with images of people yet.",
    "I can't process this file.",
    "I'm sorry, but without the image provided",
    "Cannot determine the answer",
)
_PUNCT = re.compile(r"[^\w\s']")


def can_infer_option(answer: str, choices: Mapping[str, str]) -> str | None:
    """The option letter `answer` names (or `Z` for a refusal), else None."""
    if "Failed to obtain answer via API" in answer:
        return None
    if any(err in answer for err in _REFUSALS):
        return "Z"
    mod = answer
    for c in _STRIP:
        mod = mod.replace(c, " ")
    splits = set(mod.split())
    hits = [ch for ch in choices if ch in splits]
    if len(hits) == 1:
        return hits[0]
    if not hits and "Z" in splits:
        return "Z"
    return None


def can_infer_text(answer: str, choices: Mapping[str, str]) -> str | None:
    """The letter of the only option whose text appears in `answer`, else None."""
    low = answer.lower()
    if len(low) > 2 * sum(len(str(v)) for v in choices.values()):
        return None
    hits = [k for k, v in choices.items() if k in string.ascii_uppercase and str(v).lower() in low]
    return hits[0] if len(hits) == 1 else None


def can_infer(answer: str, choices: Mapping[str, str]) -> str | None:
    """VLMEvalKit's `can_infer`: the option letter first, then the option text."""
    answer = str(answer)
    return can_infer_option(answer, choices) or can_infer_text(answer, choices)


def yes_or_no(answer: str) -> str:
    """`Yes`, `No` or `Unknown`, as VLMEvalKit's `YOrN_Extraction`."""
    words = _PUNCT.sub(" ", answer.lower()).split()
    if "yes" in words and "no" not in words:
        return "Yes"
    if "no" in words and "yes" not in words:
        return "No"
    return "Unknown"


def verify_mcq(response: str, expected: str, choices: Mapping[str, str]) -> VerifyResult:
    """Score a multiple-choice reply by `can_infer` against the gold letter."""
    got = can_infer(response or "", choices)
    return VerifyResult(reward=1.0 if got is not None and got == expected.strip() else 0.0,
                        extracted_answer=got, scoring_details={"method": "vlmevalkit_can_infer"})


def verify_yes_no(response: str, expected: str) -> VerifyResult:
    """Score a yes/no reply by `YOrN_Extraction` against the gold `Yes`/`No`."""
    got = yes_or_no(response or "")
    ok = got != "Unknown" and got.lower() == expected.strip().lower()
    return VerifyResult(reward=1.0 if ok else 0.0, extracted_answer=None if got == "Unknown" else got,
                        scoring_details={"method": "vlmevalkit_yes_no"})
