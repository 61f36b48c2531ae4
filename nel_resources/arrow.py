"""pyarrow, imported without pandas and allocating with malloc.

pyarrow looks for pandas the first time almost any function runs (`pa.array`, `Table.from_*`,
`pq.read_table`, `pq.write_table`: its Python side checks whether the input is a pandas
object, and its C++ converter of Python sequences looks up pandas' NA values) and imports it
when it is installed. Both lookups happen once per process and remember the answer. nel never hands pyarrow a pandas object, and pandas costs ~45 MB of
RSS and ~0.3 s in the process of `nel eval run`. Importing pyarrow through this module answers
that first check with "no pandas", without importing it.

If pandas is imported later anyway, what explicitly needs it still works: `Table.to_pandas()`
and friends ask pyarrow's shim again and it imports pandas then. (Only pandas' NA/NaT
objects inside plain Python lists given to `pa.array` would no longer read as null; nel
never builds such lists.) Every nel module that uses
pyarrow imports it from here (`from nel_resources.arrow import pa`), so whichever runs first,
the check is already answered. No Dagster import here.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import pyarrow as pa

__all__ = ["memory_pool_backend", "pa", "pandas_probed_out"]


class _RefusePandas:
    """A meta-path finder that fails `import pandas` (installed only during the probe)."""

    @staticmethod
    def find_spec(name: str, path: Any = None, target: Any = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("pandas is not imported by nel's pyarrow use", name=name)
        return None


def _probe_without_pandas() -> bool:
    """Run pyarrow's one-time pandas check while `import pandas` fails; True when it did.

    A pandas already imported is left alone (nothing to save, and pyarrow must see it).
    """
    if "pandas" in sys.modules:
        return False
    shim = getattr(pa.lib, "_pandas_api", None)
    if shim is None:  # a pyarrow without the shim: nothing to answer
        return False
    # A finder that refuses pandas, first on the path for the length of the check: the shim
    # records "tried, not available" and never imports pandas on its own again. (A None entry
    # in sys.modules would not do: Cython's import hands the None back instead of failing.)
    sys.meta_path.insert(0, _RefusePandas)
    try:
        shim.have_pandas  # noqa: B018 (the property runs the Python-side check)
        pa.array([None])  # the C++ converter's own one-time pandas lookup
    finally:
        sys.meta_path.remove(_RefusePandas)
    return True


pandas_probed_out: bool = _probe_without_pandas()
"""Whether pyarrow's pandas check was answered here (False when pandas was already loaded)."""


def _use_system_allocator() -> str:
    """Allocate Arrow buffers with the C library's malloc, unless the user chose a pool.

    pyarrow's default pool (mimalloc) keeps what it once held: reading one shard's 12 MB
    table from Parquet left ~55 MB resident with it, ~15 MB with malloc, which hands freed
    memory back to later allocations of any kind (Python's too). nel's tables are small and
    built once, so the faster allocator buys nothing here. `ARROW_DEFAULT_MEMORY_POOL` set
    in the environment wins (pyarrow reads it itself).
    """
    if not os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        pa.set_memory_pool(pa.system_memory_pool())
    return pa.default_memory_pool().backend_name


memory_pool_backend: str = _use_system_allocator()
"""The allocator behind Arrow's buffers in this process (`system` unless the user chose)."""
