"""`lm-eval://` on local data: lm-eval's own task (gsm8k: its prompt, few-shot, filters,
metric) read from a local copy laid out like its Hub id; a missing copy is refused in one
line naming the file to put where; `nel list -s lm-eval` finds the task."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from benchmarks import get_benchmark
from benchmarks.errors import NelError

if not os.environ.get("CI"):  # in CI the optional package is installed: a missing one fails
    pytest.importorskip("lm_eval")


@pytest.fixture(scope="module")
def gsm8k_copy(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("lm_eval_data")
    folder = root / "openai" / "gsm8k" / "main"
    folder.mkdir(parents=True)
    for split, n in (("test", 12), ("train", 8)):
        lines = (data_dir / "gsm8k" / f"{split}.jsonl").read_text().splitlines()[:n]
        (folder / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_builtin_task_reads_the_local_copy(gsm8k_copy: Path) -> None:
    env = get_benchmark("lm-eval://gsm8k", data_dir=str(gsm8k_copy), hints={"protocol": "completions"})
    assert len(env) == 12
    seed = asyncio.run(env.seed(0))
    # lm-eval's gsm8k prompt: 5 shots from the train split, then the question
    assert seed.prompt.count("Question:") == 6 and seed.prompt.endswith("\nAnswer:")
    train = (gsm8k_copy / "openai/gsm8k/main/train.jsonl").read_text()
    shots = [q.split("\nAnswer:")[0] for q in seed.prompt.split("Question: ")[1:-1]]
    assert all(json.dumps(q)[1:-1] in train for q in shots)  # drawn from the train split
    assert seed.metadata["gen_kwargs"]["until"][0] == "Question:"
    assert env.request_fields(seed.metadata["gen_kwargs"])["stop"][0] == "Question:"
    right = asyncio.run(env.verify("So 16 - 3 - 4 = 9 eggs, 9 * 2 = 18.\n#### 18",
                                   seed.expected_answer, **seed.metadata))
    assert right.reward == 1.0 and right.extracted_answer == "18"
    # strict-match wants `#### N`; flexible-extract takes the last number
    loose = asyncio.run(env.verify("The answer is 18.", seed.expected_answer, **seed.metadata))
    assert loose.reward == 0.0 and loose.scoring_details["metrics"] == {
        "exact_match,strict-match": 0.0, "exact_match,flexible-extract": 1.0}


def test_missing_data_is_one_line_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(NelError) as err:
        get_benchmark("lm-eval://gsm8k", data_dir=str(tmp_path))
    msg = str(err.value)
    assert "\n" not in msg and "downloads nothing" in msg
    assert f"{tmp_path}/openai/gsm8k/main/<split>.jsonl" in msg


def test_unknown_task_suggests(tmp_path: Path) -> None:
    with pytest.raises(NelError, match="unknown lm-eval task 'gsm8kk'; did you mean gsm8k"):
        get_benchmark("lm-eval://gsm8kk", data_dir=str(tmp_path))


def test_list_finds_the_local_task(gsm8k_copy: Path) -> None:
    from benchmarks.lm_eval.tasks import local_tasks

    rows = {name: (kind, ds) for name, kind, ds in local_tasks(gsm8k_copy)}
    assert rows["gsm8k"] == ("generate_until", "openai/gsm8k/main")
    assert "mmlu_abstract_algebra" not in rows  # no local copy of cais/mmlu here
