"""Arrow columns as numpy codes and arrays, without a Python object per row.

A bundle over 1,000,000 rows read its string columns with `to_pylist` (a new `str` per row:
~60 MB a column) and the exports turned the rows into dicts (~500 MB). Here a string column
becomes integer codes over its distinct values, so the memory is 8 bytes a row plus one
object per distinct value, and a per-row Python object array, where a caller needs one,
shares those objects.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa


def encoded(table: pa.Table, name: str, *, empty_is_null: bool = False) -> tuple[np.ndarray, list[Any]]:
    """`(codes, values)` of a column: `values[codes[i]]` is row i's value, code -1 a null.

    `values` are the distinct non-null values in order of first appearance (the order a
    `dict` filled row by row has); a column the table lacks is all nulls. With
    `empty_is_null`, an empty string counts as a null too (where a caller tests `if not raw`).
    """
    import numpy as np
    import pyarrow.compute as pc

    from nel_resources.storage.arrow import pa

    n = table.num_rows
    if name not in table.column_names or n == 0:
        return np.full(n, -1, dtype=np.intp), []
    col = table.column(name)
    if not pa.types.is_dictionary(col.type):
        col = pc.dictionary_encode(col)
    col = col.unify_dictionaries()
    values = col.chunk(0).dictionary.to_pylist() if col.num_chunks else []
    # Filled in place, a chunk at a time: whole-column temporaries (a concatenation, a
    # sort for the first appearances) were ~40 MB at 1,000,000 rows, for 8 MB of codes.
    codes = np.empty(n, dtype=np.intp)
    pos = 0
    for ch in col.chunks:
        codes[pos:pos + len(ch)] = np.asarray(ch.indices.fill_null(-1).to_numpy()).reshape(-1)
        pos += len(ch)
    del col
    if empty_is_null and "" in values:
        codes[codes == values.index("")] = -1
    # Renumber by first appearance (a dictionary read from Parquet, or unified across files,
    # need not be in that order); values no row uses are dropped.
    first = np.full(len(values), n, dtype=np.int64)
    for start in range(0, n, _STEP):
        u, idx = np.unique(codes[start:start + _STEP], return_index=True)
        keep = u >= 0
        first[u[keep]] = np.minimum(first[u[keep]], start + idx[keep])
    order = np.argsort(first, kind="stable")[: int((first < n).sum())]
    remap = np.full(len(values) + 1, -1, dtype=np.intp)  # the last slot maps code -1 to -1
    remap[order] = np.arange(order.size, dtype=np.intp)
    for start in range(0, n, _STEP):
        codes[start:start + _STEP] = remap[codes[start:start + _STEP]]
    return codes, [values[i] for i in order.tolist()]


_STEP = 65536  # rows renumbered at a time


def objects(table: pa.Table, name: str) -> np.ndarray:
    """The column as a numpy object array (None for nulls), equal to
    `np.asarray(column.to_pylist(), dtype=object)`, with one Python object per distinct value."""
    import numpy as np

    codes, values = encoded(table, name)
    lookup = np.empty(len(values) + 1, dtype=object)
    lookup[: len(values)] = values
    return lookup[codes]  # code -1 picks the trailing None


def valid_mask(table: pa.Table, name: str) -> np.ndarray:
    """Which rows hold a value (not null) in the column; all False when the table lacks it."""
    import numpy as np

    if name not in table.column_names:
        return np.zeros(table.num_rows, dtype=bool)
    return np.asarray(table.column(name).is_valid().to_numpy(zero_copy_only=False), dtype=bool).reshape(-1)
