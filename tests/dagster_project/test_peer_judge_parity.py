"""Judges and metrics as NeMo Evaluator 0.3.0 defines them, checked against the real tool
(`tests/support/peers.py`): its own example configs 05 (simpleqa with a `type: judge` metric)
and 02 (mmlu with a `type: scorer` metric) run through both tools against the same
reference servers. The judge server answers the 1-5 rubric with scores in the three forms
0.3.0 reads (a JSON object, `"score": n` in prose, `n/m`).

The peer cannot fetch its hub datasets here, so it reads the same local files through BYOB
files that keep its built-in's definition (simpleqa: `{problem}` prompt and `needs_judge`;
mmlu: its prompt, row preparation and scorer imported from the peer itself).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cli import run_nel, summary_json
from tests.support.peers import run_peer_nemo
from tests.support.realcomponents import REPO_ROOT

EXAMPLES = REPO_ROOT / "tests" / "fixtures" / "nemo_configs" / "examples"
UNSET = ["NEL_SHUFFLE_SEED", "NEL_SHARD_IDX", "NEL_TOTAL_SHARDS"]

PEER_SIMPLEQA = '''
from nemo_evaluator.environments.custom import benchmark, scorer
from nemo_evaluator.scoring import ScorerInput, needs_judge


@benchmark(name="simpleqa", dataset={csv!r}, prompt="{{problem}}", target_field="answer",
           extra={{"judge": True}})
@scorer
def simpleqa_scorer(sample: ScorerInput) -> dict:
    return needs_judge(sample)
'''

PEER_MMLU = '''
import csv
from pathlib import Path

from nemo_evaluator.benchmarks.mmlu import _PROMPT, _prepare
from nemo_evaluator.environments.custom import benchmark, scorer
from nemo_evaluator.scoring import ScorerInput, multichoice_regex


def _rows():  # the hub's cais/mmlu `all` rows: the authors' CSVs, subjects in name order
    out = []
    for f in sorted(Path({folder!r}).glob("*_test.csv")):
        with f.open(newline="", encoding="utf-8") as fh:
            for rec in csv.reader(fh):
                out.append({{"question": rec[0], "choices": rec[1:5], "answer": "ABCD".index(rec[5]),
                            "subject": f.name[: -len("_test.csv")]}})
    return out


@benchmark(name="mmlu", dataset=_rows, prompt=_PROMPT, target_field="answer", prepare_row=_prepare)
@scorer
def mmlu_scorer(sample: ScorerInput) -> dict:
    return multichoice_regex(sample)
'''

# The judge's replies, first match wins: different scores in each of 0.3.0's three forms.
JUDGE_ANSWERS = [
    {"match": "Reference answer:\n1", "content": '{"score": 2, "reasoning": "wrong year"}'},
    {"match": "Reference answer:\n2", "content": 'I would say "score": 3 here.'},
    {"match": "Score the following response", "content": "Fair attempt: 4/5."},
    {"match": "Grade the answer", "content": '{"score": 7, "reasoning": "custom rubric"}'},
]
CUSTOM_RUBRIC = ("Grade the answer from 1 to 10.\nQuestion: {instruction}\nAnswer: {response}\n"
                 "{reference_section}\nReply as JSON: {{\"score\": <1-10>}}")


def _values(scores: dict[str, Any]) -> dict[str, float]:
    return {k: v["value"] for k, v in scores.items() if isinstance(v, dict) and "value" in v}


def _bundle(out: Path, bench: str) -> dict[str, Any]:
    (doc,) = (out / bench).glob("eval-*.json")
    return json.loads(doc.read_text())


def _rewards(out: Path, bench: str) -> dict[int, float | None]:
    lines = (out / bench / "results.jsonl").read_text().splitlines()
    return {r["problem_idx"]: r["reward"] for r in map(json.loads, lines)}


def _peer_config(text: str, tmp: Path, name: str, urls: dict[str, str]) -> Path:
    cfg = yaml.safe_load(text)
    for svc, url in urls.items():
        cfg["services"][svc]["url"] = url
    cfg["benchmarks"][0]["name"] = name
    path = tmp / "peer.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def _run_both(cfg_text: str, tmp: Path, data_dir: Path, peer_bench: str, urls: dict[str, str],
              nel_env: dict[str, str], nel_args: list[str]) -> tuple[Path, Path, dict[str, Any]]:
    peer_out, nel_out = tmp / "peer", tmp / "nel"
    peer_cfg = _peer_config(cfg_text, tmp, peer_bench, urls)
    p = run_peer_nemo("eval", "run", str(peer_cfg), "-o", str(peer_out), unset=UNSET, cwd=tmp)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    nel_cfg = tmp / "nel.yaml"
    nel_cfg.write_text(cfg_text)
    s = summary_json(run_nel("eval", "run", str(nel_cfg), "-o", str(nel_out), "--json", "--no-progress",
                             *nel_args, env={"NEL_DATA_DIR": str(data_dir), **nel_env}, unset=UNSET))
    return peer_out, nel_out, s


def _judge_bodies(server_stats, url: str) -> list[dict[str, Any]]:
    bodies = server_stats(url)["bodies"]
    return sorted(bodies, key=lambda b: json.dumps(b["messages"]))


@pytest.fixture
def simpleqa_files(tmp_path: Path, data_dir: Path) -> Path:
    (tmp_path / "simpleqa_local.py").write_text(
        PEER_SIMPLEQA.format(csv=str(data_dir / "simpleqa" / "simple_qa_test_set.csv")))
    return tmp_path


def _simpleqa_run(cfg_text: str, tmp: Path, data_dir: Path, reference_server) -> tuple[Any, ...]:
    solver_url = reference_server()
    judge_peer = reference_server(answers=JUDGE_ANSWERS, record_bodies=100)
    judge_nel = reference_server(answers=JUDGE_ANSWERS, record_bodies=100)
    peer_out, nel_out, summary = _run_both(
        cfg_text, tmp, data_dir, "./simpleqa_local.py",
        {"solver": f"{solver_url}/chat/completions", "judge": f"{judge_peer}/chat/completions"},
        {"NEL_TEST_URL": f"{solver_url}/chat/completions"},
        ["-O", f"services.judge.url={judge_nel}/chat/completions"])
    return peer_out, nel_out, summary, judge_peer, judge_nel


def test_config_05_judges_on_the_rubric_into_mean_reward_as_nemo_evaluator_does(
        simpleqa_files: Path, data_dir: Path, reference_server, server_stats) -> None:
    cfg_text = (EXAMPLES / "05_simpleqa_judge.yaml").read_text()
    peer_out, nel_out, summary, judge_peer, judge_nel = _simpleqa_run(
        cfg_text, simpleqa_files, data_dir, reference_server)

    # The judge gets exactly 0.3.0's request: rubric prompt, system message, settings.
    peer_req, nel_req = _judge_bodies(server_stats, judge_peer), _judge_bodies(server_stats, judge_nel)
    assert len(peer_req) == 5 and nel_req == peer_req
    assert peer_req[0]["messages"][0] == {
        "role": "system", "content": "You are a strict evaluation judge. Always respond with valid JSON."}
    assert (peer_req[0]["temperature"], peer_req[0]["max_tokens"]) == (0.0, 2048)

    # The same reward per item (the score over 5), and several different ones.
    rewards = _rewards(nel_out, "simpleqa")
    assert rewards == _rewards(peer_out, "simpleqa")
    assert len(set(rewards.values())) > 1 and set(rewards.values()) <= {0.4, 0.6, 0.8}

    # The same score names and values; nel adds the judge metric under its own name.
    peer_scores = _values(_bundle(peer_out, "simpleqa")["benchmark"]["scores"])
    nel_scores = _values(_bundle(nel_out, "simpleqa")["benchmark"]["scores"])
    assert set(peer_scores) == {"mean_reward"}
    assert nel_scores == {**peer_scores, "judge:correctness": peer_scores["mean_reward"]}
    (row,) = summary["results"]
    assert row["scores"] == nel_scores and row["metric"] == "correctness"


def test_judge_options_are_honoured_where_nemo_evaluator_ignores_them(
        simpleqa_files: Path, data_dir: Path, reference_server, server_stats) -> None:
    """A custom `rubric`, `temperature`, `max_score` and `system_prompt`: 0.3.0 accepts them
    and grades with its defaults (checked here on its wire); nel sends and scores them."""
    cfg = yaml.safe_load((EXAMPLES / "05_simpleqa_judge.yaml").read_text())
    cfg["benchmarks"][0]["scoring"]["metrics"][0].update(
        rubric=CUSTOM_RUBRIC, temperature=0.7, max_score=10, system_prompt="Answer in JSON.")
    peer_out, nel_out, _summary, judge_peer, judge_nel = _simpleqa_run(
        yaml.safe_dump(cfg, sort_keys=False), simpleqa_files, data_dir, reference_server)

    peer_req, nel_req = _judge_bodies(server_stats, judge_peer), _judge_bodies(server_stats, judge_nel)
    assert len(peer_req) == len(nel_req) == 5
    assert all(b["temperature"] == 0.0 and "Score the following response" in b["messages"][1]["content"]
               for b in peer_req)  # 0.3.0: its defaults whatever the metric says
    for b in nel_req:
        assert b["temperature"] == 0.7 and b["max_tokens"] == 2048
        assert b["messages"][0] == {"role": "system", "content": "Answer in JSON."}
        assert b["messages"][1]["content"].startswith("Grade the answer from 1 to 10.\nQuestion: ")
        assert "Reference answer:\n" in b["messages"][1]["content"]
    rewards = list(_rewards(nel_out, "simpleqa").values())
    assert 0.7 in rewards and set(rewards) <= {0.2, 0.3, 0.7}  # out of max_score 10, not 5
    mean = round(sum(rewards) / len(rewards), 4)
    assert _values(_bundle(nel_out, "simpleqa")["benchmark"]["scores"]) == {
        "mean_reward": mean, "judge:correctness": mean}
    assert set(_rewards(peer_out, "simpleqa")) == set(_rewards(nel_out, "simpleqa"))


def test_config_02_reports_every_metric_under_its_name_as_nemo_evaluator_does(
        tmp_path: Path, data_dir: Path, reference_server) -> None:
    (tmp_path / "mmlu_local.py").write_text(PEER_MMLU.format(folder=str(data_dir / "mmlu" / "test")))
    url = reference_server(answers=[{"match": "", "content": "Answer: B"}])
    peer_out, nel_out, summary = _run_both(
        (EXAMPLES / "02_mmlu_completions.yaml").read_text(), tmp_path, data_dir, "./mmlu_local.py",
        {"nemotron": f"{url}/completions"}, {"NEL_TEST_URL_COMPLETIONS": f"{url}/completions"}, [])
    assert _rewards(nel_out, "mmlu") == _rewards(peer_out, "mmlu")
    peer_scores = _values(_bundle(peer_out, "mmlu")["benchmark"]["scores"])
    nel_scores = _values(_bundle(nel_out, "mmlu")["benchmark"]["scores"])
    assert set(peer_scores) == {"pass@1", "scorer:mcq_extract"}
    assert nel_scores == peer_scores and 0 < peer_scores["pass@1"] < 1
    (row,) = summary["results"]
    assert row["scores"] == peer_scores  # and `nel eval run` reports them by those names
