"""`skills://NAME` end to end: NeMo Evaluator's example config 04 (`skills://mmlu-pro`) runs
with NeMo Skills' prepared data generated from NEL_DATA_DIR (the request is Skills' prompt
config, the verdict Skills' multichoice rule; a rerun sends nothing), and is refused in one
line, before any request, without the data. A math benchmark (`skills://math-500`) grades
equivalent answers as Skills' math grader does; `nel list -s skills` lists what is there.
The model is nel's reference server, answering deterministically per problem."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nel_resources.reference_server import start_reference_server
from tests.support.cli import run_nel, summary_json
from tests.support.reference import server_stats
from tests.support.skills_data import write_human_eval, write_math500, write_mmlu_pro

CONFIG_04 = (Path(__file__).resolve().parents[1] / "fixtures" / "nemo_configs" / "examples"
             / "04_mmlu_pro_skills.yaml")
N_MMLU = 5  # config 04's max_problems
# Skills' eval/aai/mcq-10choices.yaml user template, filled with the row's `problem`.
MCQ_HEAD = ("Answer the following multiple choice question. The last line of your response "
            "should be in the following format: 'Answer: A/B/C/D/E/F/G/H/I/J' (e.g. 'Answer: A')."
            "\n\n")
MATH_HEAD = ("Solve the following math problem. Make sure to put the answer (and only answer) "
             "inside \\boxed{}.\n\n")


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def skills_root(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("skills")
    write_mmlu_pro(data_dir, root, 20)
    write_math500(data_dir, root, 4)
    write_human_eval(data_dir, root, 3)
    return root


def _answers(root: Path) -> list[dict[str, str]]:
    """mmlu-pro: 0-2 `Answer: X`, 3 `\\boxed{X}`, 4 a wrong letter. math-500: 0 an equivalent
    form boxed, 1 the gold boxed, 2 a wrong number boxed, 3 the gold without a box (Skills reads
    only `\\boxed{}`)."""
    out = []
    for i, r in enumerate(_rows(root / "mmlu-pro" / "test.jsonl")[:N_MMLU]):
        gold = r["expected_answer"]
        wrong = "A" if gold != "A" else "B"
        content = {3: f"So the final answer is \\boxed{{{gold}}}.",
                   4: f"Answer: {wrong}"}.get(i, f"Checking the options.\n**Answer:** {gold}")
        out.append({"match": r["problem"], "content": content})
    math = _rows(root / "math-500" / "test.jsonl")
    # rows 0 and 1 of MATH-500: `\left( 3, \frac{\pi}{2} \right)` and `p - q`
    forms = ["so $\\boxed{(3, \\pi/2)}$", f"$\\boxed{{{math[1]['expected_answer']}}}$",
             "\\boxed{12345}", f"The answer is {math[3]['expected_answer']}."]
    for r, content in zip(math, forms, strict=True):
        out.append({"match": r["problem"], "content": content})
    # human-eval: 0 the whole function fenced (passes), 1 a wrong function, 2 a `<think>` never
    # closed (Skills takes no code from it)
    code = _rows(root / "human-eval" / "test.jsonl")
    forms = [f"```python\n{code[0]['prompt']}{code[0]['canonical_solution']}```",
             f"```python\ndef {code[1]['entry_point']}(*args):\n    return None\n```",
             f"<think>\n```python\n{code[2]['prompt']}{code[2]['canonical_solution']}```"]
    for r, content in zip(code, forms, strict=True):
        out.append({"match": r["question"], "content": content})
    return out


@pytest.fixture(scope="module")
def model_url(skills_root: Path) -> Iterator[str]:
    proc, url = start_reference_server(answers=_answers(skills_root), record_bodies=50)
    try:
        yield url
    finally:
        proc.stop()


def _sent(url: str) -> int:
    return int(server_stats(url)["by_endpoint"].get("/v1/chat/completions", 0))


def test_config_04_runs_on_skills_data_and_resumes(tmp_path: Path, skills_root: Path,
                                                   model_url: str) -> None:
    env = {"NEL_TEST_URL": f"{model_url}/chat/completions", "NEL_SKILLS_DIR": str(skills_root)}
    out = tmp_path / "out"
    args = ("eval", "run", str(CONFIG_04), "-o", str(out), "--json", "--no-progress")
    before = _sent(model_url)
    (res,) = summary_json(run_nel(*args, env=env))["results"]
    assert _sent(model_url) - before == N_MMLU
    assert res["benchmark"] == "skills://mmlu-pro" and res["n_items"] == N_MMLU and res["failed"] == 0
    rows = {r["problem_idx"]: r for r in map(json.loads, (Path(res["exports"]) / "results.jsonl")
                                             .read_text().splitlines())}
    assert [rows[i]["reward"] for i in range(N_MMLU)] == [1.0, 1.0, 1.0, 1.0, 0.0]
    assert rows[0]["scoring_details"]["method"] == "answer_line"
    assert rows[3]["scoring_details"]["method"] == "boxed"
    problems = {r["problem"] for r in _rows(skills_root / "mmlu-pro" / "test.jsonl")[:N_MMLU]}
    bodies = [b for b in server_stats(model_url)["bodies"] if b["messages"][-1]["content"].startswith(MCQ_HEAD)]
    assert {b["messages"][-1]["content"][len(MCQ_HEAD):] for b in bodies} == problems
    assert all(len(b["messages"]) == 1 for b in bodies)  # Skills' config has no system prompt
    # a rerun finds every shard done and sends nothing
    again = summary_json(run_nel(*args, env=env))["results"][0]
    assert _sent(model_url) - before == N_MMLU and again["score"] == res["score"]


def test_config_04_is_refused_in_one_line_without_the_data(tmp_path: Path, model_url: str) -> None:
    empty = tmp_path / "skills"
    before = _sent(model_url)
    proc = run_nel("eval", "run", str(CONFIG_04), "-o", str(tmp_path / "out"),
                   env={"NEL_TEST_URL": f"{model_url}/chat/completions", "NEL_SKILLS_DIR": str(empty)})
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "key benchmarks.0.name: benchmark 'skills://mmlu-pro' cannot run here" in lines[0]
    assert f"put {empty}/mmlu-pro/test.jsonl in place" in lines[0]
    assert f"ns prepare_data mmlu-pro --data_dir={empty}" in lines[0]
    assert _sent(model_url) == before


def test_math_500_and_the_local_list(tmp_path: Path, skills_root: Path, model_url: str) -> None:
    cfg = {"services": {"ref": {"type": "api", "url": f"{model_url}/chat/completions",
                                "protocol": "chat_completions", "model": "ref"}},
           "benchmarks": [{"name": "skills://math-500", "solver": {"type": "simple", "service": "ref"},
                           "params": {"data_dir": str(skills_root)}}],
           "output": {"dir": str(tmp_path / "out")}}
    path = tmp_path / "nel.yaml"
    path.write_text(yaml.safe_dump(cfg))
    (res,) = summary_json(run_nel("eval", "run", str(path), "--json", "--no-progress"))["results"]
    rows = {r["problem_idx"]: r for r in map(json.loads, (Path(res["exports"]) / "results.jsonl")
                                             .read_text().splitlines())}
    assert [rows[i]["reward"] for i in range(4)] == [1.0, 1.0, 0.0, 0.0]
    assert rows[3]["scoring_details"]["method"] == "none"
    sent = [b["messages"][-1]["content"] for b in server_stats(model_url)["bodies"]]
    assert any(s.startswith(MATH_HEAD) for s in sent)
    # the bundle is a bundle like any other: `nel compare` pairs its items
    cmp = run_nel("compare", str(tmp_path / "out"), str(tmp_path / "out"), "--format", "json",
                  "--no-report")
    assert cmp.returncode == 0, cmp.stderr
    paired = json.loads(cmp.stdout)["benchmarks"]["skills://math-500"]
    assert paired["n_paired"] == 4 and paired["outcome"] == "PASS", paired
    listed = run_nel("list", "-s", "skills", env={"NEL_SKILLS_DIR": str(skills_root)})
    assert listed.returncode == 0, listed.stderr
    assert "skills://math-500" in listed.stdout and "skills://mmlu-pro" in listed.stdout
    assert "multichoice" in listed.stdout


def test_human_eval_runs_in_a_local_sandbox(tmp_path: Path, skills_root: Path, model_url: str,
                                            bwrap: None) -> None:
    cfg = {"services": {"ref": {"type": "api", "url": f"{model_url}/chat/completions",
                                "protocol": "chat_completions", "model": "ref"}},
           "benchmarks": [{"name": "skills://human-eval", "solver": {"type": "simple", "service": "ref"},
                           "sandbox": {"type": "local"}, "params": {"exec_timeout": 20}}],
           "output": {"dir": str(tmp_path / "out")}}
    path = tmp_path / "nel.yaml"
    path.write_text(yaml.safe_dump(cfg))
    env = {"NEL_SKILLS_DIR": str(skills_root)}
    (res,) = summary_json(run_nel("eval", "run", str(path), "--json", "--no-progress", env=env))["results"]
    rows = {r["problem_idx"]: r for r in map(json.loads, (Path(res["exports"]) / "results.jsonl")
                                             .read_text().splitlines())}
    assert [rows[i]["reward"] for i in range(3)] == [1.0, 0.0, 0.0]
    assert [rows[i]["scoring_details"]["reason"] for i in range(3)] == ["passed", "assertion", "no_code"]
    # without a sandbox the run is refused before any request
    del cfg["benchmarks"][0]["sandbox"]
    path.write_text(yaml.safe_dump(cfg))
    before = _sent(model_url)
    proc = run_nel("eval", "run", str(path), env=env)
    assert proc.returncode != 0 and "needs a sandbox" in proc.stderr, proc.stderr
    assert _sent(model_url) == before
