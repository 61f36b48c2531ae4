"""mmlu, mmlu_pro and gpqa in log-likelihood form, on the real data (`NEL_DATA_DIR`), and the
perplexity benchmark on the text nel ships."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import get_benchmark
from benchmarks.builtin.perplexity import SAMPLE, documents
from benchmarks.errors import BenchmarkConfigError, NelError
from benchmarks.scoring.loglik import RollingText


@pytest.mark.parametrize("name", ["mmlu", "mmlu_pro", "gpqa"])
def test_items_carry_the_options_and_the_seed_gold(name: str, data_dir: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEL_DATA_DIR", str(data_dir))
    env = get_benchmark(name)
    for idx in (0, len(env) // 2):
        import asyncio

        seed = asyncio.run(env.seed(idx))
        texts = env.loglik_item(idx, "texts")
        letters = env.loglik_item(idx, "letters")
        assert texts.labels[texts.gold] == seed.expected_answer == letters.choices[letters.gold]
        assert texts.context.endswith("\nAnswer:") and "Question: " in texts.context
        assert len(texts.choices) == len(letters.choices) >= 4
        # the letters style lists every option in the context
        assert all(f"\n{lab}. {opt}" in letters.context
                   for lab, opt in zip(letters.labels, texts.choices, strict=True))
    with pytest.raises(NelError, match="unknown log-likelihood style 'cloze'"):
        env.loglik_item(0, "cloze")


def test_perplexity_documents_are_the_shipped_paragraphs() -> None:
    env = get_benchmark("perplexity")
    docs = documents(SAMPLE.read_text(encoding="utf-8"))
    assert len(env) == len(docs) >= 4
    assert env.loglik_item(2) == RollingText(docs[2])


def test_perplexity_reads_a_given_file_and_refuses_a_missing_one(tmp_path: Path) -> None:
    f = tmp_path / "t.txt"
    f.write_text("first doc\nstill first\n\n\n  second  \n", encoding="utf-8")
    env = get_benchmark("perplexity", path=str(f))
    assert [env.loglik_item(i).text for i in range(len(env))] == ["first doc\nstill first",
                                                                 "second"]
    with pytest.raises(BenchmarkConfigError, match="cannot read path"):
        get_benchmark("perplexity", path=str(tmp_path / "nope.txt"))
