"""The headline score follows the configured metric (nel's spelling) or NeMo Evaluator 0.3.0's
rule (its spelling), end to end: `nel eval run` on MMLU against the reference server, whose
answers make the default scorer and `mcq_extract` disagree.

Half the answers name the gold option by its text ("The answer is 24"): MMLU's own scorer
knows the options and counts them, `mcq_extract` (an option letter only) does not. So the
default scorer scores 100% and `mcq_extract` 50%, and the headline says which one it is.
"""

from __future__ import annotations

import asyncio
import glob
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks import get_benchmark
from benchmarks.datasets import set_data_dir
from benchmarks.scoring import SCORERS
from tests.support.cli import run_nel, summary_json

N = 6
LETTERS = "ABCD"


@pytest.fixture(scope="module")
def answers(data_dir: Path) -> tuple[list[dict[str, str]], float, float]:
    """Reference-server answers for MMLU's first N items, and the default scorer's and
    `mcq_extract`'s expected means over them (computed here by the scorers themselves)."""
    from benchmarks import datasets

    before = datasets._DATA_DIR_OVERRIDE
    set_data_dir(str(data_dir))
    try:
        env = get_benchmark("mmlu")
        mcq = SCORERS.load("mcq_extract")
        rows, default, extract = [], [], []
        for i in range(N):
            s = asyncio.run(env.seed(i))
            gold = s.expected_answer
            if i % 2:
                text = env.option_texts(s.metadata, gold, "choices")[LETTERS.index(gold)]
                content = f"The answer is {text}"
            else:
                content = f"Answer: {gold}"
            default.append(asyncio.run(env.verify(content, gold, **s.metadata)).reward)
            extract.append(mcq(content, gold).reward)
            rows.append({"match": s.prompt[-160:], "content": content})
    finally:
        set_data_dir(before)
    return rows, sum(default) / N, sum(extract) / N


def run_config(tmp_path: Path, url: str, data_dir: Path, bench: dict[str, Any]) -> dict[str, Any]:
    """`nel eval run` on a one-benchmark config; the summary row and the eval-*.json."""
    out = tmp_path / "out"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({
        "services": {"ref": {"type": "api", "url": url, "model": "ref"}},
        "benchmarks": [{"name": "mmlu", "max_problems": N, "shuffle_seed": None,
                        "scoring": {"metrics": [{"type": "scorer", "name": "mcq_extract"}]},
                        **bench}],
        "output": {"dir": str(out)}}))
    proc = run_nel("eval", "run", str(cfg), "--json", "--no-progress",
                   env={"NEL_DATA_DIR": str(data_dir)})
    (row,) = summary_json(proc)["results"]
    (doc,) = [json.loads(Path(p).read_text()) for p in glob.glob(f"{row['exports']}/eval-*.json")]
    text = run_nel("eval", "run", str(cfg), "--no-progress", env={"NEL_DATA_DIR": str(data_dir)})
    assert text.returncode == 0, text.stderr
    row["text"] = text.stdout
    return {"row": row, "eval": doc, "out": out}


def test_nel_spelling_headline_is_the_configured_metric(tmp_path: Path, reference_server, data_dir: Path,
                                                        answers: tuple[list[dict[str, str]], float, float]
                                                        ) -> None:
    rows, default, extract = answers
    assert (default, extract) == (1.0, 0.5)  # the two scorers disagree on these answers
    url = reference_server(answers=rows)
    r = run_config(tmp_path, url, data_dir, {"service": "ref"})
    row = r["row"]
    assert row["score"] == pytest.approx(extract)
    assert row["metric"] == "mcq_extract"
    assert row["beside"] == {"default": pytest.approx(default)}
    # what the terminal shows, and the NeMo-format file's headline, are the same metric
    assert "mmlu/ref: score = mcq_extract; beside it: default 100.00%" in row["text"]
    scores = r["eval"]["benchmark"]["scores"]
    assert scores["pass@1"]["value"] == pytest.approx(extract)
    assert scores["scorer:mcq_extract"]["value"] == pytest.approx(extract)
    # the report's headline names it too
    report = next((r["out"]).rglob("report.md")).read_text()
    assert "Metric: score = mcq_extract; beside it: default 100.00%." in report


def test_nemo_spelling_keeps_nemo_evaluators_headline(tmp_path: Path, reference_server, data_dir: Path,
                                                       answers: tuple[list[dict[str, str]], float, float]
                                                       ) -> None:
    rows, default, extract = answers
    url = reference_server(answers=rows)
    r = run_config(tmp_path, url, data_dir, {"solver": {"type": "simple", "service": "ref"}})
    row = r["row"]
    # NeMo Evaluator 0.3.0: the default scorer's pass@1 is the headline, `scorer:<name>` beside
    assert row["score"] == pytest.approx(default)
    assert row["metric"] == "default"
    assert row["beside"] == {"mcq_extract": pytest.approx(extract)}
    scores = r["eval"]["benchmark"]["scores"]
    assert scores["pass@1"]["value"] == pytest.approx(default)
    beside = scores["scorer:mcq_extract"]
    assert (beside["value"], beside["correct"], beside["total"]) == (pytest.approx(extract), 3, N)
    assert beside["ci_lower"] < extract < beside["ci_upper"]
    assert "mmlu/ref: score = default; beside it: mcq_extract 50.00%" in row["text"]
    # and per sample in results.jsonl, as 0.3.0 writes it
    lines = [json.loads(x) for x in (Path(row["exports"]) / "results.jsonl").read_text().splitlines()]
    assert sorted(x["scorer_rewards"]["scorer:mcq_extract"] for x in lines) == [0.0] * 3 + [1.0] * 3
    assert [x["reward"] for x in lines] == [1.0] * N
