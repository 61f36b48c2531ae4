"""Where the `checkpoint_trends` asset keeps its table, and reading it back.

Apart from nel_assets.engine.results.trends (which loads the statistics and numpy) so a run
that writes its reports can look for a trend table without loading them: an unchanged
rerun stays free of numpy and pyarrow.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def trends_dir(root: Any) -> Path:
    """Where the `checkpoint_trends` asset writes its table and plots under an output dir."""
    return Path(root) / "checkpoint_trends" / "checkpoint_trends"


def read_trend_rows(root: Any) -> list[dict[str, Any]] | None:
    """The `checkpoint_trends` rows an output directory holds, or None before the asset ran."""
    path = trends_dir(root) / "trends.parquet"
    if not path.is_file():
        return None
    import pyarrow.parquet as pq

    import nel_resources.storage.arrow  # noqa: F401 (pyarrow without pandas)

    with pq.ParquetFile(path) as pf:
        return pf.read().to_pylist()
