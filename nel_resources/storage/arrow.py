"""pyarrow, imported without pandas and allocating with the C library's malloc.

Every nel module that uses pyarrow imports it from here (`from nel_resources.storage.arrow import
pa`), so whichever runs first, both settings below are made before pyarrow does anything.
They cut the peak RSS of a 10,552-sample `nel eval run` by ~70 MB. No Dagster import here.

* **No pandas.** pyarrow looks for pandas the first time almost any function runs
  (`pa.array`, `Table.from_*`, `pq.read_table`, `pq.write_table`: its Python side checks
  whether the input is a pandas object, its C++ converter of Python sequences looks up
  pandas' NA values) and imports it when installed: ~45 MB and ~0.3 s. nel never hands
  pyarrow a pandas object. Both lookups happen once per process and remember the answer, so
  they are made here while `import pandas` fails. If pandas is imported later anyway, what
  explicitly needs it still works (`Table.to_pandas()` asks pyarrow's shim again, which
  imports it then); only pandas' NA/NaT objects inside plain Python lists given to
  `pa.array` would no longer read as null, and nel never builds such lists.
* **malloc, not mimalloc.** pyarrow's default pool (mimalloc) keeps what it once held:
  reading one shard's 12 MB table from Parquet left ~55 MB resident, ~15 MB with malloc,
  which hands freed memory to later allocations of any kind (Python's too). nel's tables
  are small and built once, so the faster allocator buys nothing. The C++ default pool
  (the one Parquet's reader and writer use) reads `ARROW_DEFAULT_MEMORY_POOL` once, at its
  first use: the variable is set for that moment only (not passed on to child processes),
  and a value the user set wins.
"""

from __future__ import annotations

import os
import sys
from typing import Any

_POOL_VAR = "ARROW_DEFAULT_MEMORY_POOL"
_user_pool = os.environ.get(_POOL_VAR)
if not _user_pool:
    os.environ[_POOL_VAR] = "system"
try:
    import pyarrow as pa

    pa.default_memory_pool()  # the C++ default pool is chosen now, from the variable
finally:
    if not _user_pool:
        os.environ.pop(_POOL_VAR, None)

__all__ = ["large_blocks_returned", "memory_pool_backend", "pa", "pandas_probed_out"]


class _RefusePandas:
    """A meta-path finder that fails `import pandas` (installed only during the probe)."""

    @staticmethod
    def find_spec(name: str, path: Any = None, target: Any = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("pandas is not imported by nel's pyarrow use", name=name)
        return None


def _probe_without_pandas() -> bool:
    """Run pyarrow's one-time pandas lookups while `import pandas` fails; True when it did.

    A pandas already imported is left alone (nothing to save, and pyarrow must see it).
    """
    if "pandas" in sys.modules:
        return False
    shim = getattr(pa.lib, "_pandas_api", None)
    if shim is None:  # a pyarrow without the shim: nothing to answer
        return False
    # A finder that refuses pandas, first on the path for the length of the lookups. (A None
    # entry in sys.modules would not do: Cython's import hands the None back.)
    sys.meta_path.insert(0, _RefusePandas)
    try:
        shim.have_pandas  # noqa: B018 (the property runs the Python-side check)
        pa.array([None])  # the C++ converter's own lookup
    finally:
        sys.meta_path.remove(_RefusePandas)
    return True


pandas_probed_out: bool = _probe_without_pandas()
"""Whether pyarrow's pandas lookups were answered here (False when pandas was loaded)."""


def _use_system_allocator() -> str:
    """The pool behind Arrow buffers built from Python: malloc unless the user chose one.

    Needed only when pyarrow's C++ default pool was chosen before this module ran (pyarrow
    used elsewhere first); Parquet's reader and writer then keep that one.
    """
    if not _user_pool and pa.default_memory_pool().backend_name != "system":
        pa.set_memory_pool(pa.system_memory_pool())
    return pa.default_memory_pool().backend_name


memory_pool_backend: str = _use_system_allocator()
"""The allocator behind Arrow's buffers in this process (`system` unless the user chose)."""


_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
_MMAP_THRESHOLD = 256 * 1024


def _return_large_blocks() -> bool:
    """Give blocks of 256 KB and more their own mappings, returned to the system when freed.

    glibc raises its mmap threshold (up to 32 MB) each time such a block is freed, so later
    row-sized arrays (numpy's and, with the system pool, Arrow's) land on the heap and stay
    resident after they are freed: a bundle over 1,000,000 rows peaked ~10 MB higher. A
    fixed threshold stops that. Not on other C libraries, nor when the user set
    `MALLOC_MMAP_THRESHOLD_` (their choice wins). True when set here.
    """
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") or not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # musl or another libc: nothing to tune
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD))


large_blocks_returned: bool = _return_large_blocks()
"""Whether large blocks are mapped apart and returned when freed (`_return_large_blocks`)."""
