"""Cost and the budget cap end to end against the reference server (it reports `usage`
deterministically): the cap stops sending at the right request, exits 5 with one line, keeps
what was answered in the journal, and a rerun with a higher cap finishes the rest without
resending a sample; the bundle's cost is the hand-computed one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.datasets import load_file
from nel_assets.engine.evaluation.journal import Journal
from tests.support.cli import run_nel, summary_json
from tests.support.gsm8k import answers_for

N = 20
IN_PRICE, OUT_PRICE = 1000.0, 2000.0  # $ per million tokens: ~$0.08 a GSM8K sample here
CAP = 0.5


def _cost(row: dict) -> float:
    return (row["prompt_tokens"] * IN_PRICE + row["completion_tokens"] * OUT_PRICE) / 1e6


def _args(url: str, out: Path, cap: float, concurrency: int) -> list[str]:
    return ["eval", "run", "--bench", "gsm8k", "-m", str(N), "--model-url", url, "--model-id", "ref-model",
            "-o", str(out), "--json", "--no-progress",
            "-O", f"services.ref-model.pricing.input_per_million={IN_PRICE}",
            "-O", f"services.ref-model.pricing.output_per_million={OUT_PRICE}",
            "-O", f"services.ref-model.pricing.max_cost_usd={cap}",
            "-O", f"services.ref-model.max_concurrent={concurrency}"]


def _journal(out: Path) -> list[dict]:
    (path,) = (out / "gsm8k" / "_journal").rglob("journal-*.jsonl")
    return Journal.replay(path)


def _crossing(rows: list[dict]) -> int:
    """How many rows (in the order they were answered) it took to reach the cap."""
    spent = 0.0
    for k, r in enumerate(rows, 1):
        spent += _cost(r)
        if spent >= CAP:
            return k
    raise AssertionError(f"the journal's rows cost ${spent}, under the ${CAP} cap")


@pytest.fixture(scope="module")
def gsm8k_rows(data_dir: Path) -> list[dict]:
    return load_file(data_dir / "gsm8k" / "test.jsonl")[:N]


@pytest.mark.parametrize("concurrency", [1, 4])
def test_budget_cap_stops_then_a_rerun_finishes(tmp_path: Path, reference_server, server_stats,
                                                gsm8k_rows, data_dir: Path, concurrency: int) -> None:
    right = set(range(0, N, 2))
    url = reference_server(answers=answers_for(gsm8k_rows, right))
    out = tmp_path / "out"
    env = {"NEL_DATA_DIR": str(data_dir)}
    r = run_nel(*_args(url, out, CAP, concurrency), env=env)
    assert r.returncode == 5, r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    stopped = [ln for ln in r.stderr.splitlines() if ln.startswith("stopped:")]
    assert len(stopped) == 1 and "budget reached for service 'ref-model'" in stopped[0], r.stderr
    assert "pricing.max_cost_usd $0.5" in stopped[0] and "not sent, kept for a rerun" in stopped[0]
    assert not [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]

    rows = _journal(out)
    k = _crossing(rows)
    sent = server_stats(url)["by_endpoint"]["/v1/chat/completions"]
    assert sent == len(rows)  # every answer received is kept in the journal
    # The bound: after the answer that reached the cap, only requests already in flight
    # (at most max_concurrent - 1) were answered; with one slot, none.
    assert len(rows) - k <= concurrency - 1
    assert len(rows) < N
    assert not list((out / "gsm8k").glob("eval-*.json"))  # no bundle of a partial shard

    # A rerun with a higher cap sends only the rest.
    s = summary_json(run_nel(*_args(url, out, 100.0, concurrency), env=env))
    assert s["requests_sent"] == N - len(rows)
    assert server_stats(url)["by_endpoint"]["/v1/chat/completions"] == N  # nothing sent twice
    (ev,) = (out / "gsm8k").glob("eval-*.json")
    bundle = json.loads(ev.read_text())["bundle"]
    assert bundle["score"]["n_samples"] == N and bundle["complete"]
    # the bundle's cost covers both runs' answers: the first run's and the rest
    first = sum(_cost(r) for r in rows)
    assert first >= CAP and bundle["cost"]["total_cost"] > first


def test_cost_in_bundle_report_and_runtime_is_hand_computed(tmp_path: Path, reference_server,
                                                             gsm8k_rows, data_dir: Path) -> None:
    import pyarrow.parquet as pq

    right = {0, 3, 5}
    url = reference_server(answers=answers_for(gsm8k_rows, right))
    out = tmp_path / "out"
    s = summary_json(run_nel(*_args(url, out, 100.0, 4), env={"NEL_DATA_DIR": str(data_dir)}))
    assert s["requests_sent"] == N
    (res,) = s["results"]
    rows = pq.read_table(out / "gsm8k" / "shard_results" / "model=ref-model" / "shard=0" / "part-0.parquet").to_pylist()
    p_tok = sum(r["prompt_tokens"] for r in rows)
    c_tok = sum(r["completion_tokens"] for r in rows)
    assert p_tok > 0 and c_tok > 0  # the reference server reports usage
    total = p_tok * IN_PRICE / 1e6 + c_tok * OUT_PRICE / 1e6
    (ev,) = (out / "gsm8k").glob("eval-*.json")
    cost = json.loads(ev.read_text())["bundle"]["cost"]
    assert cost["prompt_cost"] == pytest.approx(p_tok * IN_PRICE / 1e6)
    assert cost["completion_cost"] == pytest.approx(c_tok * OUT_PRICE / 1e6)
    assert cost["total_cost"] == pytest.approx(total)
    assert cost["correct"] == len(right) and cost["per_correct"] == pytest.approx(total / len(right))
    assert res["cost_usd"] == pytest.approx(total)  # `nel eval run --json` says it too
    report = (out / "gsm8k" / "report" / "model=ref-model" / "report.md").read_text()
    assert f"{p_tok} prompt tokens at $1000/M, {c_tok} completion tokens at $2000/M" in report
    assert total > 1 and f"Cost: ${total:.2f} (" in report
    assert f"${total / len(right):.6f}".rstrip("0") + " per correct answer" in report
