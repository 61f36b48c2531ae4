"""The column-wise export paths give what the row-by-row definitions give: `nemo_lines`'
lines are `nemo_format.result_row` / `trajectory_row` serialized, `breakdowns` and
`runtime_block` equal plain row-by-row computations of the same numbers, on rows of every
shape (failed, agentic, with and without system prompt, reasoning, tokens, details)."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import numpy as np
import orjson
import pytest

from nel_assets.engine import stats
from nel_assets.engine.nemo import nemo_bundle as nb
from nel_assets.engine.nemo import nemo_format as nf
from nel_assets.engine.nemo.nemo_lines import LineBuilder
from nel_resources.storage.schema import rows_to_table
from tests.nel_assets.engine.nemo.test_export_streaming import _rows


def _shaped_rows(n: int, seed: int) -> list[dict[str, Any]]:
    """`_rows` plus the shapes those lack: messages ending in whitespace or empty, a
    system-only chat, prompts shared by repeats with differing answers."""
    rnd = random.Random(seed)
    rows = _rows(n, seed)
    for r in rows:
        r["messages"] = rnd.choice(['[{"role":"user","content":"q"}]', '[{"role": "user"} ]\n', "[]",
                                    None, '[{"role":"system","content":"s"},{"role":"user","content":"q"}]'])
        r["prompt"] = rnd.choice([r["prompt"], None, ""])
        r["model_id"] = rnd.choice(["mid", None, "other"])
        r["reasoning_tokens"] = rnd.choice([None, 3])
        r["model_ms"] = rnd.choice([r["model_ms"], None, float("nan")])
        r["attempts"] = rnd.choice([None, 0, 1, 3])
    return rows


def _row_by_row(row: dict[str, Any]) -> tuple[bytes, bytes]:
    t = nf.atif(row)
    opt = orjson.OPT_APPEND_NEWLINE
    return (orjson.dumps(nf.result_row(row, t), default=str, option=opt),
            orjson.dumps(nf.trajectory_row(row, t), default=str, option=opt))


@pytest.mark.parametrize("seed", [3, 4])
def test_lines_are_the_row_functions_lines(seed: int) -> None:
    rows = _shaped_rows(1500, seed)
    table = rows_to_table(rows)
    builder = LineBuilder()
    res: list[bytes] = []
    trj: list[bytes] = []
    for batch in table.to_batches(max_chunksize=113):
        r, t = builder.lines(batch)
        res += r
        trj += t
    stored = table.to_pylist()  # the rows as the store gives them back (typed, nulls filled)
    expected = [_row_by_row(r) for r in stored]
    assert len(res) == len(trj) == len(rows)
    assert res == [e[0] for e in expected]
    assert trj == [e[1] for e in expected]
    assert any(r["steps"] for r in stored) and any(r["error"] for r in stored)


def test_a_batch_without_the_newer_columns_reads_them_as_null() -> None:
    table = rows_to_table(_shaped_rows(200, 5))
    old = table.drop_columns(["turns", "tool_calls", "steps", "reasoning_tokens", "system"])
    res, trj = LineBuilder().lines(old)
    expected = [_row_by_row(r) for r in old.to_pylist()]
    assert res == [e[0] for e in expected] and trj == [e[1] for e in expected]


def _breakdowns_row_by_row(rows: list[dict[str, Any]], max_groups: int = 50) -> dict[str, Any]:
    """0.3.0's rule, one row at a time."""
    fields: dict[str, dict[str, list[float]]] = {}
    seen: Counter[str] = Counter()
    for r in rows:
        if r.get("reward") is None or not r.get("details"):
            return {}
        for k, v in orjson.loads(r["details"]).items():
            if isinstance(v, bool) or (isinstance(v, str) and len(v) < 100):
                seen[k] += 1
                fields.setdefault(k, {}).setdefault(str(v), []).append(float(r["reward"]))
    out: dict[str, Any] = {}
    for name, groups in fields.items():
        if seen[name] != len(rows) or not 2 <= len(groups) <= max_groups:
            continue
        out[name] = []
        for val in sorted(groups):
            ci = stats.mean_ci(np.asarray(groups[val]))
            low = ci["ci_low"] if ci["ci_low"] is not None else ci["mean"]
            high = ci["ci_high"] if ci["ci_high"] is not None else ci["mean"]
            out[name].append({"group": val, "n": len(groups[val]), "mean_reward": round(float(ci["mean"]), 4),
                              "ci_lower": round(float(low), 4), "ci_upper": round(float(high), 4)})
    return out


@pytest.mark.parametrize("max_groups", [2, 3, 50])
def test_breakdowns_equal_the_row_by_row_rule(max_groups: int) -> None:
    rnd = random.Random(max_groups)
    rows = []
    for i in range(3000):
        d: dict[str, Any] = {"method": rnd.choice(["a", "b", "c"]), "ok": rnd.random() < 0.5,
                             "answer": str(i % 40), "long": "x" * rnd.choice([5, 150]),
                             "num": rnd.randint(0, 3)}
        if i % 7:
            d["sometimes"] = rnd.choice(["p", "q"])
        rows.append({"reward": rnd.choice([0.0, 1.0, 0.5, rnd.random()]),
                     "details": orjson.dumps(d).decode()})
    expected = _breakdowns_row_by_row(rows, max_groups)
    assert nb.breakdowns(rows, max_groups=max_groups) == expected
    assert list(nb.breakdowns(rows, max_groups=max_groups)) == list(expected)
    assert "ok" in expected and "sometimes" not in expected and "long" not in expected
    assert ("method" in expected) == (max_groups >= 3)
    assert ("answer" in expected) == (max_groups >= 40)


def _runtime_row_by_row(rows: list[dict[str, Any]], elapsed: float) -> dict[str, Any]:
    ok = [r for r in rows if r.get("error") is None]
    lat = np.asarray([r["model_ms"] for r in ok if r.get("model_ms") is not None], dtype=float)

    def pct(q: float) -> float:
        return round(float(np.percentile(lat, q)), 2) if lat.size else 0.0

    prompt = sum(int(r.get("prompt_tokens") or 0) for r in ok)
    completion = sum(int(r.get("completion_tokens") or 0) for r in ok)
    return {"total_steps": len(rows), "total_tokens": prompt + completion, "total_prompt_tokens": prompt,
            "total_completion_tokens": completion,
            "total_reasoning_tokens": sum(int(r.get("reasoning_tokens") or 0) for r in ok),
            "elapsed_seconds": round(elapsed, 2),
            "latency_percentiles_ms": {"p50": pct(50), "p90": pct(90), "p99": pct(99)},
            "tokens_per_second": round((prompt + completion) / elapsed, 2),
            "steps_per_second": round(len(rows) / elapsed, 2), "model_errors": len(rows) - len(ok),
            "total_retries": sum(max(0, int(r.get("attempts") or 1) - 1) for r in rows),
            "finish_reason_counts": dict(Counter(r["finish_reason"] for r in ok if r.get("finish_reason"))),
            "wall_time_s": elapsed}


def test_runtime_block_equals_the_row_by_row_sums() -> None:
    rows = _shaped_rows(2000, 6)
    for r in rows[::5]:
        r["finish_reason"] = random.Random(len(r["sample_id"])).choice([None, "", "tool_calls"])
    for r in rows:  # NaN latencies would make both percentiles NaN: keep them real here
        if r["model_ms"] != r["model_ms"]:
            r["model_ms"] = 1.5
    table = rows_to_table(rows)
    stored = table.to_pylist()
    got = nb.runtime_block(table, {"wall_time_s": 12.5})
    assert orjson.dumps(got) == orjson.dumps(_runtime_row_by_row(stored, 12.5))
    assert got["model_errors"] > 0 and got["total_retries"] > 0 and len(got["finish_reason_counts"]) == 3
    # the columns a table may lack count as null
    thin = table.select(["problem_idx", "error"])
    assert orjson.dumps(nb.runtime_block(thin, {"wall_time_s": 12.5})) == orjson.dumps(
        _runtime_row_by_row(thin.to_pylist(), 12.5))


def _headline_row_by_row(rows: list[dict[str, Any]], score: dict[str, Any], n_repeats: int) -> dict[str, Any]:
    """pass@k over questions grouped row by row, in order of first appearance."""
    per_q: dict[int, list[float]] = {}
    for r in rows:
        if r.get("reward") is not None:
            per_q.setdefault(int(r["problem_idx"]), []).append(float(r["reward"]))
    flat = [x for v in per_q.values() for x in v]
    if not all(x in (0.0, 1.0) for x in flat):
        means = np.asarray([sum(v) / len(v) for v in per_q.values()])
        return {"mean_reward": {"value": round(float(score.get("mean") or means.mean()), 4),
                                **nb._ci(score), **nb._bootstrap(means), "ci_method": score.get("ci_method")}}
    n = np.asarray([len(v) for v in per_q.values()])
    c = np.asarray([sum(1 for x in v if x > 0) for v in per_q.values()])
    out: dict[str, Any] = {}
    for k in [1] + ([n_repeats] if n_repeats > 1 else []):
        keep = n >= k
        if keep.any():
            per = np.asarray(stats.pass_at_k(n[keep], c[keep], k), dtype=float)
            entry = score if k == 1 else None
            out[f"pass@{k}"] = {"value": round(float(per.mean()), 4), **nb._ci(entry), **nb._bootstrap(per),
                                "ci_method": (entry or {}).get("ci_method")}
    return out


@pytest.mark.parametrize("binary", [True, False])
def test_headline_scores_equal_the_row_by_row_grouping(binary: bool) -> None:
    rnd = random.Random(int(binary))
    rows = [{"problem_idx": q, "reward": None if rnd.random() < 0.05 else
             (rnd.choice([0.0, 1.0]) if binary else rnd.choice([0.0, 0.25, 1.0]))}
            for q in rnd.sample(range(900), 900) for _ in range(rnd.randint(1, 4))]
    rnd.shuffle(rows)  # questions first appear in no particular order
    score = {"ci_low": 0.1, "ci_high": 0.9, "ci_method": "wilson"}
    got = nb.headline_scores(rows, score, 4)
    assert orjson.dumps(got) == orjson.dumps(_headline_row_by_row(rows, score, 4))
    assert list(got) == (["pass@1", "pass@4"] if binary else ["mean_reward"])


def _scoring_row_by_row(details: list[str | None]) -> dict[str, Any]:
    """`bundle.scoring_metrics`' sums with every row's details parsed."""
    sums: dict[str, list[float]] = {}
    tags: dict[str, list[float]] = {}
    grades: list[str] = []
    judged = prompt = completion = 0
    for raw in details:
        d = orjson.loads(raw) if raw else {}
        for name, v in (d.get("metrics") or {}).items():
            if v is not None:
                sums.setdefault(name, []).append(float(v))
        j = d.get("judge")
        if isinstance(j, dict) and "kind" in j:
            judged += 1
            prompt += int(j.get("prompt_tokens") or 0)
            completion += int(j.get("completion_tokens") or 0)
            if j["kind"] == "simpleqa" and j.get("grade"):
                grades.append(str(j["grade"]))
            for tag, v in (j.get("tag_scores") or {}).items():
                if v is not None:
                    tags.setdefault(tag, []).append(float(v))
    return {"metrics": {k: {"mean": float(np.mean(v)), "n": len(v)} for k, v in sorted(sums.items())},
            "judge": {"n_judged": judged, "prompt_tokens": prompt, "completion_tokens": completion},
            "grades": len(grades),
            "tag_scores": {k: {"mean": float(np.mean(v)), "n": len(v)} for k, v in sorted(tags.items())}}


def test_scoring_metrics_skip_repeated_plain_details_and_count_the_rest() -> None:
    from nel_assets.engine.results.bundle import scoring_metrics

    rnd = random.Random(9)
    shapes = [lambda: '{"method":"a"}', lambda: None, lambda: "",
              lambda: orjson.dumps({"metrics": {"f1": rnd.random(), "em": rnd.choice([None, 1.0])}}).decode(),
              lambda: orjson.dumps({"judge": {"kind": "simpleqa", "grade": rnd.choice(["correct", "not_attempted", None]),
                                              "prompt_tokens": 7, "completion_tokens": 2}}).decode(),
              lambda: orjson.dumps({"judge": {"kind": "rubric", "tag_scores": {"t": rnd.random()}},
                                    "metrics": {}}).decode(),
              lambda: '{"judge":{"no_kind":1}}']
    details = [rnd.choice(shapes)() for _ in range(3000)]
    got = scoring_metrics(rows_to_table([{"details": d} for d in details]))
    want = _scoring_row_by_row(details)
    assert got["metrics"] == want["metrics"] and got["judge"] == want["judge"]
    assert got["tag_scores"] == want["tag_scores"]
    assert got["simpleqa"]["n"] == want["grades"] > 0
