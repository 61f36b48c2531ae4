"""Schema of the per-step record: one row per (problem, repeat), the unit every store and
metric reads.

Rows are plain dicts on the hot path (building a dataclass per sample costs more than the
HTTP request parsing); `RESULT_SCHEMA` fixes the Parquet column types.
"""

from __future__ import annotations

from typing import Any

from nel_resources.storage.arrow import pa

FAILURE_CATEGORIES = (
    "refusal",
    "format_error",
    "timeout",
    "rate_limit",
    "empty_response",
    "auth",
    "judge_error",
    "error",
    "max_turns_exhausted",
    "tool_error",
)
"""Failure categories. `refusal`, `format_error` and `empty_response` are scored rows
(reward 0); `timeout`, `rate_limit`, `auth`, `judge_error`, `error` and, for agentic solvers,
`max_turns_exhausted` and `tool_error` (a tool source could not serve the sample at all; one
failed tool call is not one) are failures (reward null): they never count as a wrong answer."""

RESULT_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("benchmark", pa.string()),
        ("model", pa.string()),  # partition key (slug)
        ("model_id", pa.string()),  # the served model name
        ("shard", pa.int32()),
        ("problem_idx", pa.int64()),
        ("repeat", pa.int32()),
        ("sample_id", pa.string()),  # "<problem_idx>:<repeat>"
        ("category", pa.string()),
        ("cluster", pa.string()),
        ("prompt", pa.string()),
        ("system", pa.string()),
        ("messages", pa.string()),  # JSON: the full request messages (trajectory input)
        ("expected", pa.string()),
        ("response", pa.string()),  # answer text (reasoning stripped)
        ("reasoning", pa.string()),  # reasoning_content or <think> text
        ("reward", pa.float64()),  # null when the request failed
        ("extracted", pa.string()),
        ("method", pa.string()),  # extraction rule that produced `extracted`
        ("details", pa.string()),  # JSON scoring_details + verify metadata
        ("metadata", pa.string()),  # JSON seed metadata
        ("finish_reason", pa.string()),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("reasoning_tokens", pa.int64()),
        ("seed_ms", pa.float64()),
        ("model_ms", pa.float64()),
        ("verify_ms", pa.float64()),
        ("total_ms", pa.float64()),
        ("attempts", pa.int32()),
        ("error", pa.string()),
        ("failure_category", pa.string()),
        ("timestamp", pa.float64()),  # unix seconds when the sample finished
        # Agentic solvers (tool_calling, ...); null for the simple solver. Last, so stores
        # written before them read unchanged (their rows have these as null).
        ("turns", pa.int32()),  # model calls the solver made
        ("tool_calls", pa.int32()),  # tool calls the model made
        ("steps", pa.string()),  # JSON: the ATIF steps (model turns and tool results)
        # JSON list of the images sent with the prompt, by name (`nel-image:<sha256>`; the
        # bytes are in the dataset's image folder); null without images
        ("images", pa.string()),
    ]
)

COLUMNS: tuple[str, ...] = tuple(RESULT_SCHEMA.names)


def empty_results() -> pa.Table:
    """An empty results table with the full schema."""
    return RESULT_SCHEMA.empty_table()


def rows_to_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Build a typed Arrow table from record dicts (missing keys become null)."""
    cols = {name: [r.get(name) for r in rows] for name in COLUMNS}
    return pa.Table.from_pydict(cols, schema=RESULT_SCHEMA)


class TableBuilder:
    """Rows in, one typed Arrow table out, without holding every row as a dict.

    Rows are converted `batch_rows` at a time into record batches of `RESULT_SCHEMA` and the
    dicts dropped: a 10,552-sample shard's rows were 24 MB of dicts, its table is 12 MB of
    Arrow buffers. `table()` returns them sorted by (problem_idx, repeat), the order
    `run_shard` returns rows in, with exactly the values `rows_to_table` gives.
    """

    def __init__(self, batch_rows: int = 1024) -> None:
        self._batch_rows = batch_rows
        self._pending: list[dict[str, Any]] = []
        self._batches: list[pa.RecordBatch] = []

    def add(self, row: dict[str, Any]) -> None:
        """Take one row (a batch is converted once `batch_rows` are waiting)."""
        self._pending.append(row)
        if len(self._pending) >= self._batch_rows:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            cols = {name: [r.get(name) for r in self._pending] for name in COLUMNS}
            self._batches.append(pa.RecordBatch.from_pydict(cols, schema=RESULT_SCHEMA))
            self._pending = []

    def table(self) -> pa.Table:
        """Every row taken so far, sorted by (problem_idx, repeat); the builder is emptied."""
        self._flush()
        table = pa.Table.from_batches(self._batches, schema=RESULT_SCHEMA)
        self._batches = []
        keys = list(zip(table.column("problem_idx").to_pylist(), table.column("repeat").to_pylist(),
                        strict=True))
        order = sorted(range(len(keys)), key=keys.__getitem__)
        in_order = order == list(range(len(keys)))
        del keys
        # Sorted (or made contiguous) a column at a time, each old column freed once its new
        # copy exists: the peak is the table plus its largest column, not two tables and more
        # (`table.take` held them; the tail of a 42,208-sample run peaked there).
        indices = None if in_order else pa.array(order, type=pa.int64())
        del order
        sorted_cols = []
        while table.num_columns:
            # Made contiguous first and the chunks freed before the take: a take from chunks
            # concatenates them itself and holds that copy and the chunks at once.
            col = table.column(0).combine_chunks()
            table = table.remove_column(0)
            sorted_cols.append(col if indices is None else col.take(indices))
            del col
        return pa.Table.from_arrays(sorted_cols, schema=RESULT_SCHEMA)

