"""Items that flipped between a baseline and a candidate, queried from the Parquet store with DuckDB.

What a flip is, with repeats: each side's **per-item mean** reward over its scored samples
(failed requests, whose reward is null, are left out: a failed request is no wrong answer)
passes when it is above ``threshold`` (``nel compare --correct-above``, default 0). An item
flips *pass -> fail* when the baseline's mean passes and the candidate's does not, *fail ->
pass* the other way round. With one sample per item and 0/1 rewards that is "right became
wrong" and back; with K repeats and threshold 0 an item passes when any repeat earned credit,
and ``--correct-above 0.5`` makes it a majority. These are the flips ``nel compare`` counts
with the same threshold. Items scored on one side only are counted, never paired.

Every flip is counted; only the texts of the first ``limit`` flips per direction (by item)
are read, in a second query restricted to those items, so a page for two runs of 100,000
items stays small and fast. No Dagster import here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["DIRECTIONS", "BenchFlips", "FlipRow", "query_flips"]

#: Flip directions, regressions first.
DIRECTIONS = ("pass_to_fail", "fail_to_pass")
_TEXTS = ("prompt", "expected", "response", "extracted", "method")


@dataclass
class FlipRow:
    """One flipped item with both sides' texts (those of each side's first scored repeat)."""

    item: int
    category: str | None
    direction: str
    base_mean: float
    cand_mean: float
    base_n: int
    cand_n: int
    prompt: str | None = None
    expected: str | None = None
    base: dict[str, Any] = field(default_factory=dict)  # response, extracted, method, reward
    cand: dict[str, Any] = field(default_factory=dict)


@dataclass
class BenchFlips:
    """The flips of one benchmark: every count, and the rows to render."""

    benchmark: str
    threshold: float
    n_paired: int
    n_base_only: int
    n_cand_only: int
    counts: dict[str, int]  # direction -> every flipped item
    by_category: dict[str, dict[str, int]]  # category ("" for none) -> direction -> count
    rows: list[FlipRow]
    limit: int

    @property
    def truncated(self) -> bool:
        """True when some flips are counted but not listed."""
        return len(self.rows) < sum(self.counts.values())


def _files_sql(files: Sequence[Path]) -> str:
    quoted = ", ".join("'" + str(f).replace("'", "''") + "'" for f in files)
    return f"read_parquet([{quoted}], union_by_name = true)"


def _per_item(src: str) -> str:
    # one row per item: mean over scored samples (reward set, no error), their count, a category
    return (f"SELECT problem_idx AS item, avg(reward) AS mean, count(*) AS n, "
            f"min(category) AS category FROM {src} "
            f"WHERE reward IS NOT NULL AND error IS NULL GROUP BY problem_idx")


def query_flips(benchmark: str, base_files: Sequence[Path], cand_files: Sequence[Path], *,
                threshold: float = 0.0, limit: int = 2000, con: Any = None) -> BenchFlips:
    """The flips of one benchmark between two sets of shard Parquet files.

    Args:
        benchmark: The benchmark's name (recorded, not queried).
        base_files: The baseline's committed shard files (``ResultStore.committed_shard_files``).
        cand_files: The candidate's.
        threshold: An item passes when its mean reward is above this.
        limit: Flips listed with their texts, per direction (all are counted).
        con: A DuckDB connection to use (a new in-memory one by default).

    Returns:
        Counts and the first ``limit`` flips per direction, by item.
    """
    import duckdb

    if not base_files or not cand_files:
        raise ValueError(f"{benchmark}: no shard results on the {'baseline' if not base_files else 'candidate'} side")
    con = con or duckdb.connect()
    b, c = _files_sql(base_files), _files_sql(cand_files)
    t = float(threshold)
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE nel_pairs AS
        WITH b AS ({_per_item(b)}), c AS ({_per_item(c)})
        SELECT coalesce(b.item, c.item) AS item, coalesce(b.category, c.category) AS category,
               b.mean AS bm, c.mean AS cm, b.n AS bn, c.n AS cn,
               CASE WHEN b.mean IS NULL OR c.mean IS NULL THEN NULL
                    WHEN b.mean > {t} AND NOT c.mean > {t} THEN 'pass_to_fail'
                    WHEN NOT b.mean > {t} AND c.mean > {t} THEN 'fail_to_pass' END AS dir
        FROM b FULL OUTER JOIN c ON b.item = c.item""")
    n_paired, n_base_only, n_cand_only = con.execute(
        "SELECT count(*) FILTER (WHERE bm IS NOT NULL AND cm IS NOT NULL), "
        "count(*) FILTER (WHERE cm IS NULL), count(*) FILTER (WHERE bm IS NULL) FROM nel_pairs").fetchone()
    counts = dict.fromkeys(DIRECTIONS, 0)
    by_category: dict[str, dict[str, int]] = {}
    for cat, d, n in con.execute("SELECT coalesce(category, ''), dir, count(*) FROM nel_pairs "
                                 "WHERE dir IS NOT NULL GROUP BY ALL").fetchall():
        counts[d] += n
        by_category.setdefault(cat, dict.fromkeys(DIRECTIONS, 0))[d] = n
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE nel_shown AS
        SELECT * FROM nel_pairs WHERE dir IS NOT NULL
        QUALIFY row_number() OVER (PARTITION BY dir ORDER BY item) <= {int(limit)}""")
    rows = [FlipRow(item=int(r[0]), category=r[1], direction=r[2], base_mean=float(r[3]),
                    cand_mean=float(r[4]), base_n=int(r[5]), cand_n=int(r[6]))
            for r in con.execute("SELECT item, category, dir, bm, cm, bn, cn FROM nel_shown "
                                 "ORDER BY dir DESC, item").fetchall()]  # pass_to_fail first
    if rows:
        base_texts, cand_texts = _texts(con, b), _texts(con, c)
        for row in rows:
            bt, ct = base_texts.get(row.item, {}), cand_texts.get(row.item, {})
            row.prompt = bt.get("prompt") or ct.get("prompt")
            row.expected = bt.get("expected") if bt.get("expected") is not None else ct.get("expected")
            row.base = {k: bt.get(k) for k in ("response", "extracted", "method", "reward")}
            row.cand = {k: ct.get(k) for k in ("response", "extracted", "method", "reward")}
    return BenchFlips(benchmark=benchmark, threshold=t, n_paired=int(n_paired),
                      n_base_only=int(n_base_only), n_cand_only=int(n_cand_only), counts=counts,
                      by_category=dict(sorted(by_category.items())), rows=rows, limit=int(limit))


def _texts(con: Any, src: str) -> dict[int, dict[str, Any]]:
    """The texts of each shown item's first scored repeat (the sample the page shows)."""
    cols = ", ".join(_TEXTS)
    got = con.execute(f"""
        SELECT problem_idx, reward, {cols} FROM {src}
        WHERE problem_idx IN (SELECT item FROM nel_shown) AND reward IS NOT NULL AND error IS NULL
        QUALIFY row_number() OVER (PARTITION BY problem_idx ORDER BY repeat) = 1""").fetchall()
    return {int(r[0]): {"reward": r[1], **dict(zip(_TEXTS, r[2:], strict=True))} for r in got}
