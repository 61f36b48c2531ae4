"""Turn a (benchmark, model)'s rows into its bundle: scores with error bars, pass@k,
per-category scores, runtime stats and failure analysis."""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy, pyarrow and stats load when a bundle is built, not when a rerun
    import pyarrow as pa  # checks BUNDLE_VERSION

BUNDLE_VERSION = 2
"""2: the score carries one labelled interval (``ci_method``, ``ci_n_eff``, ``ci_note``,
``se_note``) instead of a CLT interval plus a separate ``wilson_low``/``wilson_high``."""

BUNDLE_COLUMNS = ("run_id", "model_id", "shard", "problem_idx", "repeat", "sample_id", "category",
                  "cluster", "response", "reward", "extracted", "details", "finish_reason",
                  "prompt_tokens", "completion_tokens", "reasoning_tokens", "model_ms", "total_ms",
                  "attempts", "error", "failure_category", "timestamp", "steps")
"""Every column `build_bundle` reads (and the exports' run-level documents): a bundle is
built from these alone, without the prompts and request messages that make up most of the
stored bytes."""

TEXT_COLUMNS = ("sample_id", "response", "steps")
"""The bundle columns read only for a few examples (failures) or streamed (tool steps):
`build_model_bundle` leaves them out of the table and brings them a batch at a time."""

DICTIONARY_COLUMNS = ("run_id", "model_id", "category", "cluster", "extracted", "details",
                      "finish_reason", "failure_category")
"""Bundle columns whose values repeat across rows: read from Parquet dictionary-encoded
(codes and one copy of each distinct value), not as a string per row."""

RowTexts = Callable[[tuple[str, ...]], Iterable["pa.RecordBatch"]]
"""`texts(columns)`: those columns of every row, in the table's row order, batch by batch."""


def _col(table: pa.Table, name: str) -> list[Any]:
    return table.column(name).to_pylist() if name in table.column_names else [None] * table.num_rows


def _floats(table: pa.Table, name: str) -> Any:
    """A numeric column as float64 with NaN for nulls, straight from Arrow (a Python list of
    100,000 values costs ~10 ms a column); the same values as `np.asarray(_col(...), float)`."""
    import numpy as np

    from nel_resources.storage.arrow import pa

    if name not in table.column_names:
        return np.full(table.num_rows, np.nan)
    col = table.column(name)
    if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
        return np.asarray([np.nan if v is None else v for v in col.to_pylist()], dtype=float)
    return np.asarray(col.to_numpy(), dtype=np.float64).reshape(-1)


def _ints(table: pa.Table, name: str) -> Any:
    """An integer column without nulls as int64 (anything else as `np.asarray(_col(...))`
    would give it, errors included)."""
    import numpy as np

    from nel_resources.storage.arrow import pa

    if name in table.column_names:
        col = table.column(name)
        if pa.types.is_integer(col.type) and col.null_count == 0:
            return np.asarray(col.to_numpy(), dtype=np.int64).reshape(-1)
    return np.asarray(_col(table, name), dtype=np.int64)


def _n_not_null(table: pa.Table, name: str) -> int:
    return table.num_rows - table.column(name).null_count if name in table.column_names else 0


def _distinct(table: pa.Table, name: str) -> list[Any]:
    """The column's distinct values (Arrow's hash kernel instead of a Python set pass)."""
    return table.column(name).unique().to_pylist() if name in table.column_names else [None]


def _counts(table: pa.Table, name: str) -> dict[str, int]:
    """`{str(value): count}` of the non-null values, in order of first appearance (as
    `Counter` over the column gives them)."""
    from nel_resources.storage.arrow import pa

    col = table.column(name) if name in table.column_names else None
    if col is not None and (pa.types.is_string(col.type) or (
            pa.types.is_dictionary(col.type) and pa.types.is_string(col.type.value_type))):
        # Arrow's value_counts keeps first-appearance order, like Counter.
        vc = col.value_counts()
        return {v: int(c) for v, c in zip(vc.field("values").to_pylist(), vc.field("counts").to_pylist(),
                                          strict=True) if v is not None}
    return dict(Counter(str(f) for f in _col(table, name) if f is not None))


def _value(table: pa.Table, name: str, i: int) -> Any:
    return table.column(name)[i].as_py() if name in table.column_names else None


def _f(x: Any) -> float | None:
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) else x


def runtime_stats(table: pa.Table) -> dict[str, Any]:
    """Latency percentiles, token throughput, finish reasons, retries and errors."""
    import numpy as np

    model_ms = _floats(table, "model_ms")
    total_ms = _floats(table, "total_ms")
    ok = (np.asarray(table.column("error").is_null().to_numpy(), dtype=bool).reshape(-1)
          if "error" in table.column_names else np.ones(table.num_rows, dtype=bool))
    comp = _floats(table, "completion_tokens")
    prompt = _floats(table, "prompt_tokens")
    reas = _floats(table, "reasoning_tokens")
    ts = _floats(table, "timestamp")
    attempts = _floats(table, "attempts")
    attempts[np.isnan(attempts) | (attempts == 0)] = 1.0  # `attempts or 1`
    lat = model_ms[ok & ~np.isnan(model_ms)]

    def pct(a: np.ndarray, q: float) -> float | None:
        return _f(np.percentile(a, q)) if a.size else None

    tok_rate = comp[ok] / np.maximum(model_ms[ok] / 1000.0, 1e-9)
    tok_rate = tok_rate[~np.isnan(tok_rate)]
    wall = None
    if ts.size and not np.all(np.isnan(ts)):
        start = np.nanmin(ts - np.nan_to_num(total_ms) / 1000.0)
        wall = _f(np.nanmax(ts) - start)
    total_comp = _f(np.nansum(comp)) if comp.size else 0.0
    return {
        "n_samples": int(table.num_rows),
        "n_errors": int((~ok).sum()),
        "latency_ms": {"mean": _f(lat.mean()) if lat.size else None, "p50": pct(lat, 50),
                       "p90": pct(lat, 90), "p99": pct(lat, 99), "max": _f(lat.max()) if lat.size else None},
        "total_ms_mean": _f(np.nanmean(total_ms)) if total_ms.size and not np.all(np.isnan(total_ms)) else None,
        "tokens": {"prompt_total": _f(np.nansum(prompt)) if prompt.size else 0.0,
                   "completion_total": total_comp,
                   "reasoning_total": _f(np.nansum(reas)) if reas.size else 0.0,
                   "completion_mean": _f(np.nanmean(comp)) if comp.size and not np.all(np.isnan(comp)) else None},
        "tokens_per_s_per_request": {"p50": pct(tok_rate, 50), "mean": _f(tok_rate.mean()) if tok_rate.size else None},
        "wall_time_s": wall,
        "samples_per_s": _f(table.num_rows / wall) if wall else None,
        "output_tokens_per_s": _f(total_comp / wall) if wall and total_comp is not None else None,
        "finish_reasons": _counts(table, "finish_reason"),
        "retries": int((attempts - 1).sum()),
    }


def failure_analysis(table: pa.Table, *, examples: int = 5, texts: RowTexts | None = None) -> dict[str, Any]:
    """Counts, rates and examples per failure category.

    `texts` brings the columns the table may lack (`sample_id`, `response`, `steps`) in
    the table's row order, a batch at a time (see `build_bundle`).
    """
    import numpy as np

    from nel_assets.engine.results.columns import encoded

    codes, cats = encoded(table, "failure_category", empty_is_null=True)
    n = max(1, table.num_rows)
    out: dict[str, Any] = {"n_samples": table.num_rows, "categories": {}}
    counts = np.bincount(codes[codes >= 0], minlength=len(cats))
    # by count, ties in order of first appearance (as `Counter(...).items()` sorted gives)
    order = sorted(range(len(cats)), key=lambda k: -int(counts[k]))
    picked = {k: np.flatnonzero(codes == k)[:examples].tolist() for k in order}
    values = _row_values(table, texts, ("sample_id", "error", "response"),
                         sorted(i for rows in picked.values() for i in rows))
    for k in order:
        # only the examples' other fields are read, not whole columns
        ex = [{"sample_id": values[i]["sample_id"], "error": values[i]["error"],
               "response": (values[i]["response"] or "")[:300] or None} for i in picked[k]]
        out["categories"][cats[k]] = {"count": int(counts[k]), "rate": int(counts[k]) / n, "examples": ex}
    out["n_failed_requests"] = _n_not_null(table, "error")
    out["n_scored"] = table.num_rows - out["n_failed_requests"]
    tools: dict[str, Any] = {}
    if "steps" in table.column_names or texts is None:
        if _n_not_null(table, "steps"):
            tool_failures(_col(table, "steps"), _col(table, "sample_id"), examples=examples, into=tools)
    else:  # streamed: one batch of steps texts at a time
        for batch in texts(("sample_id", "steps")):
            if "steps" in batch.schema.names and batch.column("steps").null_count < batch.num_rows:
                ids = (batch.column("sample_id").to_pylist() if "sample_id" in batch.schema.names
                       else [None] * batch.num_rows)
                tool_failures(batch.column("steps").to_pylist(), ids, examples=examples, into=tools)
    if tools:
        out["tools"] = tools
    return out


def _row_values(table: pa.Table, texts: RowTexts | None, names: tuple[str, ...],
                rows: list[int]) -> dict[int, dict[str, Any]]:
    """`{row: {name: value}}` for a few sorted row indices: from the table where it has the
    column, else from one streamed pass over `texts` (None where neither has it)."""
    out = {i: {c: _value(table, c, i) for c in names} for i in rows}
    missing = tuple(c for c in names if c not in table.column_names)
    if not rows or not missing or texts is None:
        return out
    start, want = 0, iter(rows)
    nxt = next(want, None)
    for batch in texts(missing):
        end = start + batch.num_rows
        while nxt is not None and nxt < end:
            for c in missing:
                if c in batch.schema.names:
                    out[nxt][c] = batch.column(c)[nxt - start].as_py()
            nxt = next(want, None)
        if nxt is None:
            break
        start = end
    return out


def tool_failures(steps: list[str | None], sample_ids: list[Any], *, examples: int = 5,
                  into: dict[str, Any] | None = None) -> dict[str, Any]:
    """Per tool of agentic rows: calls, failures and where they failed
    (`bash() failed on turn 3 with exit code 1`, with the sample id); `into` adds to the
    counts of earlier rows (a streamed column)."""
    import orjson

    out: dict[str, dict[str, Any]] = {} if into is None else into
    for sample, raw in zip(sample_ids, steps, strict=True):
        if not raw:
            continue
        for step in orjson.loads(raw):
            extra = step.get("extra") or {}
            if "observation" not in step or not extra.get("function_name"):
                continue
            t = out.setdefault(extra["function_name"], {"calls": 0, "failed": 0, "examples": []})
            t["calls"] += 1
            if extra.get("error") is None:
                continue
            t["failed"] += 1
            if len(t["examples"]) < examples:
                code = extra.get("exit_code")
                how = (f"with exit code {code}" if code not in (None, 0)
                       and str(extra["error"]).startswith("exit code") else f": {extra['error']}")
                sep = "" if how.startswith(":") else " "
                t["examples"].append({"sample_id": sample, "what": (
                    f"{extra['function_name']}() failed on turn {extra.get('turn')}{sep}{how}")})
    return out


def scoring_metrics(table: pa.Table) -> dict[str, Any]:
    """Secondary metrics from per-sample scoring details: each configured metric's mean
    (the default scorer's as `default`), which of them the headline `score` is (`primary`),
    the configured scorers' names, judge token totals, SimpleQA's aggregates,
    HealthBench's per-tag scores and log-likelihood scoring's corpus perplexities."""
    import numpy as np
    import orjson

    from nel_assets.engine.results.columns import encoded

    # Rows share their details text (a question's repeats): each distinct text is parsed
    # once, and its numbers count once per row that has it, in row order, through the codes
    # (no Python object per row: a 1,000,000-row column as a list was ~60 MB).
    codes, texts = encoded(table, "details", empty_is_null=True)
    per_text = np.bincount(codes[codes >= 0], minlength=len(texts))
    metric_at: dict[str, dict[int, float]] = {}  # {metric: {text code: value}}
    tag_at: dict[str, dict[int, float]] = {}
    grade_at: dict[int, str] = {}
    primaries: Counter[str] = Counter()
    scorer_names: dict[str, None] = {}
    judge_names: dict[str, None] = {}  # the judge metrics, for `judge:<name>` in NeMo's bundle
    judge_prompt = judge_completion = 0
    n_judged = 0
    for code, raw in enumerate(texts):
        d = orjson.loads(raw)
        if not d.get("metrics") and d.get("judge") is None:
            continue
        k = int(per_text[code])
        for name, v in (d.get("metrics") or {}).items():
            if v is not None:
                metric_at.setdefault(name, {})[code] = float(v)
        if d.get("primary"):
            primaries[str(d["primary"])] += k
        scorer_names.update(dict.fromkeys(d.get("scorers") or {}))
        j = d.get("judge")
        if isinstance(j, dict) and j.get("metric"):
            judge_names[str(j["metric"])] = None
        judge_names.update(dict.fromkeys(d.get("judges") or {}))
        if not isinstance(j, dict) or "kind" not in j:
            continue
        n_judged += k
        judge_prompt += k * int(j.get("prompt_tokens") or 0)
        judge_completion += k * int(j.get("completion_tokens") or 0)
        if j["kind"] == "simpleqa" and j.get("grade"):
            grade_at[code] = str(j["grade"])
        for tag, v in (j.get("tag_scores") or {}).items():
            if v is not None:
                tag_at.setdefault(tag, {})[code] = float(v)

    def per_row(at: dict[int, Any], dtype: Any = float) -> Any:
        """Row by row, in row order, the values of the rows whose text has one."""
        has = np.zeros(len(texts) + 1, dtype=bool)
        vals = np.zeros(len(texts) + 1, dtype=dtype)
        for c, v in at.items():
            has[c], vals[c] = True, v
        return vals[codes[has[codes]]]

    sums = {name: per_row(at) for name, at in metric_at.items()}
    tags = {name: per_row(at) for name, at in tag_at.items()}
    grades = per_row(grade_at, object).tolist() if grade_at else []
    out: dict[str, Any] = {}
    if sums:
        out["metrics"] = {k: {"mean": float(np.mean(v)), "n": len(v)} for k, v in sorted(sums.items())}
    if {"loglik", "n_bytes", "n_words"} <= sums.keys():
        # log-likelihood scoring of documents (perplexity): lm-eval's corpus metrics
        from benchmarks.scoring.loglik import perplexity_metrics

        out["perplexity"] = perplexity_metrics(float(np.sum(sums["loglik"])),
                                               float(np.sum(sums["n_words"])),
                                               float(np.sum(sums["n_bytes"])))
    if primaries:
        # the metric the rows' `reward` (and so `score`) is: one per run, by the config
        out["primary"] = primaries.most_common(1)[0][0]
    if scorer_names:
        out["scorers"] = sorted(scorer_names)
    if judge_names:
        out["judges"] = sorted(judge_names)
    if n_judged:
        out["judge"] = {"n_judged": n_judged, "prompt_tokens": judge_prompt,
                        "completion_tokens": judge_completion}
    if grades:
        from benchmarks.judges import simpleqa_metrics  # (benchmarks loads only when needed)

        out["simpleqa"] = simpleqa_metrics(grades)
    if tags:
        out["tag_scores"] = {k: {"mean": float(np.mean(v)), "n": len(v)} for k, v in sorted(tags.items())}
    return out


def build_bundle(table: pa.Table, *, benchmark: str, model: str, model_id: str | None = None,
                 extra: dict[str, Any] | None = None, texts: RowTexts | None = None) -> dict[str, Any]:
    """The bundle dict for one (benchmark, model).

    `table` holds `BUNDLE_COLUMNS` (or every column). `texts`, when given, brings the long
    texts (`TEXT_COLUMNS`) the table may lack, in its row order, a batch at a time: a
    million rows' responses are not held at once for the few examples that need them.

    The score's interval method is chosen here, once (``stats.score_summary``), and recorded
    as ``score.ci_method``; the CLI, reports, Dagster metadata and the ``bundles`` view all
    show these numbers (fractions 0–1 in files, metadata and the view; percent in the CLI and
    human-readable reports, labelled there).
    """

    from nel_assets.engine import stats
    from nel_assets.engine.results.columns import objects

    pid = _ints(table, "problem_idx")
    reward = _floats(table, "reward")
    has_cat = _n_not_null(table, "category") > 0
    has_cluster = _n_not_null(table, "cluster") > 0
    # object arrays sharing one str per distinct value (not a str per row)
    summary = stats.score_summary(
        pid, reward,
        category=objects(table, "category") if has_cat else None,
        cluster=objects(table, "cluster") if has_cluster else None,
        extracted=objects(table, "extracted"),
        repeat=_ints(table, "repeat"),
    )
    del pid, reward
    per_cat = summary.pop("per_category", None) or {}
    return {
        "bundle_version": BUNDLE_VERSION,
        "benchmark": benchmark,
        "model": model,
        "model_id": model_id or (_value(table, "model_id", 0) if table.num_rows else None),
        "run_ids": sorted({r for r in _distinct(table, "run_id") if r}),
        "shards": sorted({int(s) for s in _distinct(table, "shard") if s is not None}),
        "created_at": time.time(),
        "score": summary,
        "per_category": per_cat,
        "runtime": runtime_stats(table),
        "failures": failure_analysis(table, texts=texts),
        "scoring": scoring_metrics(table),
        **(extra or {}),
    }


def bundle_row(bundle: dict[str, Any]) -> pa.Table:
    """A one-row flat table of the headline numbers (for the DuckDB `bundles` view).

    Fractions 0–1, with the interval's ``ci_method`` and ``level`` so a query sees which
    interval it is reading.
    """
    from nel_resources.storage.arrow import pa

    s = bundle["score"]
    rt = bundle["runtime"]
    row = {
        "benchmark": bundle["benchmark"], "model": bundle["model"], "model_id": bundle.get("model_id"),
        "mean": s.get("mean"), "se": s.get("se"), "ci_low": s.get("ci_low"), "ci_high": s.get("ci_high"),
        "ci_method": s.get("ci_method"), "level": s.get("level"),
        "n_items": s.get("n_items"), "n_samples": s.get("n_samples"), "n_repeats": s.get("n_repeats"),
        "n_failed_samples": s.get("n_failed_samples"),
        "latency_p50_ms": rt["latency_ms"]["p50"], "latency_p99_ms": rt["latency_ms"]["p99"],
        "n_errors": rt["n_errors"], "created_at": bundle["created_at"],
    }
    schema = pa.schema([
        ("benchmark", pa.string()), ("model", pa.string()), ("model_id", pa.string()),
        ("mean", pa.float64()), ("se", pa.float64()), ("ci_low", pa.float64()), ("ci_high", pa.float64()),
        ("ci_method", pa.string()), ("level", pa.float64()),
        ("n_items", pa.int64()), ("n_samples", pa.int64()), ("n_repeats", pa.int64()),
        ("n_failed_samples", pa.int64()), ("latency_p50_ms", pa.float64()),
        ("latency_p99_ms", pa.float64()), ("n_errors", pa.int64()), ("created_at", pa.float64()),
    ])
    return pa.Table.from_pylist([row], schema=schema)
