"""BYOB: a dataset, a prompt and a scorer become a benchmark that runs end to end."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from benchmarks import VerifyResult, get_benchmark
from benchmarks.byob import ScorerInput, answer_line, benchmark, exact_match, scorer
from benchmarks.errors import NelError
from tests.support.cli import run_nel, summary_json

ROWS = [
    {"country": "France", "capital": "Paris", "region": "europe"},
    {"country": "Japan", "capital": "Tokyo", "region": "asia"},
    {"country": "Kenya", "capital": "Nairobi", "region": "africa"},
]

MODULE = '''
from benchmarks.byob import ScorerInput, benchmark, exact_match, scorer

@benchmark(name="byob_capitals_cli", dataset="capitals.jsonl",
           prompt="What is the capital of {country}? Answer with the city only.",
           target_field="capital", category_field="region")
@scorer
def check(inp: ScorerInput) -> dict:
    return exact_match(inp)
'''


def test_byob_seed_and_verify_in_process() -> None:
    @benchmark(name="byob_caps_inproc", dataset=ROWS, prompt="Capital of {country}?",
               target_field="capital", category_field="region", system="Be brief.")
    @scorer
    def check(inp: ScorerInput) -> dict:
        return exact_match(inp)

    env = get_benchmark("byob_caps_inproc")
    assert len(env) == 3
    s = asyncio.run(env.seed(1))
    assert s.prompt == "Capital of Japan?" and s.expected_answer == "Tokyo"
    assert s.metadata["category"] == "asia" and s.system == "Be brief."
    ok = asyncio.run(env.verify("tokyo.", "Tokyo", **s.metadata))
    bad = asyncio.run(env.verify("Kyoto", "Tokyo", **s.metadata))
    empty = asyncio.run(env.verify("", "Tokyo", **s.metadata))
    assert (ok.reward, bad.reward, empty.reward) == (1.0, 0.0, 0.0)
    assert ok.scoring_details["method"]


def test_byob_scorer_return_types_and_async() -> None:
    @benchmark(name="byob_async", dataset=ROWS, prompt=lambda r: f"Q: {r['country']}",
               target_field="capital")
    @scorer
    async def check(inp: ScorerInput) -> VerifyResult:
        await asyncio.sleep(0)
        return VerifyResult(0.5, inp.response, {"method": "custom"})

    env = get_benchmark("byob_async")
    assert asyncio.run(env.seed(0)).prompt == "Q: France"
    assert asyncio.run(env.verify("x", "Paris")).reward == 0.5

    @benchmark(name="byob_line", dataset=ROWS, prompt="{country}", target_field="capital")
    @scorer
    def line(inp: ScorerInput) -> dict:
        return answer_line(inp)

    env2 = get_benchmark("byob_line")
    assert asyncio.run(env2.verify("thinking... Paris maybe\nAnswer: Paris", "Paris")).reward == 1.0
    assert asyncio.run(env2.verify("Answer: Lyon\nI said Paris before", "Paris")).reward == 0.0

    @benchmark(name="byob_bad", dataset=ROWS, prompt="{country}", target_field="capital")
    @scorer
    def bad(inp: ScorerInput) -> dict:
        return {"nothing": 1}

    with pytest.raises(NelError, match="correct"):
        asyncio.run(get_benchmark("byob_bad").verify("x", "y"))


def test_byob_errors_name_the_field() -> None:
    @benchmark(name="byob_missing_target", dataset=ROWS, prompt="{country}", target_field="answer")
    @scorer
    def check(inp: ScorerInput) -> bool:
        return True

    with pytest.raises(NelError, match="no field 'answer'"):
        get_benchmark("byob_missing_target")

    @benchmark(name="byob_bad_prompt", dataset=ROWS, prompt="{nation}", target_field="capital")
    @scorer
    def check2(inp: ScorerInput) -> bool:
        return True

    with pytest.raises(NelError, match="'nation'"):
        asyncio.run(get_benchmark("byob_bad_prompt").seed(0))


def test_byob_module_runs_end_to_end(tmp_path: Path, reference_server, server_stats) -> None:
    (tmp_path / "capitals.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    mod = tmp_path / "caps.py"
    mod.write_text(MODULE)
    url = reference_server(answers=[{"match": "France", "content": "Paris"},
                                    {"match": "Japan", "content": "Osaka"},
                                    {"match": "Kenya", "content": "nairobi"}])
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"services:\n  m:\n    url: {url}\nbenchmarks:\n  - name: byob_capitals_cli\n"
                   f"    module: {mod}\n    repeats: 2\noutput:\n  dir: {tmp_path / 'out'}\n")
    s = summary_json(run_nel("eval", "run", str(cfg), "--json", "--no-progress"))
    (res,) = s["results"]
    assert res["score"] == pytest.approx(2 / 3) and res["n_samples"] == 6
    bundle = json.loads((tmp_path / "out" / "byob_capitals_cli" / "bundle" / "model=m" / "bundle.json").read_text())
    assert bundle["per_category"]["asia"]["mean"] == 0.0
    assert bundle["per_category"]["europe"]["mean"] == 1.0
    assert server_stats(url)["by_endpoint"]["/v1/chat/completions"] == 6


def test_an_unknown_benchmark_parameter_is_one_line_everywhere(data_dir: Path) -> None:
    """A `--param` / `params:` typo names the parameter and what the benchmark takes, in
    Python and through `nel validate` and `nel serve` (which printed a TypeError traceback)."""
    with pytest.raises(NelError, match=r"benchmark 'gsm8k' has no parameter 'bogus' \(its parameters: "):
        get_benchmark("gsm8k", bogus=1)
    env = {"NEL_DATA_DIR": str(data_dir)}
    for cmd in (["validate", "-b", "gsm8k", "--param", "bogus=1"],
                ["serve", "-b", "gsm8k", "-p", "0", "--param", "bogus=1"]):
        p = run_nel(*cmd, env=env, timeout=120)
        assert p.returncode == 2, (cmd, p.stderr)
        assert "Traceback" not in p.stderr
        assert "has no parameter 'bogus'" in p.stderr.strip().splitlines()[-1], p.stderr
