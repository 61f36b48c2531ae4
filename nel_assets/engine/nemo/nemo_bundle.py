"""NeMo Evaluator 0.3.0's `eval-<ts>-<bench>.json` document and its blocks: headline scores,
breakdowns, `runtime_stats.json` and `failure_analysis.json`, built from stored rows and nel's bundle.

The key lists and per-row lines are in `nemo_format`. No Dagster import.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:  # numpy/pyarrow load where rows are scored or written, not where artifacts are checked
    import numpy as np
    import pyarrow as pa

from nel_assets.engine.nemo.nemo_format import (
    FAILURE_CATEGORY_KEYS,
    FAILURE_KEYS,
    FORMAT_VERSION,
    _nel_version,
    config_hash,
    run_id,
)


def runtime_block(table: pa.Table, nel_runtime: dict[str, Any]) -> dict[str, Any]:
    """`runtime_stats.json`: 0.3.0's keys (latency over answered steps, tokens, throughput
    over the run's wall time), then nel's runtime stats.

    `table` holds at least `error`, `model_ms`, the token columns, `attempts` and
    `finish_reason` (a missing one counts as null); the sums come from Arrow's kernels,
    not a Python pass over the rows."""
    import numpy as np
    import pyarrow.compute as pc

    from nel_resources.storage.arrow import pa

    n = table.num_rows
    ok = (table.column("error").is_null() if "error" in table.column_names
          else pa.array(np.ones(n, dtype=bool)))
    n_ok = int(pc.sum(ok).as_py() or 0)

    def column(name: str) -> Any:
        return table.column(name) if name in table.column_names else None

    def ok_int_sum(name: str) -> int:
        """`sum(int(r.get(name) or 0) for r in ok)`"""
        col = column(name)
        if col is None:
            return 0
        if pa.types.is_integer(col.type):
            return int(pc.sum(col.filter(ok)).as_py() or 0)
        return sum(int(v or 0) for v in col.filter(ok).to_pylist())

    ms = column("model_ms")
    lat = (np.asarray(ms.filter(ok).drop_null().to_numpy(), dtype=float).reshape(-1)
           if ms is not None else np.zeros(0))
    elapsed = float(nel_runtime.get("wall_time_s") or 0.0)
    prompt_tokens, completion_tokens = ok_int_sum("prompt_tokens"), ok_int_sum("completion_tokens")
    total_tokens = prompt_tokens + completion_tokens

    def pct(q: float) -> float:
        return round(float(np.percentile(lat, q)), 2) if lat.size else 0.0

    attempts = column("attempts")
    if attempts is None:
        retries = 0
    elif pa.types.is_integer(attempts.type):
        # max(0, int(attempts or 1) - 1): null and 0 count as one attempt
        retries = int(pc.sum(pc.max_element_wise(pc.subtract(pc.fill_null(attempts, 1), 1), 0)).as_py() or 0)
    else:
        retries = sum(max(0, int(a or 1) - 1) for a in attempts.to_pylist())
    finish = column("finish_reason")
    reasons: dict[str, int] = {}
    if finish is not None:
        finish = finish.filter(ok)
        if pa.types.is_string(finish.type) or (
                pa.types.is_dictionary(finish.type) and pa.types.is_string(finish.type.value_type)):
            # value_counts keeps the order of first appearance, as Counter does
            vc = finish.value_counts()
            reasons = {v: int(c) for v, c in zip(vc.field("values").to_pylist(),
                                                  vc.field("counts").to_pylist(), strict=True) if v}
        else:
            reasons = dict(Counter(f for f in finish.to_pylist() if f))
    out: dict[str, Any] = {
        "total_steps": n, "total_tokens": total_tokens,
        "total_prompt_tokens": prompt_tokens,
        "total_completion_tokens": completion_tokens,
        "total_reasoning_tokens": ok_int_sum("reasoning_tokens"),
        "elapsed_seconds": round(elapsed, 2),
        "latency_percentiles_ms": {"p50": pct(50), "p90": pct(90), "p99": pct(99)},
        "tokens_per_second": round(total_tokens / elapsed, 2) if elapsed > 0 else 0.0,
        "steps_per_second": round(n / elapsed, 2) if elapsed > 0 else 0.0,
        "model_errors": n - n_ok,
        "total_retries": retries,
        "finish_reason_counts": reasons,
    }
    return {**out, **{k: v for k, v in nel_runtime.items() if k not in out}}


@dataclass
class StepColumns:
    """The columns the `eval-*.json` blocks read, as numpy arrays and codes: no dict per row
    (the exports of 1,000,000 rows held ~500 MB of row dicts before).

    `details` and `category` are `(codes, values)` as `columns.encoded` gives them; the
    failure categories are counted, with their first exemplars, when built."""

    n: int
    pid: np.ndarray
    scored: np.ndarray  # the reward is not null
    reward: np.ndarray  # float64, NaN where null
    details: tuple[np.ndarray, list[Any]]
    category: tuple[np.ndarray, list[Any]]
    failures: dict[str, tuple[int, list[dict[str, Any]]]]  # {category: (count, exemplars)}


def step_columns(rows: pa.Table | list[dict[str, Any]] | StepColumns) -> StepColumns:
    """`StepColumns` of a table (or of row dicts, or as given)."""
    import numpy as np

    from nel_assets.engine.results.columns import encoded, valid_mask
    from nel_resources.storage.arrow import pa

    if isinstance(rows, StepColumns):
        return rows
    table = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows)
    n = table.num_rows
    scored = valid_mask(table, "reward")
    reward = np.full(n, np.nan)
    if scored.any():
        reward[scored] = np.asarray(table.column("reward").drop_null().to_numpy(), dtype=float).reshape(-1)
    pid = (np.asarray(table.column("problem_idx").to_numpy(zero_copy_only=False)).reshape(-1)
           if "problem_idx" in table.column_names else np.zeros(n, dtype=np.int64))
    codes, cats = encoded(table, "failure_category", empty_is_null=True)
    failures: dict[str, tuple[int, list[dict[str, Any]]]] = {}
    for k, cat in enumerate(cats):
        where = np.flatnonzero(codes == k)
        failures[cat] = (int(where.size), [
            {"problem_idx": _at(table, "problem_idx", i), "repeat": _at(table, "repeat", i),
             "error": _at(table, "error", i) or cat} for i in where[:3].tolist()])
    return StepColumns(n, pid, scored, reward, encoded(table, "details", empty_is_null=True),
                       encoded(table, "category"), failures)


def _at(table: pa.Table, name: str, i: int) -> Any:
    return table.column(name)[i].as_py() if name in table.column_names else None


def failure_block(rows: pa.Table | list[dict[str, Any]] | StepColumns,
                  nel_failures: dict[str, Any]) -> dict[str, Any]:
    """`failure_analysis.json`: 0.3.0's report (count, percentage, three exemplars per
    category), with nel's rate, examples and request counts alongside."""
    cols = step_columns(rows)
    n = cols.n
    total = sum(count for count, _ in cols.failures.values())
    nel_cats = nel_failures.get("categories") or {}
    cats = {}
    for cat, (count, exemplars) in cols.failures.items():
        cats[cat] = {
            "count": count, "percentage": round(count / n, 4) if n else 0,
            "exemplars": exemplars,
            **{k: v for k, v in (nel_cats.get(cat) or {}).items() if k != "count"},
        }
    out = {"total_steps": n, "total_failures": total,
           "failure_rate": round(total / n, 4) if n else 0, "categories": cats}
    return {**out, **{k: v for k, v in nel_failures.items() if k not in out}}


def _ci(entry: dict[str, Any] | None) -> dict[str, Any]:
    if not entry or entry.get("ci_low") is None:
        return {}
    return {"ci_lower": round(float(entry["ci_low"]), 4), "ci_upper": round(float(entry["ci_high"]), 4)}


def _bootstrap(values: np.ndarray) -> dict[str, Any]:
    import numpy as np

    from nel_assets.engine import stats

    if values.size == 0:
        return {}
    # Resampled in blocks of ~250k values (4 MB with their indices) rather than all 1,000
    # resamples at once (21 MB for GSM8K's 1,319 items): the same seeded draws, so the same
    # interval, without the export's peak memory.
    b = stats.bootstrap_ci(np.mean, values, n_resamples=1000, seed=0, max_block=250_000)
    return {"bootstrap_ci_lower": round(float(b["ci_low"]), 4), "bootstrap_ci_upper": round(float(b["ci_high"]), 4)}


def headline_scores(rows: pa.Table | list[dict[str, Any]] | StepColumns, score: dict[str, Any], n_repeats: int) -> dict[str, Any]:
    """0.3.0's headline entries: `pass@1` (and `pass@<repeats>`) for 0/1 rewards, else
    `mean_reward`; each `{value, ci_lower, ci_upper, bootstrap_ci_lower, bootstrap_ci_upper}`.

    Values are nel's (failed requests left out); `ci_*` is nel's interval for the score
    (labelled by `ci_method`), `bootstrap_ci_*` a seeded bootstrap over questions.
    """
    import numpy as np

    from nel_assets.engine import stats

    cols = step_columns(rows)
    if not cols.scored.any():
        return {}
    flat = cols.reward[cols.scored]
    # Questions in order of first appearance (the order the bootstrap draws from), counted
    # by numpy, not grouped row by row.
    _, first, inv = np.unique(cols.pid[cols.scored].astype(np.int64), return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=np.intp)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    q = rank[inv.reshape(-1)]
    if not np.isin(flat, (0.0, 1.0)).all():
        # bincount adds each question's rewards in row order, as `sum` over its list did
        means = np.bincount(q, weights=flat, minlength=first.size) / np.bincount(q, minlength=first.size)
        return {"mean_reward": {"value": round(float(score.get("mean") or means.mean()), 4),
                                **_ci(score), **_bootstrap(means), "ci_method": score.get("ci_method")}}
    # Samples and correct samples per question
    n = np.bincount(q, minlength=first.size)
    c = np.bincount(q[flat > 0], minlength=first.size)
    out: dict[str, Any] = {}
    pak = score.get("pass_at_k") or {}
    for k in [1] + ([n_repeats] if n_repeats > 1 else []):
        keep = n >= k
        if not keep.any():
            continue
        per = np.asarray(stats.pass_at_k(n[keep], c[keep], k), dtype=float)
        entry = pak.get(str(k)) or pak.get(k) or (score if k == 1 else None)
        value = entry.get("mean") if entry else None
        out[f"pass@{k}"] = {"value": round(float(per.mean() if value is None else value), 4),
                            **_ci(entry), **_bootstrap(per),
                            "ci_method": (entry or {}).get("ci_method")}
    return out


def scorer_scores(rows: pa.Table | list[dict[str, Any]] | StepColumns, names: list[str],
                  prefix: str = "scorer") -> dict[str, Any]:
    """0.3.0's `scorer:<name>` entries beside the headline, one per configured scorer:
    `{value, ci_lower, ci_upper, correct, total}` over the scored samples (0.3.0 counts
    samples, not questions), the interval a seeded bootstrap as there. With `prefix="judge"`
    the same entries for the judge metrics (`judge:<name>`; 0.3.0 reports a judge only as
    the headline, nel under its name too, so every `scoring.metrics` entry is there)."""
    import numpy as np

    from nel_assets.engine import stats

    if not names:
        return {}
    cols = step_columns(rows)
    codes, texts = cols.details
    parsed = [orjson.loads(raw).get("metrics") or {} for raw in texts]  # a text once
    take = cols.scored & (codes >= 0)
    values: dict[str, Any] = {}
    for n in names:
        has = np.zeros(len(texts) + 1, dtype=bool)
        at = np.zeros(len(texts) + 1)
        for c, d in enumerate(parsed):
            if d.get(n) is not None:
                has[c], at[c] = True, float(d[n])
        values[n] = at[codes[take & has[codes]]]  # row order, as appended row by row
    out: dict[str, Any] = {}
    for n, v in values.items():
        if not v.size:
            continue
        arr = v
        b = stats.bootstrap_ci(np.mean, arr, n_resamples=1000, seed=0, max_block=250_000)
        out[f"{prefix}:{n}"] = {"value": round(float(arr.mean()), 4),
                              "ci_lower": round(float(b["ci_low"]), 4),
                              "ci_upper": round(float(b["ci_high"]), 4),
                              "correct": int((arr > 0).sum()), "total": int(arr.size)}
        if prefix == "judge":  # a graded score, not right/wrong: no count of "correct"
            del out[f"{prefix}:{n}"]["correct"]
    return out


def breakdowns(rows: pa.Table | list[dict[str, Any]] | StepColumns, max_groups: int = 50) -> dict[str, Any]:
    """`scores.breakdowns`: the mean reward per value of every scoring-details field that
    every row has as a short string or a bool, with 2 to `max_groups` distinct values (0.3.0's
    rule); `{field: [{group, n, mean_reward, ci_lower, ci_upper}]}` over scored rows."""
    import numpy as np

    from nel_assets.engine import stats

    # Rows share their details text (a question's repeats, a scorer's fixed fields): each
    # distinct text is parsed once, and a group's rewards are then picked out of the reward
    # array with one mask, in row order, rather than appended row by row.
    cols = step_columns(rows)
    code_arr, texts = cols.details
    if not (cols.scored.all() and (code_arr >= 0).all()):
        return {}  # a failed or detail-less row: no field is in every row
    codes_of = dict(zip(texts, range(len(texts)), strict=True))  # in order of first appearance
    n = cols.n
    per_code = np.bincount(code_arr, minlength=len(codes_of))  # rows per distinct text
    reward_arr = cols.reward
    # {field: {value: [codes]}} over the distinct texts in order of first appearance (so the
    # fields come out in the order their first row gives them), and how many rows have each
    # field. A field past `max_groups` values can no longer qualify: its groups are dropped
    # at once (an answer-valued field would otherwise hold a group per answer).
    fields: dict[str, dict[str, list[int]] | None] = {}
    seen: dict[str, int] = {}
    for raw, code in codes_of.items():
        for k, v in orjson.loads(raw).items():
            if isinstance(v, bool) or (isinstance(v, str) and len(v) < 100):
                seen[k] = seen.get(k, 0) + int(per_code[code])
                by_value = fields.setdefault(k, {})
                if by_value is not None:
                    by_value.setdefault(str(v), []).append(code)
                    if len(by_value) > max_groups:
                        fields[k] = None
    out: dict[str, Any] = {}
    for name, groups in fields.items():
        if groups is None or seen[name] != n or not 2 <= len(groups) <= max_groups:
            continue
        out[name] = []
        for val in sorted(groups):
            picked = reward_arr[np.isin(code_arr, groups[val])]
            ci = stats.mean_ci(picked)
            out[name].append({"group": val, "n": int(picked.size), "mean_reward": round(float(ci["mean"]), 4),
                              "ci_lower": round(float(ci["ci_low"] if ci["ci_low"] is not None else ci["mean"]), 4),
                              "ci_upper": round(float(ci["ci_high"] if ci["ci_high"] is not None else ci["mean"]), 4)})
    return out


def summary_block(rows: pa.Table | list[dict[str, Any]] | StepColumns) -> dict[str, Any]:
    """0.3.0's `scores.summary` over the scored rewards."""
    import numpy as np

    cols = step_columns(rows)
    arr = cols.reward[cols.scored]
    if arr.size == 0:
        return {"mean": 0.0, "std": 0.0, "min": 0.0, "max": 0.0, "median": 0.0, "n": 0}
    return {"mean": float(arr.mean()), "std": float(arr.std(ddof=1)) if arr.size > 1 else 0.0,
            "min": float(arr.min()), "max": float(arr.max()), "median": float(np.median(arr)),
            "n": int(arr.size)}


def categories_block(rows: pa.Table | list[dict[str, Any]] | StepColumns) -> dict[str, Any] | None:
    """`benchmark.categories`: `{category: {mean_reward, n}}` (n = steps), when rows have one."""
    import numpy as np

    cols = step_columns(rows)
    codes, values = cols.category
    if not values:
        return None
    keys = sorted({str(v) for v in values})
    key_of = np.asarray([keys.index(str(v)) for v in values] + [-1], dtype=np.intp)
    k = key_of[codes]
    has = k >= 0
    n = np.bincount(k[has], minlength=len(keys))
    hit = has & cols.scored
    scored = np.bincount(k[hit], minlength=len(keys))
    # bincount adds in row order, as `sum` over each group's list did
    sums = np.bincount(k[hit], weights=cols.reward[hit], minlength=len(keys))
    return {cat: {"mean_reward": round(float(sums[i]) / int(scored[i]), 4) if scored[i] else 0.0,
                  "n": int(n[i])} for i, cat in enumerate(keys)}


def bundle_document(table: pa.Table | list[dict[str, Any]] | StepColumns, bundle: dict[str, Any],
                    config: dict[str, Any], nel_config: dict[str, Any] | None = None, *,
                    runtime: dict[str, Any] | None = None) -> dict[str, Any]:
    """The `eval-<ts>-<bench>.json` document: 0.3.0's bundle with nel's keys added
    (`model`, `model_id`, `metrics`, `per_category`, `bundle` = nel's own bundle, `nel_config`).
    `runtime` is `runtime_block`'s result when the caller has it already."""
    import numpy as np

    from nel_resources.storage.arrow import pa

    rows = step_columns(table)
    score = bundle["score"]
    n_repeats = int(score.get("n_repeats") or config.get("repeats") or 1)
    scores: dict[str, Any] = headline_scores(rows, score, n_repeats)
    scoring = bundle.get("scoring") or {}
    scores.update(scorer_scores(rows, list(scoring.get("scorers") or [])))
    scores.update(scorer_scores(rows, list(scoring.get("judges") or []), prefix="judge"))
    scores["summary"] = summary_block(rows)
    if groups := breakdowns(rows):
        scores["breakdowns"] = groups
    if runtime is None:
        if isinstance(table, StepColumns):
            raise ValueError("bundle_document: pass `runtime` with step columns")
        runtime = runtime_block(table if isinstance(table, pa.Table) else pa.Table.from_pylist(table),
                                bundle["runtime"])
    scores["runtime"] = runtime
    failures = failure_block(rows, bundle["failures"])
    scores["failures"] = {k: failures[k] for k in FAILURE_KEYS}
    for k, v in scores["failures"]["categories"].items():
        scores["failures"]["categories"][k] = {kk: v[kk] for kk in FAILURE_CATEGORY_KEYS}
    bench: dict[str, Any] = {"name": bundle["benchmark"],
                             "samples": int(np.unique(rows.pid).size),
                             "repeats": n_repeats, "scores": scores}
    cats = categories_block(rows)
    if cats:
        bench["categories"] = cats
    created = float(bundle.get("created_at") or time.time())
    return {
        "run_id": run_id(bundle["benchmark"], created),
        "config_hash": config_hash(config),
        "sdk_version": FORMAT_VERSION,
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(created)),
        "config": config,
        "benchmark": bench,
        "n_results": rows.n,
        # nel's keys
        "generator": {"name": "nel", "version": _nel_version()},
        "model": bundle["model"], "model_id": bundle.get("model_id"),
        "metrics": {"score": score.get("mean"), "se": score.get("se"),
                    "ci_95": [score.get("ci_low"), score.get("ci_high")],
                    "pass_at_k": score.get("pass_at_k"), "n_items": score.get("n_items"),
                    "n_samples": score.get("n_samples"), "n_repeats": score.get("n_repeats"),
                    "n_failed_samples": score.get("n_failed_samples")},
        "per_category": bundle.get("per_category"),
        "bundle": bundle,
        "nel_config": nel_config or {},
    }
