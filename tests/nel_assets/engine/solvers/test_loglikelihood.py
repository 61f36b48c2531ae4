"""The `loglikelihood` solver through nel's engine, against the real llama.cpp server
(stories260K): mmlu scored by option log-likelihoods and the perplexity benchmark, with the
values checked against direct echo + logprobs calls made here, lm-eval's way; a rerun sends
nothing; chat services and servers without prompt logprobs are refused in one line before
any item request."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from benchmarks import get_benchmark
from benchmarks.scoring.loglik import count_words, mcq_metrics
from tests.support import http_json, server_stats
from tests.support.cli import run_nel, summary_json

CONFIG = """\
services:
  llama: {{type: api, url: "{url}", model: stories260K, protocol: completions}}
benchmarks:
  - name: mmlu
    max_problems: 3
    solver: {{type: loglikelihood, config: {{metric: acc_norm}}}}
  - name: perplexity
    params: {{path: "{text}"}}
    solver: {{type: loglikelihood}}
output: {{dir: "{out}"}}
"""
DOCS = ["Once upon a time, there was a little dog named Max. Max liked to run in the park.",
        "Lily had a big red ball. She threw the ball to her friend Tom, and he laughed."]


def _echo(base: str, prompt: str) -> dict[str, Any]:
    status, _, data = http_json("POST", f"{base}/completions", {
        "model": "stories260K", "prompt": prompt, "echo": True, "logprobs": 1, "max_tokens": 1,
        "temperature": 0}, timeout=120)
    assert status == 200, data
    return data["choices"][0]["logprobs"]


def _direct_loglik(base: str, context: str, continuation: str) -> float:
    """lm-eval's way: the continuation's tokens are the full prompt's past the context's."""
    n_ctx = len(_echo(base, context)["tokens"]) - 1  # minus the generated token
    return sum(_echo(base, context + continuation)["token_logprobs"][n_ctx:-1])


def _rows(out: Path, bench: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / bench / "results.jsonl").read_text().splitlines()]


def _bundle(out: Path, bench: str) -> dict[str, Any]:
    (path,) = (out / bench).glob("eval-*.json")
    return json.loads(path.read_text())["bundle"]


@pytest.fixture(scope="module")
def run(llama_server: str, data_dir: Path, tmp_path_factory: pytest.TempPathFactory
        ) -> tuple[Path, Path, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("loglik")
    text = tmp / "docs.txt"
    text.write_text("\n\n".join(DOCS) + "\n", encoding="utf-8")
    cfg = tmp / "c.yaml"
    cfg.write_text(CONFIG.format(url=llama_server, text=text, out=tmp / "out"))
    env = {"NEL_DATA_DIR": str(data_dir)}
    summary = summary_json(run_nel("eval", "run", str(cfg), "--json", "--no-progress", env=env))
    return cfg, tmp / "out", summary


@pytest.mark.llama
def test_mcq_rewards_are_the_option_loglikelihoods_argmax(run, llama_server: str,
                                                          data_dir: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    _, out, summary = run
    monkeypatch.setenv("NEL_DATA_DIR", str(data_dir))
    env = get_benchmark("mmlu")
    rows = _rows(out, "mmlu")
    assert len(rows) == 3 and all(r["error"] is None for r in rows)
    for row in rows:
        d = row["scoring_details"]
        item = env.loglik_item(row["problem_idx"], "texts")
        # acc / acc_norm are the argmaxes of these log-likelihoods, raw and per character
        assert d["metrics"] == mcq_metrics(d["logprobs"], item.choices, item.gold)
        assert row["reward"] == d["metrics"]["acc_norm"] and d["primary"] == "acc_norm"
        assert d["expected"] == row["expected_answer"] == item.labels[item.gold]
        assert row["model_response"] == d["choice"]
    # the values are the server's: one item's options scored again here, directly
    row = rows[0]
    item = env.loglik_item(row["problem_idx"], "texts")
    direct = [_direct_loglik(llama_server, item.context, " " + c) for c in item.choices]
    assert row["scoring_details"]["logprobs"] == pytest.approx(direct, abs=1e-3)
    # the bundle reports every metric; the score is the chosen one's mean
    scoring = _bundle(out, "mmlu")["scoring"]
    assert scoring["primary"] == "acc_norm"
    for name in ("acc", "acc_norm", "acc_bytes"):
        assert scoring["metrics"][name]["mean"] == pytest.approx(
            sum(r["scoring_details"]["metrics"][name] for r in rows) / 3)
    (mmlu,) = [r for r in summary["results"] if r["benchmark"] == "mmlu"]
    assert mmlu["score"] == pytest.approx(scoring["metrics"]["acc_norm"]["mean"])


@pytest.mark.llama
def test_perplexity_equals_the_direct_computation(run, llama_server: str) -> None:
    _, out, _ = run
    # each document's tokens after the first (which has no context), read off the server
    ll = sum(sum(_echo(llama_server, d)["token_logprobs"][1:-1]) for d in DOCS)
    n_bytes = sum(len(d.encode()) for d in DOCS)
    got = _bundle(out, "perplexity")["scoring"]["perplexity"]
    assert got["bits_per_byte"] == pytest.approx(-ll / n_bytes / math.log(2), abs=1e-4)
    assert got["word_perplexity"] == pytest.approx(
        math.exp(-ll / sum(count_words(d) for d in DOCS)), rel=1e-4)
    rows = _rows(out, "perplexity")
    for row in rows:  # an item's reward: its probability per byte, 2 ** -bits_per_byte
        assert row["reward"] == pytest.approx(2 ** -row["scoring_details"]["bits_per_byte"])


@pytest.mark.llama
def test_a_rerun_sends_nothing(run, data_dir: Path) -> None:
    cfg, _, _ = run
    again = summary_json(run_nel("eval", "run", str(cfg), "--json", "--no-progress",
                                 env={"NEL_DATA_DIR": str(data_dir)}))
    assert again["requests_sent"] == 0, again


REFUSED = """\
services:
  m: {{type: api, url: "{url}", model: m{protocol}}}
benchmarks:
  - name: perplexity
{solver}output: {{dir: "{out}"}}
"""


@pytest.mark.parametrize(("protocol", "solver", "message"), [
    ("", "    solver: {type: loglikelihood}\n",
     "error: benchmark 'perplexity': service 'm' speaks chat_completions: log-likelihood "
     "scoring needs a completions endpoint"),
    (", protocol: completions", "",
     "error: benchmark 'perplexity' is scored by log-probabilities: add `solver: {type: "
     "loglikelihood}`"),
])
def test_config_refused_in_one_line(tmp_path: Path, reference_server: Callable[..., str],
                                    protocol: str, solver: str, message: str) -> None:
    url = reference_server()
    cfg = tmp_path / "c.yaml"
    cfg.write_text(REFUSED.format(url=url, protocol=protocol, solver=solver, out=tmp_path / "o"))
    for args in (["--dry-run"], ["--no-progress"]):
        proc = run_nel("eval", "run", str(cfg), *args)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith(message) and proc.stderr.count("\n") == 1, proc.stderr
    assert server_stats(url)["total_requests"] == 0


def test_server_without_prompt_logprobs_refused_before_any_item(
        tmp_path: Path, reference_server: Callable[..., str]) -> None:
    url = reference_server(no_logprobs=True)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(REFUSED.format(url=url, protocol=", protocol: completions",
                                  solver="    solver: {type: loglikelihood}\n",
                                  out=tmp_path / "o"))
    proc = run_nel("eval", "run", str(cfg), "--no-progress")
    assert proc.returncode != 0
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "returns no prompt log-probabilities" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert server_stats(url)["total_requests"] == 1  # the probe only: no item was sent

