"""Where the `checkpoint_trends` asset keeps its table, and reading it back.

Apart from nel_assets.engine.results.trends (which loads the statistics and numpy) so a run
that writes its reports can look for a trend table without loading them: an unchanged
rerun stays free of numpy and pyarrow.
"""

from __future__ import annotations

from typing import Any


def read_trend_rows(root: Any) -> list[dict[str, Any]] | None:
    """The `checkpoint_trends` rows an output directory holds, or None before the asset ran."""
    from pathlib import Path

    path = Path(root) / "checkpoint_trends" / "checkpoint_trends" / "trends.parquet"
    if not path.is_file():
        return None
    import pyarrow.parquet as pq

    import nel_resources.storage.arrow  # noqa: F401 (pyarrow without pandas)

    with pq.ParquetFile(path) as pf:
        return pf.read().to_pylist()
