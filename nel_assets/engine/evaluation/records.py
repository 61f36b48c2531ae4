"""The per-step record schema (defined in `nel_resources.storage.schema`, re-exported here)."""

from nel_resources.storage.schema import (
    COLUMNS,
    FAILURE_CATEGORIES,
    RESULT_SCHEMA,
    empty_results,
    rows_to_table,
)

__all__ = ["COLUMNS", "FAILURE_CATEGORIES", "RESULT_SCHEMA", "empty_results", "rows_to_table"]
