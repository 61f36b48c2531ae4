"""Checkpoint series from a result store: families, step order, paired deltas by hand, alarm."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from nel_assets.engine.results.trends import checkpoint_families, checkpoint_trends, series_markdown
from nel_resources.storage.arrow import pa
from nel_resources.storage.schema import empty_results
from nel_resources.storage.store import ResultStore

N = 12


def _put(store: ResultStore, model: str, rewards: list[float | None]) -> None:
    """One committed shard and a bundle whose score is the plain mean (enough for the series)."""
    rows = [{"benchmark": "gsm8k", "model": model, "shard": 0, "problem_idx": i, "repeat": 0,
             "reward": 0.0 if r is None else r, "error": None if r is not None else "timeout"}
            for i, r in enumerate(rewards)]
    table = pa.Table.from_pylist(rows, schema=empty_results().schema)  # the store's real schema
    store.write_shard("gsm8k", model, 0, table, {"fingerprint": model})
    valid = [r for r in rewards if r is not None]
    mean = sum(valid) / len(valid)
    store.write_bundle("gsm8k", model, {"score": {"mean": mean, "ci_low": mean - 0.1, "ci_high": mean + 0.1,
                                                  "n_items": len(valid)}}, pa.table({"x": [1]}))


def test_families_group_by_name_and_order_by_step() -> None:
    fams = checkpoint_families(["llama-step-300", "llama-step-20", "qwen-step-5", "base", "step-7"])
    assert fams == {"": [(7, "step-7")], "llama": [(20, "llama-step-20"), (300, "llama-step-300")],
                    "qwen": [(5, "qwen-step-5")]}
    assert checkpoint_families(["run-ep10", "run-ep9", "ep-x"], r"ep(\d+)") == {"run": [(9, "run-ep9"),
                                                                                      (10, "run-ep10")]}


def test_series_deltas_by_hand_and_alarm_at_the_drop(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    right = [1.0] * 10 + [0.0] * 2
    series = {
        100: right,
        # one item flips each way: delta 0, paired SE = sqrt(2/11)/sqrt(12)
        200: [0.0] + [1.0] * 9 + [1.0] + [0.0],
        300: right,
        # a failed sample is left out of the pair (11 shared items), not scored 0
        400: [None, *right[1:]],
        # the planted drop: 8 items right at 400 are wrong at 500
        500: [1.0, 1.0] + [0.0] * 8 + [0.0, 0.0],
        600: [1.0, 1.0] + [0.0] * 8 + [0.0, 0.0],
    }
    for step, rewards in series.items():
        _put(store, f"llama-step-{step}", rewards)
    _put(store, "baseline", right)  # not a checkpoint: not in any series
    (s,) = checkpoint_trends(store, [("gsm8k", "gsm8k")])
    assert (s.benchmark, s.family) == ("gsm8k", "llama")
    assert [r["step"] for r in s.rows] == [100, 200, 300, 400, 500, 600]
    r = {row["step"]: row for row in s.rows}
    assert r[100]["delta"] is None and r[100]["prev_step"] is None
    assert r[200]["delta"] == pytest.approx(0.0) and r[200]["n_shared"] == 12
    assert r[200]["delta_se"] == pytest.approx(math.sqrt(2 / 11) / math.sqrt(12))
    assert r[400]["n_shared"] == 11 and r[400]["delta"] == pytest.approx(0.0)
    # 500 vs 400 on the 11 shared items (1..11): items 2..9 drop by 1 -> delta -8/11
    d = [0.0] + [-1.0] * 8 + [0.0, 0.0]
    mean = sum(d) / 11
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / 10)
    assert r[500]["delta"] == pytest.approx(-8 / 11) and r[500]["delta_se"] == pytest.approx(sd / math.sqrt(11))
    assert [r[k]["alarm"] for k in sorted(r)] == [False, False, False, False, True, False]
    assert s.first_alarm_step == 500 and all(row["first_alarm_step"] == 500 for row in s.rows)
    # step noise: RMS of the paired SEs, the same on every row
    ses = [row["delta_se"] for row in s.rows if row["delta_se"] is not None]
    assert s.step_noise == pytest.approx(math.sqrt(sum(x * x for x in ses) / len(ses)))
    assert r[500]["score"] == pytest.approx(2 / 12) and r[500]["n"] == 12
    assert "**ALARM**" in series_markdown(s)


def test_one_checkpoint_is_a_row_without_delta(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    _put(store, "step-5", [1.0, 0.0])
    (s,) = checkpoint_trends(store, [("gsm8k", "gsm8k")])
    assert s.family == "" and len(s.rows) == 1 and s.rows[0]["alarm"] is None and "one checkpoint" in s.note
