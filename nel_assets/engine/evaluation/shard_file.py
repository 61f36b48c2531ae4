"""A shard's rows on their way to its Parquet file: spilled as they come
(nel_resources.storage.spill), written sorted beside the shard file, then summarised from
that file a batch at a time (data version, errors, rewards) before the commit."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson


def file_batches(path: Path) -> Iterator[Any]:
    """The summary's columns of a written shard file, 4,096 rows at a time."""
    import pyarrow.parquet as pq

    with pq.ParquetFile(path) as pf:
        yield from pf.iter_batches(batch_size=4096, use_threads=False, columns=[
            "sample_id", "reward", "response", "error", "failure_category"])


def shard_summary(batches: Iterable[Any], needs_retry: Callable[[dict[str, Any]], bool]
                   ) -> tuple[str, int, int, int, float, int]:
    """(data version, rows, errors, failed samples to retry, reward sum, rewards) of a shard.

    Read a batch of rows at a time: the whole shard's ids, responses and rewards as Python
    lists were ~8 MB at 42,208 samples, growing with the shard. The data version hashes the
    same bytes as `orjson.dumps` of every row's (sample_id, reward, response, error).
    """
    h = hashlib.sha256(b"[")
    n_rows = n_err = n_failed = n_rewards = 0
    reward_sum: float = 0
    first = True
    for batch in batches:
        n_rows += batch.num_rows
        ids, rewards, responses, errors, cats = (batch.column(c).to_pylist() for c in (
            "sample_id", "reward", "response", "error", "failure_category"))
        if batch.num_rows:
            h.update((b"" if first else b",") + orjson.dumps(list(zip(ids, rewards, responses, errors,
                                                                       strict=True)))[1:-1])
            first = False
        for x in rewards:
            if x is not None:
                reward_sum += x  # in row order, as `sum` over the column did
                n_rewards += 1
        n_err += sum(1 for e in errors if e is not None)
        n_failed += sum(1 for e, f in zip(errors, cats, strict=True)
                        if needs_retry({"error": e, "failure_category": f}))
    h.update(b"]")
    return h.hexdigest()[:16], n_rows, n_err, n_failed, reward_sum, n_rewards


class LazySpill:
    """`nel_resources.storage.spill.SpilledRows` for the shard file `final`, created (and
    pyarrow imported) at the first row, so neither is on the path to a shard's first request."""

    def __init__(self, final: Path) -> None:
        self._final = final
        self._rows: Any = None

    def _spill(self) -> Any:
        if self._rows is None:
            from nel_resources.storage.spill import SpilledRows, spill_path_for

            self._rows = SpilledRows(spill_path_for(self._final))
        return self._rows

    def add(self, row: dict[str, Any]) -> None:
        self._spill().add(row)

    def write_sorted(self) -> Path:
        """The rows, sorted, in a temp file beside the shard file (empty when there were none)."""
        tmp = self._final.with_name(f".{self._final.name}.tmp{os.getpid()}")
        tmp.parent.mkdir(parents=True, exist_ok=True)
        self._spill().write_sorted(tmp)
        return tmp

    def discard(self) -> None:
        if self._rows is not None:
            self._rows.discard()
