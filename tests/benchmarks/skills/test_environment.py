"""A `skills://` environment from a Skills data directory: its defaults read from the
benchmark's `__init__.py` (never executed), prompt configs from the directory over nel's
copies, NeMo Evaluator's bare request on demand, and one-line errors for what is wrong."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from benchmarks import get_benchmark
from benchmarks.errors import DataMissingError, NelError
from benchmarks.skills import local_benchmarks

ROWS = [{"problem": "What is 2+3?", "expected_answer": 5, "subject": "arith"},
        {"problem": "What is 2*3?", "expected_answer": 6, "subject": "arith"}]


def _prepare(root: Path, name: str, split: str = "test", init: str | None = None) -> None:
    d = root / name
    d.mkdir(parents=True)
    (d / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    if init is not None:
        (d / "__init__.py").write_text(init)


def test_defaults_come_from_the_benchmarks_init_without_running_it(tmp_path: Path) -> None:
    _prepare(tmp_path, "my-math", split="hard", init=(
        'raise SystemExit("nel must not execute this")\n'
        'METRICS_TYPE = "math"\nEVAL_SPLIT = "hard"\n'
        'GENERATION_ARGS = "++prompt_config=custom/short ++inference.temperature=0"\n'))
    (tmp_path / "prompt" / "config" / "custom").mkdir(parents=True)
    (tmp_path / "prompt" / "config" / "custom" / "short.yaml").write_text(
        'system: "You are terse."\nuser: "Q: {problem} Put it in \\\\boxed{{}}."\n')
    env = get_benchmark("skills://my-math", data_dir=str(tmp_path))
    seed = asyncio.run(env.seed(1))
    assert (seed.prompt, seed.system) == ("Q: What is 2*3? Put it in \\boxed{}.", "You are terse.")
    assert seed.expected_answer == "6" and seed.metadata["category"] == "arith"
    ok = asyncio.run(env.verify("so \\boxed{6}", seed.expected_answer, **seed.metadata))
    bad = asyncio.run(env.verify("6", seed.expected_answer, **seed.metadata))
    assert (ok.reward, bad.reward) == (1.0, 0.0)
    assert local_benchmarks(str(tmp_path)) == [("my-math", "math", ["hard"])]


def test_known_benchmark_uses_skills_prompt_and_nemo_request_on_demand(tmp_path: Path) -> None:
    _prepare(tmp_path, "gsm8k")
    skills = asyncio.run(get_benchmark("skills://gsm8k", data_dir=str(tmp_path)).seed(0))
    assert skills.prompt.startswith("Solve the following math problem. Make sure to put the "
                                    "answer (and only answer) inside \\boxed{}.\n\nWhat is 2+3?")
    bare = get_benchmark("skills://gsm8k", data_dir=str(tmp_path), prompt_config="none")
    assert asyncio.run(bare.seed(0)).prompt == "What is 2+3?"  # what NeMo Evaluator 0.3.0 sends
    # the request is part of the fingerprint: switching it reruns the shards
    assert bare.fingerprint() != get_benchmark("skills://gsm8k", data_dir=str(tmp_path)).fingerprint()


def test_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(DataMissingError) as err:
        get_benchmark("skills://mmlu-pro", data_dir=str(tmp_path))
    msg = str(err.value)
    assert "\n" not in msg and f"put {tmp_path}/mmlu-pro/test.jsonl in place" in msg
    assert f"ns prepare_data mmlu-pro --data_dir={tmp_path}" in msg
    _prepare(tmp_path, "unknown-bench")
    with pytest.raises(NelError, match=r"nel grades Skills' math, multichoice, evalplus eval types"):
        get_benchmark("skills://unknown-bench", data_dir=str(tmp_path))
    env = get_benchmark("skills://unknown-bench", data_dir=str(tmp_path), eval_type="math",
                        prompt_template="{question}")
    with pytest.raises(NelError, match=r"fills \{question\}, which the prepared rows do not have"):
        asyncio.run(env.seed(0))
    with pytest.raises(NelError, match="write `skills://<name>`"):
        get_benchmark("skills://../etc", data_dir=str(tmp_path))
