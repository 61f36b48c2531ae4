"""`nel query`: SQL over the result store's named DuckDB views."""

from __future__ import annotations

import argparse
import sys
from typing import Any

QUERY_EPILOG = """\
views: results (one row per sample), trajectories (with the chat messages),
bundles (one row per benchmark x model), comparisons (candidate vs baseline).

examples:
  # accuracy per category per checkpoint
  nel query -o out "SELECT model, category, avg(reward) AS acc, count(*) AS n
                    FROM results GROUP BY ALL ORDER BY model, category"
  # the 10 slowest samples
  nel query -o out "SELECT model, sample_id, model_ms FROM results
                    ORDER BY model_ms DESC LIMIT 10"
  # items that flipped between two checkpoints
  nel query -o out --format csv "SELECT a.sample_id, a.reward AS before, b.reward AS after
                    FROM results a JOIN results b USING (benchmark, sample_id)
                    WHERE a.model = 'step-100' AND b.model = 'step-200' AND a.reward <> b.reward"
"""


def register(sub: argparse._SubParsersAction) -> None:
    """Add `nel query`."""
    q = sub.add_parser("query", help="SQL over the results (DuckDB views)",
                       description="Run SQL over the named DuckDB views of an output directory. "
                       "Reads the Parquet files directly: safe while an evaluation runs.",
                       epilog=QUERY_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    q.add_argument("sql", nargs="?", help="the SQL to run")
    q.add_argument("--views", action="store_true", help="list the views and their columns")
    q.add_argument("-o", "--output-dir", default="./eval_results", help="output directory of a run")
    q.add_argument("-f", "--format", default="table", choices=["table", "csv", "json"])
    q.add_argument("--max-rows", type=int, default=200, help="rows shown as a table (csv/json: all)")
    q.set_defaults(func=_cmd_query)


def _cmd_query(args: argparse.Namespace) -> int:
    from pathlib import Path

    from benchmarks.errors import NelError
    from nel_resources.storage.views import VIEWS, available_views, connect

    root = Path(args.output_dir).expanduser()
    if not root.is_dir():
        raise NelError(f"no such output directory: {root} (give -o DIR)")
    con = connect(root)
    have = available_views(con)
    if args.views:
        for v in VIEWS:
            if v in have:
                cols = con.execute(f"DESCRIBE {v}").fetchall()
                print(f"{v}: " + ", ".join(f"{c[0]} {c[1]}" for c in cols))
            else:
                print(f"{v}: (no data yet)")
        return 0
    if not args.sql:
        raise NelError('give SQL to run, e.g. nel query "SELECT model, avg(reward) FROM results GROUP BY model", '
                       "or --views")
    import duckdb

    try:
        rel = con.execute(args.sql)
    except duckdb.Error as exc:
        hint = ""
        missing = [v for v in VIEWS if v not in have and v in args.sql]
        if missing:
            hint = f" (no data yet for view(s) {', '.join(missing)}; available: {', '.join(have) or 'none'})"
        raise NelError(f"query failed: {str(exc).splitlines()[0]}{hint}") from None
    cols = [d[0] for d in rel.description or []]
    rows = rel.fetchall()
    _print(cols, rows, args.format, args.max_rows)
    return 0


def _jsonable(v: Any) -> Any:
    if isinstance(v, float | int | str | bool) or v is None:
        return v
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return str(v)


def _print(cols: list[str], rows: list[tuple[Any, ...]], fmt: str, max_rows: int) -> None:
    if fmt == "json":
        import json

        json.dump([{c: _jsonable(v) for c, v in zip(cols, r, strict=True)} for r in rows], sys.stdout)
        sys.stdout.write("\n")
    elif fmt == "csv":
        import csv

        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(cols)
        for r in rows:
            w.writerow(["" if v is None else v for v in r])
    else:
        from rich.console import Console
        from rich.table import Table

        t = Table(show_lines=False)
        for c in cols:
            t.add_column(c)
        for r in rows[:max_rows]:
            t.add_row(*("" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v)) for v in r))
        con = Console()
        con.print(t)
        if len(rows) > max_rows:
            con.print(f"({len(rows)} rows, {max_rows} shown; use --format csv for all)")
