"""Named DuckDB views over the Parquet store: `results`, `trajectories`, `bundles`,
`comparisons`, `checkpoint_trends`. An in-memory connection reads the files directly, so queries never block
(or are blocked by) a running evaluation."""

from __future__ import annotations

from pathlib import Path

import duckdb

# view name -> (glob under the output dir, SELECT over `src`)
VIEWS: dict[str, tuple[str, str]] = {
    "results": ("*/shard_results/**/*.parquet", "SELECT * EXCLUDE (messages) FROM src"),
    "trajectories": (
        "*/shard_results/**/*.parquet",
        "SELECT run_id, benchmark, model, shard, sample_id, problem_idx, repeat, system, messages, "
        "response, reasoning, expected, extracted, reward, details, finish_reason, prompt_tokens, "
        "completion_tokens, model_ms, error FROM src",
    ),
    "bundles": ("*/bundle/**/*.parquet", "SELECT * FROM src"),
    "comparisons": ("*/comparison/**/*.parquet", "SELECT * FROM src"),
    "checkpoint_trends": ("checkpoint_trends/checkpoint_trends/*.parquet", "SELECT * FROM src"),
}


def connect(output_dir: str | Path, con: duckdb.DuckDBPyConnection | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the named views over `output_dir`.

    A view whose files do not exist yet is created empty-safe: it is simply absent, and
    `available_views` says which ones exist.
    """
    root = Path(output_dir).expanduser().resolve()
    con = con or duckdb.connect()
    for name, (glob, select) in VIEWS.items():
        if not any(root.glob(glob)):
            continue
        path = str(root / glob).replace("'", "''")
        src = f"read_parquet('{path}', hive_partitioning = true, union_by_name = true)"
        con.execute(f"CREATE OR REPLACE VIEW {name} AS {select.replace('FROM src', 'FROM ' + src)}")
    return con


def available_views(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Names of the nel views defined on `con`."""
    rows = con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()
    return sorted(r[0] for r in rows if r[0] in VIEWS)
