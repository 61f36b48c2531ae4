"""PinchBench's judge reply parsing and hybrid scoring, checked against the real NeMo
Evaluator 0.3.0 (`nemo_evaluator.benchmarks.pinchbench`, run in the peer's own venv) on the
same replies; task files refused in one line when the judge prompt's source is missing."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from benchmarks._types import SeedResult, VerifyResult
from benchmarks.agentic.pinchbench import PinchBenchTasks
from benchmarks.agentic.pinchbench_grading import PinchBenchJudge, grading_code, parse_fractional
from benchmarks.errors import DataMissingError
from benchmarks.judges import JudgeParseError, JudgeRequest, get_judge_kind
from tests.support.peers import peer_nemo_bin
from tests.support.pinchbench_checkout import write_checkout

REPLIES = [
    '{"scores": {"a": 0.5, "b": 1.0}, "total": 0.75, "notes": "ok"}',
    'Here:\n```json\n{"scores": {"a": 1, "b": 0}}\n```',
    '{"criteria_scores": {"x": {"score": 0.2}, "y": 0.4}, "total": 3}',
    'prefix {"score": 0.9, "justification": "good"} and {"unrelated": 1}',
    "Total: 0.35 overall",
    '{"total": 1.7}',
    '{"scores": {"a": 2, "b": 0.5}, "total": null}',
    "no score at all",
    '{"a": {"b": {"c": 1}}, "total": "x"}',
]
PEER_SCRIPT = """
import json, sys
from nemo_evaluator.benchmarks.pinchbench import _parse_judge_response_fractional as p
out = []
for r in json.load(sys.stdin):
    d = p(r)
    out.append({"scores": d["scores"], "total": d["total"], "notes": d["notes"]})
print(json.dumps(out))
"""


def test_judge_replies_read_as_nemo_evaluator_reads_them() -> None:
    python = peer_nemo_bin().parent / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    p = subprocess.run([str(python), "-c", PEER_SCRIPT], input=json.dumps(REPLIES),
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    theirs = json.loads(p.stdout)
    ours = [parse_fractional(r) for r in REPLIES]
    assert ours == theirs
    assert [o["total"] for o in ours][:6] == [0.75, 0.5, 0.30000000000000004, 0.9, 0.35, 1.0]


def test_the_judge_kind_combines_hybrid_scores_and_refuses_unreadable_replies() -> None:
    kind = get_judge_kind("pinchbench")
    assert isinstance(kind, PinchBenchJudge)
    seed = SeedResult("p", "")
    hybrid = VerifyResult(0.5, None, {"grading_type": "hybrid", "judge_prompt": "J",
                                      "automated_score": 0.5,
                                      "grading_weights": {"automated": 1, "llm_judge": 3}})
    (req,) = kind.requests(seed, "", hybrid)
    grade = kind.parse(req, '{"total": 0.9}')
    reward, details = kind.score(seed, {"pinchbench": grade}, hybrid)
    assert reward == pytest.approx((0.5 * 1 + 0.9 * 3) / 4)
    assert details["hybrid_combine"]["combined"] == reward
    automated = VerifyResult(0.25, "automated=0.25", {"grading_type": "automated"})
    assert kind.requests(seed, "x", automated) == []
    assert kind.score(seed, {}, automated)[0] == 0.25
    with pytest.raises(JudgeParseError):
        kind.parse(JudgeRequest("pinchbench", "J"), "I cannot grade this")


def test_checkout_reading(tmp_path: Path) -> None:
    root = write_checkout(tmp_path / "skill")
    env = PinchBenchTasks(root)
    assert [t["meta"]["grading_type"] for t in env.tasks] == ["automated", "llm_judge", "hybrid"]
    assert grading_code(env.tasks[0]["sections"]["Automated Checks"]).startswith("def grade(")
    (root / "scripts" / "lib_grading.py").unlink()
    with pytest.raises(DataMissingError, match=r"lib_grading.py is missing .*task_02_judge.md"):
        PinchBenchTasks(root)
