"""The `arithmetic` built-in (GPT-3's ten arithmetic tasks, generated from a fixed seed):
its problems, its first-number scorer, and a real `nel eval run` of it."""

from __future__ import annotations

import asyncio

import pytest

from benchmarks import get_factory
from benchmarks.builtin.arithmetic import TASKS, Arithmetic, first_number_match, generate
from benchmarks.errors import BenchmarkConfigError
from tests.support.cli import run_nel, summary_json


def test_problems_are_the_same_every_time_and_their_answers_are_right() -> None:
    rows = generate(list(TASKS), 50)
    assert rows == generate(list(TASKS), 50) and len(rows) == 500
    for r in rows:
        digits, op = TASKS[r["task"]]
        if op == "composite":  # "(a?b)?c" of one-digit operands
            a, o1, b, o2, c = r["expr"][1], r["expr"][2], r["expr"][3], r["expr"][5], r["expr"][6]
            inner = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[o1]
            want = {"+": inner + int(c), "-": inner - int(c), "*": inner * int(c)}[o2]
        else:
            a, word, b = r["expr"].split()
            assert word == op and len(a) == len(b) == digits
            want = {"plus": int(a) + int(b), "minus": int(a) - int(b), "times": int(a) * int(b)}[op]
        assert r["answer"] == str(want), r
    # the tasks draw independently: a subset asks the same problems as the full set
    assert generate(["2dm"], 50) == [r for r in rows if r["task"] == "2dm"]


def test_the_first_number_of_the_answer_is_scored() -> None:
    assert first_number_match(" 124", "124").reward == 1.0
    assert first_number_match("1,024.\nQuestion: What is 3 plus 4?\nAnswer: 7", "1024").reward == 1.0
    assert first_number_match("-37", "-37").reward == 1.0
    # a later number does not count: the model answered 12 first
    wrong = first_number_match("12. Question: What is 60 plus 64? Answer: 124", "124")
    assert wrong.reward == 0.0 and wrong.extracted_answer == "12"
    assert first_number_match("I do not know", "5").extracted_answer is None


def test_it_is_a_registered_builtin_with_checked_parameters() -> None:
    env = get_factory("arithmetic")(tasks=["2da", "1dc"], per_task=3)
    assert isinstance(env, Arithmetic) and len(env) == 6
    seed = asyncio.run(env.seed(0))
    assert seed.prompt.endswith(f"What is {env.rows[0]['expr']}?")
    assert seed.metadata["category"] == "2da"
    with pytest.raises(BenchmarkConfigError, match=r"unknown task.*4dx"):
        Arithmetic(tasks=["4dx"])
    with pytest.raises(BenchmarkConfigError, match="per_task"):
        Arithmetic(per_task=0)


def test_a_run_scores_the_models_answers(tmp_path, reference_server) -> None:
    rows = generate(list(TASKS), 200)[:20]  # `-m 20` in dataset order: the first 2da problems
    right = rows[::2]
    url = reference_server(answers=[
        *({"match": f"What is {r['expr']}?", "content": r["answer"]} for r in right),
        *({"match": f"What is {r['expr']}?", "content": str(int(r["answer"]) + 1)}
          for r in rows[1::2])])
    s = summary_json(run_nel("eval", "run", "-b", "arithmetic", "-m", "20", "--model-url", url,
                             "--model-id", "m", "-o", str(tmp_path / "out"), "--json",
                             "--no-progress"))
    (res,) = s["results"]
    assert res["n_items"] == 20 and res["score"] == pytest.approx(0.5), res
