"""`nel list` (sources, type and source per benchmark) and `nel validate` with a model.

The model check runs against the reference server: it answers the first two problems of a
20-problem BYOB benchmark wrong, so the expected PASS/FAIL lines are known exactly.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cli import run_nel

N = 20
BYOB = '''from benchmarks import ScorerInput, answer_line, benchmark, scorer


@benchmark(name="addition_check", dataset="{data}",
           prompt="{{question}}\\nPut your final answer after 'Answer:'.", target_field="answer")
@scorer
def check(sample: ScorerInput) -> dict:
    return answer_line(sample)
'''


@pytest.fixture
def byob(tmp_path: Path) -> Path:
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} + {i}?", "answer": str(2 * i)}) + "\n"
                            for i in range(N)))
    path = tmp_path / "addition.py"
    path.write_text(BYOB.format(data=data))
    return path


def _answers(wrong: int) -> list[dict[str, str]]:
    return [{"match": f"What is {i} + {i}?", "content": f"Answer: {2 * i + (1 if i < wrong else 0)}"}
            for i in range(N)]


# ----------------------------------------------------------------------------- list


def test_list_shows_type_and_source_by_section() -> None:
    p = run_nel("list")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert [line for line in lines if line.endswith(":") and not line.startswith(" ")] == [
        "Built-in benchmarks:", "NeMo Skills benchmarks:", "lm-eval-harness tasks:"]
    gsm = next(line for line in lines if line.strip().startswith("gsm8k "))
    assert "type=numeric" in gsm and "source=hf:openai/gsm8k" in gsm and gsm.endswith("nel eval run --bench gsm8k")
    simpleqa = next(line for line in lines if line.strip().startswith("simpleqa "))
    assert "type=judge" in simpleqa
    assert "not supported yet in nel" not in p.stdout  # skills:// and lm-eval:// both run
    assert "nel list -s lm-eval" in p.stdout  # `all` points at the lm-eval scan


@pytest.mark.parametrize(("source", "title"), [("builtin", "Built-in benchmarks:"),
                                               ("skills", "NeMo Skills benchmarks:"),
                                               ("lm-eval", "lm-eval-harness tasks:")])
def test_list_source_filters_sections(source: str, title: str) -> None:
    for flag in ("-s", "--source"):
        p = run_nel("list", flag, source)
        assert p.returncode == 0, p.stderr
        assert [line for line in p.stdout.splitlines() if line.endswith(":") and not line.startswith(" ")] == [title]


def test_list_bad_source_and_data_dir(tmp_path: Path) -> None:
    p = run_nel("list", "-s", "hub")
    assert p.returncode == 2 and "invalid choice: 'hub'" in p.stderr
    p = run_nel("list", "-s", "skills", "--data-dir", str(tmp_path))
    # the Skills data directory is read: nothing prepared there, and how to prepare it
    assert p.returncode == 0 and f"(none in {tmp_path} — run: ns prepare_data" in p.stdout
    p = run_nel("list", "-s", "builtin", "--data-dir", str(tmp_path))
    assert p.returncode == 0 and "used only by --source skills" in p.stderr


def test_list_import_shows_a_byob_file_as_its_source(byob: Path) -> None:
    p = run_nel("list", "-s", "builtin", "--import", str(byob))
    assert p.returncode == 0, p.stderr
    row = next(line for line in p.stdout.splitlines() if line.strip().startswith("addition_check "))
    assert "type=byob" in row and f"source={byob}" in row


# ----------------------------------------------------------------------------- validate


def test_validate_with_a_model_scores_its_answers(byob: Path, reference_server: Callable[..., str]) -> None:
    url = reference_server(answers=_answers(2))
    p = run_nel("validate", "-b", str(byob), "--model-url", url, "--model-id", "m", "-s", "4")
    assert p.returncode == 0, p.stderr  # as NeMo Evaluator: 0 once reported, whatever the score
    assert "2/4 correct" in p.stdout
    marks = [line.strip().split(":")[0] for line in p.stdout.splitlines() if line.strip().startswith("[")]
    assert marks == ["[FAIL] p0", "[FAIL] p1", "[PASS] p2", "[PASS] p3"]
    assert "expected='0' got='1'" in p.stdout
    # default --samples 5 (NeMo Evaluator's default); the model from NEMO_MODEL_URL/NEMO_MODEL_ID
    p = run_nel("validate", "--benchmark", f"{byob}:addition_check", "--json",
                env={"NEMO_MODEL_URL": url, "NEMO_MODEL_ID": "m"})
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert (doc["n"], doc["correct"]) == (5, 3)
    assert [r["reward"] for r in doc["results"]] == [0.0, 0.0, 1.0, 1.0, 1.0]


def test_validate_unreachable_model_reports_errors(byob: Path) -> None:
    from nel_resources.runtime.processes import free_port

    p = run_nel("validate", "-b", str(byob), "--model-url", f"http://127.0.0.1:{free_port()}/v1",
                "--model-id", "m", "-s", "2")
    assert p.returncode == 0 and "0/2 correct" in p.stdout and "error: " in p.stdout


@pytest.mark.parametrize("args", [["--model-url", "http://127.0.0.1:9/v1"], ["--model-id", "m"],
                                  ["-s", "-1"]])
def test_validate_usage_errors_are_one_line(byob: Path, args: list[str]) -> None:
    p = run_nel("validate", "-b", str(byob), *args, unset=("NEMO_MODEL_URL", "NEMO_MODEL_ID"))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "Traceback" not in p.stderr


def test_validate_byob_file_errors(tmp_path: Path, byob: Path) -> None:
    p = run_nel("validate", "-b", f"{byob}:nope")
    assert p.returncode == 2 and "does not register a benchmark 'nope'" in p.stderr
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    p = run_nel("validate", "-b", str(empty))
    assert p.returncode == 2 and "registers no benchmark" in p.stderr
