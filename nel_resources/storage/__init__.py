"""The result store: Hive-layout Parquet, the per-step record schema, pyarrow as nel imports it, and the DuckDB views."""
