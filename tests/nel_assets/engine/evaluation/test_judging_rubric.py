"""The `rubric` judge kind in the Grader: which metrics grade on it (a NeMo-spelled judge
metric by default, a metric with a rubric), nel's graders by name, options that are refused
rather than dropped, and an unreadable reply as a judge error (0.3.0: a 0)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from benchmarks import get_benchmark
from benchmarks.datasets import set_data_dir
from benchmarks.errors import NelError
from nel_assets.engine.evaluation.judging import check_scoring
from nel_assets.engine.evaluation.loop import JudgeError
from tests.nel_assets.engine.evaluation.test_judging import config, grade, solver_run


@pytest.fixture
def data(data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEL_CACHE_DIR", str(tmp_path))
    set_data_dir(data_dir)


def nemo_simpleqa(**metric: Any) -> dict[str, Any]:
    """simpleqa in NeMo Evaluator's spelling (the model under `solver.service`)."""
    return {"name": "simpleqa", "solver": {"type": "simple", "service": "solver"},
            "scoring": {"include_defaults": False,
                        "metrics": [{"type": "judge", "name": "correctness", "service": "grader", **metric}]}}


def test_nemo_spelling_grades_on_the_rubric_and_nels_grader_stays_by_name(
        data: None, reference_server, server_stats) -> None:
    url = reference_server(record_bodies=10, answers=[
        {"match": "Score the following response", "content": '{"score": 3, "reasoning": "partly"}'},
        {"match": "Gold target", "content": "A"}])
    env = get_benchmark("simpleqa")
    v = asyncio.run(grade(config(url, nemo_simpleqa()), env, 0, "Michio Sugeno"))
    assert v.reward == pytest.approx(0.6) and v.scoring_details["judge"]["kind"] == "rubric"
    assert v.scoring_details["judge"]["score"] == 3.0
    # nel's SimpleQA grader (correct / incorrect / not attempted), chosen by name
    v = asyncio.run(grade(config(url, nemo_simpleqa(params={"kind": "simpleqa"})), env, 0, "Michio Sugeno"))
    assert v.reward == 1.0 and v.scoring_details["judge"]["grade"] == "correct"
    # nel's spelling keeps nel's grader; a rubric in it grades on the rubric
    bench = {"name": "simpleqa", "scoring": {"metrics": [{"type": "judge", "name": "j", "service": "grader"}]}}
    assert asyncio.run(grade(config(url, bench), env, 0, "x")).scoring_details["judge"]["kind"] == "simpleqa"
    bench["scoring"]["metrics"][0]["rubric"] = "Score the following response: {response} {{\"score\": n}}"
    v = asyncio.run(grade(config(url, bench), env, 0, "x"))
    assert v.scoring_details["judge"]["kind"] == "rubric"
    assert server_stats(url)["bodies"][-1]["messages"][-1]["content"] == \
        'Score the following response: x {"score": n}'


def test_an_unreadable_score_is_a_judge_error_not_a_zero(data: None, reference_server) -> None:
    url = reference_server(answers=[{"match": "Score the following", "content": "Looks fine to me."}])
    with pytest.raises(JudgeError, match="no score in the reply"):
        asyncio.run(grade(config(url, nemo_simpleqa()), get_benchmark("simpleqa"), 0, "Michio Sugeno"))


def test_swap_check_and_reference_free(data: None, reference_server, server_stats) -> None:
    url = reference_server(record_bodies=10, answers=[
        {"match": "Response to evaluate:\nMichio Sugeno", "content": '{"score": 5}'},
        {"match": "Response to evaluate:\nLotfi", "content": '{"score": 2}'}])
    env = get_benchmark("simpleqa")
    v = asyncio.run(grade(config(url, nemo_simpleqa(swap_check=True)), env, 0, "Lotfi"))
    j = v.scoring_details["judge"]
    assert v.reward == pytest.approx(0.4) and j["swap_score"] == 5.0
    assert j["position_bias"] == pytest.approx(0.6)
    asyncio.run(grade(config(url, nemo_simpleqa(reference_free=True)), env, 0, "Lotfi"))
    assert "Reference answer" not in server_stats(url)["bodies"][-1]["messages"][-1]["content"]


@pytest.mark.parametrize(("metric", "message"), [
    ({"rubric": "Rate {answer}"}, "unknown placeholder {answer}"),
    ({"rubric": "Reply as {\"score\": n}"}, "write {{ and }}"),
    ({"rubric_file": "/nonexistent/rubric.txt"}, "cannot read rubric_file"),
    ({"params": {"kind": "simpleqa"}, "max_score": 10}, "does not take max_score"),
    ({"params": {"kind": "nope"}}, "unknown judge kind 'nope'"),
])
def test_bad_rubric_options_are_one_line_errors_before_the_run(data: None, metric: dict[str, Any],
                                                               message: str) -> None:
    with pytest.raises(NelError, match=message.replace("{", r"\{").replace("}", r"\}")):
        check_scoring(solver_run(config("http://127.0.0.1:9/v1", nemo_simpleqa(**metric))))


def test_metric_timeout_and_retries_reach_the_judge_client(data: None, reference_server) -> None:
    def flaky() -> str:  # each request fails twice, then is answered
        return reference_server(fail_rate=1.0, fail_status=503, fail_attempts=2, answers=[
            {"match": "Score the following", "content": '{"score": 4}'}])

    env = get_benchmark("simpleqa")
    # the service says max_retries 0 (the first failure fails the sample); the metric says 3
    v = asyncio.run(grade(config(flaky(), nemo_simpleqa(max_retries=3)), env, 0, "Michio Sugeno"))
    assert v.reward == pytest.approx(0.8)
    with pytest.raises(JudgeError, match="request failed"):
        asyncio.run(grade(config(flaky(), nemo_simpleqa()), env, 0, "Michio Sugeno"))


def test_the_kind_the_config_writes_is_the_one_the_grader_reads() -> None:
    from nel_assets.engine.evaluation import judging
    from nel_resources.config import nemo_judges

    assert judging.NEMO_KIND == nemo_judges.NEMO_KIND
