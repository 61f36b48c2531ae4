"""The rubric judge kind next to NeMo Evaluator 0.3.0's own functions (its venv's Python, run
as a subprocess): the same prompt for the same item and the same score for the same reply,
except where 0.3.0 scores an unreadable reply 0 (nel: a parse error, so a judge error)."""

from __future__ import annotations

import json
import subprocess

import pytest

from benchmarks import SeedResult
from benchmarks.judge_rubric import (
    RUBRIC_TEMPLATE,
    RubricJudge,
    check_rubric,
    parse_rubric_score,
    rubric_prompt,
)
from benchmarks.judges import JudgeParseError
from tests.support.peers import peer_nemo_bin

REPLIES = [
    '{"score": 4, "reasoning": "close"}', '{"score": "3", "reasoning": "as text"}',
    '{"score": 9}', 'Here: {"score": 2.5, "reasoning": "x"} done', 'I give it "score": 1',
    "Overall 4/5, good.", "Score 3 / 10", '{"score": "4/5"}', '{"score": 5, "extra": [1, 2]}',
    "```json\n{\"score\": 3}\n```",
]
UNREADABLE = ["Looks fine to me.", "", '{"reasoning": "no score"}']

PEER_SCRIPT = """
import json, sys
from nemo_evaluator.scoring.judge import build_judge_prompt, parse_judge_response
spec = json.load(sys.stdin)
print(json.dumps({
    "parsed": [parse_judge_response(r, spec["max_score"]) for r in spec["replies"]],
    "prompts": [build_judge_prompt(*args) for args in spec["prompts"]],
}))
"""


def _peer(replies: list[str], prompts: list[list[str | None]], max_score: int) -> dict:
    python = peer_nemo_bin().parent / "python"
    p = subprocess.run([str(python), "-c", PEER_SCRIPT], capture_output=True, text=True, timeout=120,
                       input=json.dumps({"replies": replies, "prompts": prompts, "max_score": max_score}))
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


@pytest.mark.parametrize("max_score", [5, 10])
def test_same_score_as_nemo_evaluator_for_every_readable_reply(max_score: int) -> None:
    peer = _peer(REPLIES + UNREADABLE, [], max_score)["parsed"]
    for reply, theirs in zip(REPLIES, peer, strict=False):
        ours = parse_rubric_score(reply, max_score)
        assert "parse_error" not in theirs
        assert (ours["score"], ours["normalized"]) == (theirs["score"], theirs["normalized"]), reply
    for reply, theirs in zip(UNREADABLE, peer[len(REPLIES):], strict=True):
        assert theirs["parse_error"] is True and theirs["normalized"] == 0.0  # 0.3.0: a silent 0
        with pytest.raises(JudgeParseError):
            parse_rubric_score(reply, max_score)


def test_same_prompt_as_nemo_evaluator() -> None:
    cases = [["What is 2+2?", "4", "4"], ["Name a colour.", "blue", None], ["Q", "{odd} braces", ""]]
    peer = _peer([], cases, 5)["prompts"]
    for (instruction, response, expected), theirs in zip(cases, peer, strict=True):
        assert rubric_prompt(RUBRIC_TEMPLATE, instruction, response, expected) == theirs
    judge = RubricJudge()
    (req,) = judge.requests(SeedResult("What is 2+2?", "4", {}), "4")
    assert req.prompt == peer[0]


def test_a_null_score_is_unreadable_and_a_bad_template_is_named() -> None:
    with pytest.raises(JudgeParseError, match="not a number"):
        parse_rubric_score('{"score": null}')
    check_rubric(RUBRIC_TEMPLATE)
    with pytest.raises(ValueError, match=r"unknown placeholder \{question\}"):
        check_rubric("Rate {question}")
